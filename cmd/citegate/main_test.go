package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent/tools"
	"github.com/citegate/citegate/store"
)

// env returns a getenv over a fixed map, so tests never read the real environment.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func runCLI(t *testing.T, kv map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb, env(kv))
	return code, out.String(), errb.String()
}

func TestAskOfflineDefault(t *testing.T) {
	data := t.TempDir()
	code, out, stderr := runCLI(t, map[string]string{"CITEGATE_DATA": data}, "ask", "电子发票抬头写错了怎么办？")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "红冲")
	assert.Regexp(t, `\[1\]`, out)
	assert.NotContains(t, out, "[^", "raw markers never reach the terminal")
	require.Contains(t, out, "来源：")
	assert.Contains(t, stderr, "extractive (no LLM)")

	corpus, err := tools.LoadCorpus("", "http://127.0.0.1:8080")
	require.NoError(t, err)
	known := map[string]bool{}
	for _, d := range corpus.Docs() {
		known[d.URL] = true
	}
	lines := regexp.MustCompile(`(?m)^\[(\d+)\] .* — (\S+)$`).FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, lines, "a sources list follows the answer:\n%s", out)
	for i, l := range lines {
		assert.Equal(t, strconv.Itoa(i+1), l[1], "display numbers run 1..k")
		assert.True(t, known[l[2]], "source %s is not a corpus document", l[2])
	}
	// Every [k] in the body has its entry.
	body := out[:strings.Index(out, "来源：")]
	for _, m := range regexp.MustCompile(`\[(\d+)\]`).FindAllStringSubmatch(body, -1) {
		k := m[1]
		assert.Contains(t, out, "\n["+k+"] ")
	}
	// The run was stored with its citations.
	st, err := store.Open(filepath.Join(data, "citegate.db"), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	sessions, err := st.ListSessions(context.Background(), "cli")
	require.NoError(t, err)
	require.Len(t, sessions, 1)
}

func TestAskNothingFound(t *testing.T) {
	code, out, stderr := runCLI(t, map[string]string{"CITEGATE_DATA": t.TempDir()}, "ask", "火星上的天气如何")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, out, "来源")
	assert.NotRegexp(t, `\[\d+\]`, out)
}

func TestAskWhileDatabaseLocked(t *testing.T) {
	data := t.TempDir()
	st, err := store.Open(filepath.Join(data, "citegate.db"), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	code, out, stderr := runCLI(t, map[string]string{"CITEGATE_DATA": data}, "ask", "年假怎么申请？")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "in use")
	assert.NotEmpty(t, out)
}

func TestUserAddPrintsTokenAlone(t *testing.T) {
	data := t.TempDir()
	code, out, stderr := runCLI(t, map[string]string{"CITEGATE_DATA": data}, "user", "add", "alice")
	require.Equal(t, 0, code, stderr)
	token := strings.TrimSpace(out)
	assert.Regexp(t, `^[A-Za-z0-9_-]{40,}$`, token)
	assert.Equal(t, token+"\n", out, "stdout holds the token alone")

	st, err := store.Open(filepath.Join(data, "citegate.db"), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	u, err := st.UserByToken(context.Background(), token)
	require.NoError(t, err)
	assert.Equal(t, "alice", u.Name)
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"ask"}, 2, "question is required"},
		{[]string{"user"}, 2, "user add"},
		{[]string{"user", "add"}, 2, "exactly one NAME"},
		{[]string{"serve", "--search", "bing"}, 1, "want local, searxng or tavily"},
		{[]string{"serve", "--llm-base-url", "http://127.0.0.1:1"}, 1, "needs --llm-model"},
		{[]string{"ask", "--bogus", "x"}, 2, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, map[string]string{"CITEGATE_DATA": t.TempDir()}, tt.args...)
			assert.Equal(t, tt.code, code)
			assert.Contains(t, stderr, tt.msg)
		})
	}
}

func TestHelpDocumentsEveryFlag(t *testing.T) {
	for _, cmd := range [][]string{{"serve", "--help"}, {"ask", "--help"}, {"user", "add", "--help"}} {
		code, _, stderr := runCLI(t, nil, cmd...)
		assert.Equal(t, 0, code)
		for _, f := range []string{"-data", "-addr", "-public-url", "-llm-base-url", "-llm-model", "-search", "-searxng-url", "-kb", "-fetch-allow", "-config"} {
			assert.Contains(t, stderr, f, "%v --help lacks %s", cmd, f)
		}
		assert.Contains(t, stderr, "CITEGATE_LLM_API_KEY", "secrets are named with their env variable")
	}
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "citegate.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
addr: 127.0.0.1:9000
search: searxng
searxng_url: http://search.internal
llm: {base_url: "http://llm.internal/v1", model: qwen, api_key: from-file}
channels:
  wechat: {app_id: wx1, app_secret: s1, token: t1}
  sources_footer: true
`), 0o600))
	fs := newFlagSet("t", "t", &bytes.Buffer{})
	fv := registerFlags(fs)
	require.NoError(t, fs.Parse([]string{"--config", path, "--addr", "127.0.0.1:9100"}))
	c, err := loadConfig(fv, env(map[string]string{"CITEGATE_LLM_MODEL": "deepseek", "CITEGATE_WECHAT_APP_SECRET": "s2"}))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9100", c.Addr, "flag beats file")
	assert.Equal(t, "http://127.0.0.1:9100", c.PublicURL, "public URL follows addr")
	assert.Equal(t, "deepseek", c.LLM.Model, "env beats file")
	assert.Equal(t, "from-file", c.LLM.APIKey)
	assert.Equal(t, "searxng", c.Search)
	assert.Equal(t, "s2", c.Channels.WeChat.AppSecret)
	assert.Equal(t, "wx1", c.Channels.WeChat.AppID)
	assert.True(t, c.Channels.SourcesFooter)
	chans, err := buildChannels(c, newLogger("error", &bytes.Buffer{}))
	require.NoError(t, err)
	require.Len(t, chans, 1)
	assert.Equal(t, "wechat", chans[0].Name())

	require.NoError(t, os.WriteFile(path, []byte("bogus_key: 1\n"), 0o600))
	_, err = loadConfig(&flagValues{config: path}, env(nil))
	assert.ErrorContains(t, err, "bogus_key", "unknown keys are reported, not ignored")
}

// TestAskSaysWhenKBLinksNeedServe: ask cites bundled corpus pages under the public URL; when nothing
// answers at the configured address it says those links open only while serve runs, and when a
// server is there it says nothing.
func TestAskSaysWhenKBLinksNeedServe(t *testing.T) {
	addr := freeAddr(t)
	code, out, stderr := runCLI(t, map[string]string{"CITEGATE_DATA": t.TempDir(), "CITEGATE_ADDR": addr}, "ask", "电子发票抬头写错了怎么办？")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "http://"+addr+"/kb/")
	assert.Contains(t, stderr, "citegate serve")

	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	defer ln.Close()
	code, _, stderr = runCLI(t, map[string]string{"CITEGATE_DATA": t.TempDir(), "CITEGATE_ADDR": addr}, "ask", "电子发票抬头写错了怎么办？")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "citegate serve")
}
