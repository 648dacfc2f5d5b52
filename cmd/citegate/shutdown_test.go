package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	feishufake "github.com/citegate/citegate/internal/fakes/feishu"
	"github.com/citegate/citegate/internal/testkit"
	"github.com/citegate/citegate/store"
)

// hangingLLM is an OpenAI-compatible chat completions server that streams the first words of an
// answer and then keeps the stream open until the client goes away: a run that is mid-answer.
type hangingLLM struct {
	*httptest.Server
	streaming chan struct{} // closed once the first answer chunks were flushed
	once      sync.Once
}

func newHangingLLM(t *testing.T) *hangingLLM {
	l := &hangingLLM{streaming: make(chan struct{})}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i, piece := range []string{"关于这个问题，", "先说结论：", "正在整理"} {
			fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"hang\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":%q},\"finish_reason\":null}]}\n\n", piece)
			fl.Flush()
			_ = i
		}
		l.once.Do(func() { close(l.streaming) })
		<-r.Context().Done() // never finishes on its own
	}))
	t.Cleanup(l.Close)
	return l
}

// TestServeShutdownEndsOpenCards runs serve with its production wiring (run, as main does; the
// context's cancellation is what SIGTERM does through signal.NotifyContext) with a Feishu channel
// against the loopback fake. A user's question is mid-answer — its streaming card open — when the
// server is told to stop. serve must return within its bound; the card must leave the streaming
// state with a clear "server restarting" ending; the run must be marked (CANCELLED, never left
// RUNNING).
func TestServeShutdownEndsOpenCards(t *testing.T) {
	fake := feishufake.New(feishufake.Options{})
	defer fake.Close()
	llm := newHangingLLM(t)
	data, addr := t.TempDir(), freeAddr(t)
	o := fake.Options()
	envs := map[string]string{
		"CITEGATE_DATA":              data,
		"CITEGATE_ADDR":              addr,
		"CITEGATE_LOG_LEVEL":         "warn",
		"CITEGATE_LLM_BASE_URL":      llm.URL + "/v1",
		"CITEGATE_LLM_MODEL":         "hang",
		"CITEGATE_FEISHU_APP_ID":     o.AppID,
		"CITEGATE_FEISHU_APP_SECRET": o.AppSecret,
		"CITEGATE_FEISHU_BASE_URL":   fake.URL(),
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stdout, stderr testkit.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve"}, &stdout, &stderr, env(envs)) }()

	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	require.NoError(t, fake.WaitConnected(wctx, 1), "the Feishu channel connects: %s", stderr.String())
	_, err := fake.Push(wctx, feishufake.MessageEvent{MessageID: "om_sd1", ChatID: "oc_sd", Text: "请详细说明报销流程"}.JSON(), 1)
	require.NoError(t, err)
	select {
	case <-llm.streaming:
	case <-wctx.Done():
		t.Fatalf("the model was never asked: %s", stderr.String())
	}
	// The card is open, streaming, and shows the first words: the stop comes mid-answer. (Waiting
	// for the card alone let the stop overtake the card's first text update on a busy machine.)
	require.Eventually(t, func() bool {
		cs := fake.Cards()
		return len(cs) == 1 && cs[0].Streaming && strings.Contains(cs[0].Elements["answer"], "关于这个问题")
	}, 30*time.Second, 10*time.Millisecond, "a streaming card shows the first words")

	stopped := time.Now()
	stop() // SIGTERM
	select {
	case code := <-done:
		assert.Equal(t, 0, code, "serve exits cleanly: %s", stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop")
	}
	t.Logf("serve returned %s after the stop", time.Since(stopped).Round(time.Millisecond))

	cs := fake.Cards()
	require.Len(t, cs, 1)
	assert.False(t, cs[0].Streaming, "the card left the streaming state")
	final := cs[0].Elements["answer"]
	assert.Contains(t, final, "服务正在重启", "the card says why it stopped: %q", final)
	assert.Contains(t, final, "关于这个问题", "what was streamed stays: %q", final)

	st, err := store.Open(filepath.Join(data, "citegate.db"), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	assert.Zero(t, st.RecoveredRuns(), "no run was left RUNNING")
	sid, err := st.ConversationSession(context.Background(), "feishu:oc_sd")
	require.NoError(t, err)
	runs, err := st.ListRuns(context.Background(), sid)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, store.PhaseCancelled, runs[0].Phase)
}
