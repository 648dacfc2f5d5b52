package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/internal/testkit"
	"github.com/citegate/citegate/store"
)

// The tests in this file drive the real binary, built once per test run (lazily, so test binaries
// re-executed as helper processes by other tests never build it).
var (
	cliBuildOnce sync.Once
	cliBinDir    string
	cliBinPath   string
	cliBuildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cliBinDir != "" {
		_ = os.RemoveAll(cliBinDir)
	}
	os.Exit(code)
}

func cliBinary(t *testing.T) string {
	t.Helper()
	cliBuildOnce.Do(func() {
		cliBinDir, cliBuildErr = os.MkdirTemp("", "citegate-cli-test-")
		if cliBuildErr != nil {
			return
		}
		cliBinPath = filepath.Join(cliBinDir, "citegate")
		out, err := exec.Command("go", "build", "-o", cliBinPath, ".").CombinedOutput()
		if err != nil {
			cliBuildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, cliBuildErr)
	return cliBinPath
}

// cliEnv is a clean environment for the binary: nothing from the developer's CITEGATE_* settings,
// HOME and the working directory in the test's temp dir.
func cliEnv(t *testing.T, kv ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	return append(env, kv...)
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// runBinary runs the binary to completion (bounded at 5 minutes, a hang guard only; the build is
// done before the clock starts).
func runBinary(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	bin := cliBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliResult{code, out.String(), errb.String()}
}

// serveProc is a running `citegate serve`.
type serveProc struct {
	cmd            *exec.Cmd
	stdout, stderr *testkit.SyncBuffer
	base           string
	done           chan struct{}
}

func startServe(t *testing.T, env []string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(cliBinary(t), append([]string{"serve"}, args...)...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	p := &serveProc{cmd: cmd, stdout: &testkit.SyncBuffer{}, stderr: &testkit.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop(t) })
	addrRe := regexp.MustCompile(`(?m)^  address +(\S+)`)
	deadline := time.Now().Add(3 * time.Minute) // a hang guard: start-up on a loaded machine is slow
	for {
		// The summary is written at once, so its first row means all of it is there.
		if m := addrRe.FindStringSubmatch(p.stdout.String()); m != nil {
			p.base = "http://" + m[1]
			break
		}
		select {
		case <-p.done:
			t.Fatalf("serve exited: %s\n%s", p.stdout.String(), p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed no summary: %s\n%s", p.stdout.String(), p.stderr.String())
		}
	}
	return p
}

// stop ends the process with SIGTERM (a clean shutdown) and waits.
func (p *serveProc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("serve did not stop on SIGTERM: %s", p.stderr.String())
	}
}

func cliFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func apiStatus(t *testing.T, base, token, path string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

var allCommands = []string{"[serve]", "ask", "user add", "user list", "user token", "user revoke", "user login", "user grant-operator", "user revoke-operator", "backup", "store copy", "version", "help"}

func TestCLIHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		r := runBinary(t, cliEnv(t), args...)
		require.Equal(t, 0, r.code, r.stderr)
		for _, c := range allCommands {
			assert.Contains(t, r.stdout, "citegate "+c, "%v lists %q", args, c)
		}
	}
	r := runBinary(t, cliEnv(t), "user", "--help")
	assert.Equal(t, 0, r.code)
	for _, c := range []string{"add", "list", "token", "revoke", "login", "grant-operator", "revoke-operator"} {
		assert.Contains(t, r.stdout, "citegate user "+c)
	}
	for _, args := range [][]string{{"serve", "--help"}, {"ask", "--help"}, {"user", "add", "--help"}, {"backup", "--help"}} {
		r := runBinary(t, cliEnv(t), args...)
		assert.Equal(t, 0, r.code, "%v", args)
		assert.Contains(t, r.stderr, "-data", "%v shows its flags", args)
	}
	r = runBinary(t, cliEnv(t), "frobnicate")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `unknown command "frobnicate"`)
	assert.Contains(t, r.stderr, "citegate backup FILE")
}

func TestCLIVersion(t *testing.T) {
	r := runBinary(t, cliEnv(t), "version")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `^citegate \S+ \(revision [^)]+\) go1\.\d+`, r.stdout)

	// What the build info holds is shown as it is.
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-30T08:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	assert.Equal(t, "citegate v1.2.3 (revision 0123456789ab, 2026-11-30T08:00:00Z, modified) go1.26.0", versionString(bi, true))
	assert.Equal(t, "citegate (no build information)", versionString(nil, false))
}

