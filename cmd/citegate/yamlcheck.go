package main

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// decodeYAML reads a config file into c. Unlike yaml.v3's own messages (Go type names, and parser
// errors one line early), every error names the file, the line, the key and what is allowed there.
// It returns the line of every key it read ("channels.feishu.mode" → 12), so later checks on the
// values (an unknown search provider) can point at the line too.
func decodeYAML(path string, b []byte, c *Config) (map[string]int, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("config %s: %s", path, yamlSyntaxError(err))
	}
	lines := map[string]int{}
	if len(root.Content) == 0 {
		return lines, nil // an empty file is an empty config
	}
	doc := root.Content[0]
	var errs []error
	checkNode(path, doc, reflect.TypeOf(*c), "", lines, &errs)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := doc.Decode(c); err != nil {
		// checkNode accepts only what Decode can read; this is a safety net, not a user path.
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return lines, nil
}

// parserLineRe finds the line in a yaml.v3 syntax error.
var parserLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlSyntaxError rewrites a yaml.v3 syntax error with the right line. yaml.v3 reports the scanner's
// errors with 1-based lines but its parser's errors ("did not find expected …") with the 0-based
// line of the construct they are in, one too small.
func yamlSyntaxError(err error) string {
	msg := err.Error()
	m := parserLineRe.FindStringSubmatch(msg)
	if m == nil {
		return strings.TrimPrefix(msg, "yaml: ") + " (not valid YAML)"
	}
	line, _ := strconv.Atoi(m[1])
	if strings.HasPrefix(m[2], "did not find expected") {
		line++
	}
	return fmt.Sprintf("line %d: %s (not valid YAML)", line, m[2])
}

// checkNode checks node against the Go type t (a struct with yaml tags, or a scalar field) and
// records errors; prefix is the dotted key path of node.
func checkNode(path string, node *yaml.Node, t reflect.Type, prefix string, lines map[string]int, errs *[]error) {
	if node.Kind == yaml.AliasNode && node.Alias != nil {
		node = node.Alias
	}
	where := func(n *yaml.Node) string { return fmt.Sprintf("config %s line %d", path, n.Line) }
	name := prefix
	if name == "" {
		name = "the file"
	}
	switch t.Kind() {
	case reflect.Struct:
		if node.Kind != yaml.MappingNode {
			if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
				return // "channels:" with nothing under it
			}
			*errs = append(*errs, fmt.Errorf("%s: %s must be a mapping of keys (%s)", where(node), quoteKey(name), strings.Join(yamlKeys(t), ", ")))
			return
		}
		fields := map[string]reflect.StructField{}
		for i := range t.NumField() {
			f := t.Field(i)
			if tag := yamlName(f); tag != "" {
				fields[tag] = f
			}
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			key := k.Value
			full := key
			if prefix != "" {
				full = prefix + "." + key
			}
			f, ok := fields[key]
			if !ok {
				msg := fmt.Sprintf("%s: unknown key %s", where(k), quoteKey(full))
				if s := closest(key, yamlKeys(t)); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				*errs = append(*errs, fmt.Errorf("%s; allowed here: %s", msg, strings.Join(yamlKeys(t), ", ")))
				continue
			}
			if prev, dup := lines[full]; dup {
				*errs = append(*errs, fmt.Errorf("%s: key %s is already set on line %d", where(k), quoteKey(full), prev))
				continue
			}
			lines[full] = k.Line
			checkNode(path, v, f.Type, full, lines, errs)
		}
	case reflect.String:
		if node.Kind != yaml.ScalarNode {
			*errs = append(*errs, fmt.Errorf("%s: %s must be a single value%s", where(node), quoteKey(name), allowedHint(name)))
		}
	case reflect.Int:
		// yaml.v3 itself decides what it can read (0x1F, 1_000, overflow); only its message is ours.
		var v int
		if node.Kind != yaml.ScalarNode || node.Decode(&v) != nil {
			*errs = append(*errs, fmt.Errorf("%s: %s must be a whole number, got %s", where(node), quoteKey(name), shown(node)))
		}
	case reflect.Bool:
		var v bool
		if node.Kind != yaml.ScalarNode || node.Decode(&v) != nil {
			*errs = append(*errs, fmt.Errorf("%s: %s must be true or false, got %s", where(node), quoteKey(name), shown(node)))
		}
	default:
		// Config has only the kinds above; a new kind must be taught here, and the fuzz target
		// (FuzzDecodeYAML) fails on any Go type name reaching the user meanwhile.
	}
}

// enumValues lists the allowed values of the configuration keys that take one of a few words.
var enumValues = map[string][]string{
	"search":               {"local", "searxng", "tavily"},
	"lang":                 {"zh", "en"},
	"log_level":            {"debug", "info", "warn", "error"},
	"channels.feishu.mode": {"longconn", "webhook"},
}

func allowedHint(key string) string {
	if vals, ok := enumValues[key]; ok {
		return " (one of " + strings.Join(vals, ", ") + ")"
	}
	return ""
}

func quoteKey(k string) string {
	if k == "the file" {
		return k
	}
	return strconv.Quote(k)
}

func shown(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return "a list or mapping"
	}
	return strconv.Quote(n.Value)
}

func yamlName(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if tag == "-" {
		return ""
	}
	return tag
}

// yamlKeys lists the keys a struct accepts, in declaration order.
func yamlKeys(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := yamlName(t.Field(i)); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// closest returns the allowed key nearest to key when it is plausibly a typo (edit distance ≤ 2).
func closest(key string, allowed []string) string {
	best, bestD := "", 3
	for _, a := range allowed {
		if d := editDistance(strings.ToLower(key), a); d < bestD {
			best, bestD = a, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = slices.Min([]int{prev[j] + 1, cur[j-1] + 1, prev[j-1] + cost})
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
