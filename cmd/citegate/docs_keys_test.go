package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docsRoot is the repository's docs directory, seen from this package's directory (where go test
// runs).
const docsRoot = "../../docs"

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(docsRoot, name))
	if err != nil {
		t.Fatalf("read docs/%s: %v", name, err)
	}
	return string(b)
}

// configYAMLKeys lists the dotted YAML keys of a config struct type, from the same yaml tags the YAML
// checker (checkNode) and the decoder accept, so a key added to Config shows up here at once.
func configYAMLKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		key := prefix + tag
		if f.Type.Kind() == reflect.Struct {
			out = append(out, configYAMLKeys(f.Type, key+".")...)
			continue
		}
		out = append(out, key)
	}
	return out
}

// envNames lists every environment variable config.go reads: the literal CITEGATE_* names and the
// channel variables built by env("CHANNEL", "KEY", …).
func envNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("config.go")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`"(CITEGATE_[A-Z_]+)"`).FindAllStringSubmatch(src, -1) {
		seen[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`env\("([A-Z]+)", "([A-Z_]+)"`).FindAllStringSubmatch(src, -1) {
		seen["CITEGATE_"+m[1]+"_"+m[2]] = true
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestDocsConfigKeys fails when the configuration code accepts a YAML key, a flag or an
// environment variable that docs/configuration.md does not document.
func TestDocsConfigKeys(t *testing.T) {
	doc := readDoc(t, "configuration.md")
	keys := configYAMLKeys(reflect.TypeOf(Config{}), "")
	if len(keys) < 20 {
		t.Fatalf("found only %d YAML keys in Config: %v", len(keys), keys)
	}
	for _, k := range keys {
		if !strings.Contains(doc, "`"+k+"`") {
			t.Errorf("YAML key %q is accepted by the config code but not documented in docs/configuration.md", k)
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	registerFlags(fs)
	nflags := 0
	fs.VisitAll(func(f *flag.Flag) {
		nflags++
		if !strings.Contains(doc, "`--"+f.Name+"`") {
			t.Errorf("flag --%s is not documented in docs/configuration.md", f.Name)
		}
	})
	if nflags < 10 {
		t.Fatalf("found only %d flags", nflags)
	}
	envs := envNames(t)
	if len(envs) < 30 {
		t.Fatalf("found only %d environment variables in config.go: %v", len(envs), envs)
	}
	for _, e := range envs {
		if !strings.Contains(doc, "`"+e+"`") {
			t.Errorf("environment variable %s is read by config.go but not documented in docs/configuration.md", e)
		}
	}
}

// TestDocsChannelEnvNames checks the rule the page states: each channel key may come from
// CITEGATE_<CHANNEL>_<KEY> (sources_footer from CITEGATE_SOURCES_FOOTER). It sets each variable
// alone and expects the matching field to change, so the documented names are the ones that work.
func TestDocsChannelEnvNames(t *testing.T) {
	ct := reflect.TypeOf(ChannelsConfig{})
	for i := range ct.NumField() {
		f := ct.Field(i)
		tag := f.Tag.Get("yaml")
		var subs []reflect.StructField
		prefix := "CITEGATE_" + strings.ToUpper(tag) + "_"
		if f.Type.Kind() == reflect.Struct {
			for j := range f.Type.NumField() {
				subs = append(subs, f.Type.Field(j))
			}
		} else {
			subs = []reflect.StructField{f}
			prefix = "CITEGATE_"
		}
		for _, sf := range subs {
			name := prefix + strings.ToUpper(sf.Tag.Get("yaml"))
			val := "x-value"
			if sf.Type.Kind() == reflect.Bool {
				val = "true"
			} else if name == "CITEGATE_FEISHU_MODE" {
				val = "webhook"
			}
			c, err := loadConfig(&flagValues{}, func(k string) string {
				if k == name {
					return val
				}
				return ""
			})
			if err != nil {
				t.Errorf("%s=%s: %v", name, val, err)
				continue
			}
			got := reflect.ValueOf(c.Channels)
			if f.Type.Kind() == reflect.Struct {
				got = got.Field(i).FieldByName(sf.Name)
			} else {
				got = got.Field(i)
			}
			want := reflect.ValueOf(val)
			if sf.Type.Kind() == reflect.Bool {
				want = reflect.ValueOf(true)
			}
			if !got.Equal(want) {
				t.Errorf("%s=%s: channels.%s.%s = %v, want %v", name, val, tag, sf.Tag.Get("yaml"), got, want)
			}
		}
	}
}

// codeMetrics lists every citegate_* metric name defined in the non-test Go sources of the
// repository (collector options and hand-written descriptors).
func codeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(citegate_[a-z0-9_]+)"`)
	out := map[string]bool{}
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 5 {
		t.Fatalf("found only %d metrics in the code: %v", len(out), out)
	}
	return out
}

// TestDocsMetricsListed fails when a metric defined in the code is missing from the metrics list in
// docs/deployment.md.
func TestDocsMetricsListed(t *testing.T) {
	doc := readDoc(t, "deployment.md")
	for m := range codeMetrics(t) {
		if !strings.Contains(doc, "`"+m+"`") {
			t.Errorf("metric %s is defined in the code but not listed in docs/deployment.md", m)
		}
	}
}

// TestDocsGrafanaDashboard checks that docs/grafana-dashboard.json parses, that every panel queries
// only metrics the code defines, and that the panels the deployment guide promises are there.
func TestDocsGrafanaDashboard(t *testing.T) {
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readDoc(t, "grafana-dashboard.json")), &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	metrics := codeMetrics(t)
	nameRe := regexp.MustCompile(`citegate_[a-z0-9_]+`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := nameRe.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: expr %q names no citegate metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && metrics[b] {
						base = b
					}
				}
				if !metrics[base] {
					t.Errorf("panel %q: expr %q uses %s, which the code does not define", p.Title, tg.Expr, n)
				}
				used[base] = true
			}
		}
	}
	for _, m := range []string{"citegate_runs_total", "citegate_answer_delta_latency_seconds",
		"citegate_citation_markers_total", "citegate_links_hidden_total", "citegate_channel_state",
		"citegate_websocket_clients"} {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

// TestDocsLinkedFromReadme fails when a page under docs/ is not linked from the README, or when the
// README links outside the repository (a path that is dead after a clone).
func TestDocsLinkedFromReadme(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if strings.Contains(readme, "](../") || strings.Contains(readme, "`../") {
		t.Error("README.md refers to a path outside the repository")
	}
	pages, err := filepath.Glob(filepath.Join(docsRoot, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() {
			continue
		}
		link := "(docs/" + filepath.Base(p) + ")"
		if !strings.Contains(readme, link) {
			t.Errorf("README.md does not link docs/%s", filepath.Base(p))
		}
	}
}