// TestCLIEnumFlagsValidated: every enum-valued setting is checked, from wherever it comes, and the
// error names the allowed values.
func TestCLIEnumFlagsValidated(t *testing.T) {
	cases := []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"serve", "--log-level", "loud"}, nil, `--log-level "loud" is not allowed: want debug, info, warn or error`},
		{[]string{"ask", "--log-level", "loud", "q"}, nil, `--log-level "loud" is not allowed`},
		{[]string{"user", "list", "--log-level", "loud"}, nil, `--log-level "loud" is not allowed`},
		{[]string{"serve", "--search", "bing"}, nil, `--search "bing" is not allowed: want local, searxng or tavily`},
		{[]string{"serve", "--lang", "fr"}, nil, `--lang "fr" is not allowed: want zh or en`},
		{[]string{"serve"}, []string{"CITEGATE_FEISHU_MODE=push"}, `CITEGATE_FEISHU_MODE "push" is not allowed: want longconn or webhook`},
		{[]string{"backup", "x.db", "--lang", "de"}, nil, `--lang "de" is not allowed`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := runBinary(t, cliEnv(t, append(c.env, "CITEGATE_DATA="+t.TempDir())...), c.args...)
			assert.Equal(t, 1, r.code)
			assert.Contains(t, r.stderr, c.want)
		})
	}
}

// TestCLIPrecedence checks flags > environment > file > defaults for every command, through the
// setting whose source an error names, and the ask bug: CITEGATE_LOG_LEVEL used to beat --log-level.
func TestCLIPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "citegate.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("addr: 127.0.0.1:1\n\nsearch: from-file\n"), 0o600))
	commands := [][]string{{"serve"}, {"ask", "q"}, {"user", "add", "n"}, {"user", "list"}, {"user", "token", "n"},
		{"user", "revoke", "n"}, {"user", "login", "n"}, {"backup", "b.db"}}
	for _, cmd := range commands {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			base := cliEnv(t, "CITEGATE_DATA="+t.TempDir(), "CITEGATE_CONFIG="+cfgPath)
			r := runBinary(t, append(base, "CITEGATE_SEARCH=from-env"), append(cmd, "--search", "from-flag")...)
			assert.Contains(t, r.stderr, `--search "from-flag" is not allowed`, "flag beats env and file")
			r = runBinary(t, append(base, "CITEGATE_SEARCH=from-env"), cmd...)
			assert.Contains(t, r.stderr, `CITEGATE_SEARCH "from-env" is not allowed`, "env beats file")
			r = runBinary(t, base, cmd...)
			assert.Contains(t, r.stderr, `search (`+cfgPath+` line 3) "from-file" is not allowed`, "file beats default; the line is named")
		})
	}

	// ask: the flag wins over the environment (a bad env value would fail validation if it won).
	data := t.TempDir()
	r := runBinary(t, cliEnv(t, "CITEGATE_DATA="+data, "CITEGATE_LOG_LEVEL=loud"), "ask", "--log-level", "error", "年假怎么申请？")
	assert.Equal(t, 0, r.code, r.stderr)
	r = runBinary(t, cliEnv(t, "CITEGATE_DATA="+data, "CITEGATE_LOG_LEVEL=loud"), "ask", "年假怎么申请？")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `CITEGATE_LOG_LEVEL "loud" is not allowed`)

	// user add: --data beats CITEGATE_DATA beats the file's data.
	flagDir, envDir, fileDir := t.TempDir(), t.TempDir(), t.TempDir()
	dataCfg := filepath.Join(dir, "data.yaml")
	require.NoError(t, os.WriteFile(dataCfg, []byte("data: "+fileDir+"\n"), 0o600))
	env := cliEnv(t, "CITEGATE_CONFIG="+dataCfg, "CITEGATE_DATA="+envDir)
	require.Equal(t, 0, runBinary(t, env, "user", "add", "a", "--data", flagDir).code)
	require.Equal(t, 0, runBinary(t, env, "user", "add", "b").code)
	require.Equal(t, 0, runBinary(t, cliEnv(t, "CITEGATE_CONFIG="+dataCfg), "user", "add", "c").code)
	for d, name := range map[string]string{flagDir: "a", envDir: "b", fileDir: "c"} {
		r := runBinary(t, cliEnv(t), "user", "list", "--data", d)
		assert.Regexp(t, `(?m)^`+name+` +active`, r.stdout, "user %s landed in %s", name, d)
		assert.Equal(t, 1, strings.Count(r.stdout, "active"))
	}
}

func TestCLIYAMLErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"addr: 127.0.0.1:9\nserch: local\n", `line 2: unknown key "serch" (did you mean "search"?); allowed here: data, addr,`},
		{"channels:\n  feishu:\n    app_secrt: x\n", `line 3: unknown key "channels.feishu.app_secrt" (did you mean "app_secret"?); allowed here: app_id, app_secret,`},
		{"data: ./d\nmax_rounds: many\n", `line 2: "max_rounds" must be a whole number, got "many"`},
		{"channels:\n  sources_footer: maybe\n", `line 2: "channels.sources_footer" must be true or false, got "maybe"`},
		{"llm: deepseek\n", `line 1: "llm" must be a mapping of keys (base_url, model, api_key)`},
		{"data: ./d\nlang: fr\n", `lang (CFG line 2) "fr" is not allowed: want zh or en`},
		{"channels:\n  feishu: {mode: push}\n", `channels.feishu.mode (CFG line 2) "push" is not allowed: want longconn or webhook`},
		// Syntax errors on line 2 are reported on line 2 (yaml.v3 says line 1 for the first two).
		{"data: ./d\n- item\n", "line 2: did not find expected key (not valid YAML)"},
		{"data: ./d\nsearch: [local\n", "line 2: did not find expected ',' or ']' (not valid YAML)"},
		{"data: ./d\n  addr: x\n", "line 2: mapping values are not allowed in this context (not valid YAML)"},
		{"data: ./d\ndata: ./e\n", `line 2: key "data" is already set on line 1`},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			require.NoError(t, os.WriteFile(path, []byte(c.yaml), 0o600))
			r := runBinary(t, cliEnv(t, "CITEGATE_DATA="+t.TempDir()), "user", "list", "--config", path)
			assert.Equal(t, 1, r.code)
			assert.Contains(t, r.stderr, strings.ReplaceAll(c.want, "CFG", path))
			assert.NotContains(t, r.stderr, "main.", "no Go type names")
		})
	}
}

func TestCLIPortBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	r := runBinary(t, cliEnv(t, "CITEGATE_DATA="+t.TempDir()), "serve", "--addr", ln.Addr().String())
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "already in use")
	assert.Contains(t, r.stderr, "--addr")
}

func TestCLIFlagsAfterArguments(t *testing.T) {
	data := t.TempDir()
	r := runBinary(t, cliEnv(t), "user", "add", "alice", "--data", data)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `^[A-Za-z0-9_-]{43}\n$`, r.stdout)
	r = runBinary(t, cliEnv(t), "user", "--data", data, "list") // not a flag of `user` itself
	assert.Equal(t, 2, r.code)
	r = runBinary(t, cliEnv(t), "user", "list", "--data", data)
	assert.Contains(t, r.stdout, "alice")
	r = runBinary(t, cliEnv(t), "ask", "年假怎么申请？", "--data", data, "--lang", "zh")
	assert.Equal(t, 0, r.code, r.stderr)
	r = runBinary(t, cliEnv(t), "user", "add", "--data", data, "--", "-dash")
	assert.Equal(t, 0, r.code, "after -- everything is an argument: %s", r.stderr)
	r = runBinary(t, cliEnv(t), "user", "add", "a", "b", "--data", data)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "exactly one NAME is required (got 2)")
}

// TestCLIUsersOffline runs every user command with no server: straight on the database.
func TestCLIUsersOffline(t *testing.T) {
	env := cliEnv(t, "CITEGATE_DATA="+t.TempDir())
	r := runBinary(t, env, "user", "list")
	assert.Contains(t, r.stdout, "no users yet")
	r = runBinary(t, env, "user", "add", "local")
	require.Equal(t, 0, r.code, r.stderr)
	old := strings.TrimSpace(r.stdout)

	r = runBinary(t, env, "user", "add", "Local")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `the name "Local" is already taken. To log in as Local, run: citegate user login Local`)
	assert.NotContains(t, r.stderr, "store:")
	assert.NotContains(t, r.stderr, "conflict")

	r = runBinary(t, env, "user", "login", "local")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `^http://127\.0\.0\.1:8080/login\?code=[A-Za-z0-9_-]{43}\n$`, r.stdout)
	assert.NotContains(t, r.stdout, old)

	r = runBinary(t, env, "user", "token", "local")
	require.Equal(t, 0, r.code, r.stderr)
	rotated := strings.TrimSpace(r.stdout)
	assert.NotEqual(t, old, rotated)
	assert.Contains(t, r.stderr, "the old one")

	r = runBinary(t, env, "user", "revoke", "local")
	require.Equal(t, 0, r.code, r.stderr)
	r = runBinary(t, env, "user", "login", "local")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "local is revoked and cannot log in; give them a new token first: citegate user token local")
	r = runBinary(t, env, "user", "list")
	assert.Regexp(t, `(?m)^local +revoked`, r.stdout)
	r = runBinary(t, env, "user", "token", "nobody")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `there is no user named "nobody" (see: citegate user list)`)
	r = runBinary(t, env, "user", "add", "  ")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "citegate user: user name is empty")
	r = runBinary(t, env, "user", "add", strings.Repeat("x", 65))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "user name has 65 characters, at most 64 allowed")
}

// TestCLIUsersWhileServing drives the user commands through the admin socket of a running serve:
// rotation stops the old token at once, also in an open websocket, and a printed login link logs a
// browser in once.
func TestCLIUsersWhileServing(t *testing.T) {
	data := t.TempDir()
	env := cliEnv(t, "CITEGATE_DATA="+data, "CITEGATE_LOG_LEVEL=warn")
	srv := startServe(t, env, "--addr", cliFreeAddr(t))
	out := srv.stdout.String()
	for _, k := range []string{"address", "public URL", "store", "model", "search", "channels"} {
		assert.Regexp(t, `(?m)^  `+k+` +\S`, out, "the summary names the %s", k)
	}
	assert.Contains(t, out, "bbolt "+filepath.Join(data, "citegate.db"))
	assert.Contains(t, out, "extractive")
	assert.Contains(t, out, srv.base+"/login?code=", "the startup login link is a one-time code")
	assert.NotContains(t, out, "?token=")

	r := runBinary(t, env, "user", "add", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	old := strings.TrimSpace(r.stdout)
	r = runBinary(t, env, "user", "add", "local")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `the name "local" is already taken. To log in as local, run: citegate user login local`)
	assert.NotContains(t, r.stderr, "admin")
	r = runBinary(t, env, "user", "list")
	assert.Regexp(t, `(?m)^alice +active`, r.stdout)
	assert.Regexp(t, `(?m)^local +active`, r.stdout)

	// An open websocket with the old token is closed by the rotation.
	h := http.Header{}
	h.Set("Authorization", "Bearer "+old)
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.base, "http")+"/ws", h)
	require.NoError(t, err)
	defer ws.Close()
	require.NoError(t, ws.WriteJSON(map[string]any{"type": "session.open", "sessionId": "x"}))
	_, _, err = ws.ReadMessage() // the error frame: the connection is registered
	require.NoError(t, err)
	r = runBinary(t, env, "user", "token", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	rotated := strings.TrimSpace(r.stdout)
	assert.Equal(t, http.StatusUnauthorized, apiStatus(t, srv.base, old, "/api/me"))
	assert.Equal(t, http.StatusOK, apiStatus(t, srv.base, rotated, "/api/me"))
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			assert.False(t, os.IsTimeout(err), "the server closed the old token's websocket: %v", err)
			break
		}
	}

	// A printed login link logs a browser in once.
	r = runBinary(t, env, "user", "login", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	link := strings.TrimSpace(r.stdout)
	require.True(t, strings.HasPrefix(link, srv.base+"/login?code="), link)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(link)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	resp, err = noRedirect.Get(link)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	r = runBinary(t, env, "user", "revoke", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, http.StatusUnauthorized, apiStatus(t, srv.base, rotated, "/api/me"))
	r = runBinary(t, env, "user", "login", "bob")
	assert.Contains(t, r.stderr, `there is no user named "bob"`)
}

// TestCLIBackupRestore takes an online backup while serve runs, then restores it the documented
// way (stop, copy the file into a data directory as citegate.db, start) and finds the data.
func TestCLIBackupRestore(t *testing.T) {
	data := t.TempDir()
	env := cliEnv(t, "CITEGATE_DATA="+data, "CITEGATE_LOG_LEVEL=warn")
	srv := startServe(t, env, "--addr", cliFreeAddr(t))
	r := runBinary(t, env, "user", "add", "alice")
	require.Equal(t, 0, r.code, r.stderr)
	token := strings.TrimSpace(r.stdout)

	// One chat turn over the websocket, so the backup holds a session with an answer.
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.base, "http")+"/ws", h)
	require.NoError(t, err)
	require.NoError(t, ws.WriteJSON(map[string]any{"type": "chat.send", "text": "年假怎么申请？"}))
	_ = ws.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		var f map[string]any
		require.NoError(t, ws.ReadJSON(&f))
		if f["type"] == "run.finished" {
			break
		}
	}
	ws.Close()

	backup := filepath.Join(t.TempDir(), "nightly.db")
	r = runBinary(t, env, "backup", backup)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "wrote "+backup)
	fi, err := os.Stat(backup)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	srv.stop(t)

	// Restore into a fresh data directory and start from it.
	restored := t.TempDir()
	b, err := os.ReadFile(backup)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(restored, "citegate.db"), b, 0o600))
	srv2 := startServe(t, cliEnv(t, "CITEGATE_DATA="+restored, "CITEGATE_LOG_LEVEL=warn"), "--addr", cliFreeAddr(t))
	req, _ := http.NewRequest("GET", srv2.base+"/api/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the token from before the backup works")
	var sessions struct {
		Sessions []struct{ ID, Title string } `json:"sessions"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sessions))
	require.Len(t, sessions.Sessions, 1)
	assert.Equal(t, "年假怎么申请？", sessions.Sessions[0].Title)
	srv2.stop(t)

	// Offline backup (no server) of the restored directory, opened on its own.
	again := filepath.Join(t.TempDir(), "offline.db")
	r = runBinary(t, cliEnv(t, "CITEGATE_DATA="+restored), "backup", again)
	require.Equal(t, 0, r.code, r.stderr)
	st, err := store.Open(again, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	users, err := st.ListUsers(context.Background())
	require.NoError(t, err)
	assert.NotEmpty(t, users)
	r = runBinary(t, cliEnv(t, "CITEGATE_DATA="+restored), "backup", filepath.Join(restored, "citegate.db"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "is the database itself")
}
