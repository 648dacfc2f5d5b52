package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

func TestWSChatNewSessionFrames(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	ws := e.mustWS(tok)
	tab2 := e.mustWS(tok) // a second tab sees the run too

	ws.send(map[string]any{"type": "chat.send", "text": "电子发票抬头写错了怎么办？\n第二行", "clientMsgId": "c-1"})
	frames := ws.until("run.finished")
	got := types(frames)
	require.Equal(t, "session.created", got[0])
	require.Equal(t, "run.started", got[1])
	assert.Equal(t, []string{"answer.final", "citations", "run.finished"}, got[len(got)-3:])
	assert.Contains(t, got, "tool.started")
	assert.Contains(t, got, "tool.finished")
	assert.Contains(t, got, "answer.delta")

	created := frames[0]
	sid, _ := created["sessionId"].(string)
	require.NotEmpty(t, sid)
	assert.Equal(t, "c-1", created["clientMsgId"])
	sess := created["session"].(map[string]any)
	assert.Equal(t, sid, sess["id"])
	assert.Equal(t, "电子发票抬头写错了怎么办？", sess["title"], "title from the first line")
	stored, err := e.st.GetSession(context.Background(), sid)
	require.NoError(t, err)
	assert.Equal(t, u.ID, stored.UserID)
	assert.Equal(t, "desktop", stored.Channel)

	var deltas strings.Builder
	var runID string
	for _, f := range frames[1:] {
		assert.Equal(t, sid, f["sessionId"], "every run frame names its session: %v", f)
		if runID == "" {
			runID, _ = f["runId"].(string)
		}
		assert.Equal(t, runID, f["runId"])
		switch f["type"] {
		case "run.started":
			assert.NotZero(t, f["userMessageId"])
		case "tool.started":
			assert.Equal(t, "web_search", f["tool"])
			assert.Equal(t, "call_1", f["callId"])
			assert.Contains(t, f["arguments"], "query")
		case "tool.finished":
			assert.Equal(t, true, f["ok"])
		case "answer.delta":
			txt := f["text"].(string)
			assert.NotContains(t, txt, "[^")
			deltas.WriteString(txt)
		}
	}
	final := frames[len(frames)-3]
	content := final["content"].(string)
	assert.True(t, strings.HasSuffix(content, "[^1^]"), "answer.final content keeps raw markers: %q", content)
	assert.Equal(t, citations.Strip(content), deltas.String())
	assert.NotContains(t, final["html"], "cite-ref", "no superscripts before the citations are verified")
	assert.NotContains(t, final["html"], "[^1^]")

	cf := frames[len(frames)-2]
	assert.Equal(t, final["messageId"], cf["messageId"])
	cits := cf["citations"].([]any)
	require.Len(t, cits, 1)
	assert.Equal(t, "https://example.com/a", cits[0].(map[string]any)["url"])
	html := cf["html"].(string)
	assert.Contains(t, html, `class="cite-ref"`)
	assert.Contains(t, html, "来源 1")
	assert.Contains(t, html, "https://example.com/a")

	fin := frames[len(frames)-1]
	assert.Equal(t, "COMPLETED", fin["phase"])
	assert.NotContains(t, fin, "error")

	// The second tab got the same run, starting with session.created.
	// Each connection may receive the text in a different number of delta frames.
	frames2 := tab2.until("run.finished")
	assert.Equal(t, types(joinDeltas(frames)), types(joinDeltas(frames2)))

	// session.open replays the stored record with sources.
	ws.send(map[string]any{"type": "session.open", "sessionId": sid})
	h := ws.next()
	require.Equal(t, "session.history", h["type"])
	assert.Equal(t, sid, h["sessionId"])
	msgs := h["messages"].([]any)
	require.Len(t, msgs, 2)
	assert.Equal(t, "USER", msgs[0].(map[string]any)["role"])
	last := msgs[1].(map[string]any)
	assert.Equal(t, content, last["content"])
	assert.Contains(t, last["html"], "来源 1")
	assert.Len(t, last["citations"], 1)

	// A follow-up in the same session does not create a session.
	ws.send(map[string]any{"type": "chat.send", "sessionId": sid, "text": "再问一次"})
	frames = ws.until("run.finished")
	assert.Equal(t, "run.started", frames[0]["type"])
	list, err := e.st.ListSessions(context.Background(), u.ID)
	require.NoError(t, err)
	assert.Len(t, list, 1)
}

func TestWSEnglishClientGetsEnglishSources(t *testing.T) {
	e := newEnv(t)
	_, tok := e.user("alice")
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	h.Set("Accept-Language", "en-US,en;q=0.9")
	ws, _, err := e.dialWS(h)
	require.NoError(t, err)
	ws.send(map[string]any{"type": "chat.send", "text": "invoice"})
	frames := ws.until("run.finished")
	cf := frames[len(frames)-2]
	require.Equal(t, "citations", cf["type"])
	assert.Contains(t, cf["html"], "Sources 1")
}

func TestWSBadFramesKeepConnection(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.user("alice")
	_, bobTok := e.user("bob")
	aliceSession := e.session(alice, "secret")
	ws := e.mustWS(bobTok)

	cases := []struct {
		name  string
		frame string
		code  string
	}{
		{"not json", `hello`, "bad_request"},
		{"json array", `[1,2]`, "bad_request"},
		{"no type", `{"text":"x"}`, "bad_request"},
		{"unknown type", `{"type":"chat.explode"}`, "bad_request"},
		{"send without text", `{"type":"chat.send"}`, "bad_request"},
		{"send blank text", `{"type":"chat.send","text":"   "}`, "bad_request"},
		{"send too long", `{"type":"chat.send","text":"` + strings.Repeat("a", 33<<10) + `"}`, "bad_request"},
		{"cancel without session", `{"type":"chat.cancel"}`, "bad_request"},
		{"open without session", `{"type":"session.open"}`, "bad_request"},
		{"open foreign session", `{"type":"session.open","sessionId":"` + aliceSession.ID + `"}`, "not_found"},
		{"open missing session", `{"type":"session.open","sessionId":"nope"}`, "not_found"},
		{"send to foreign session", `{"type":"chat.send","sessionId":"` + aliceSession.ID + `","text":"hi"}`, "not_found"},
		{"cancel foreign session", `{"type":"chat.cancel","sessionId":"` + aliceSession.ID + `"}`, "not_found"},
		{"wrong field type", `{"type":"chat.send","text":42}`, "bad_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, ws.c.WriteMessage(websocket.TextMessage, []byte(c.frame)))
			f := ws.next()
			assert.Equal(t, "error", f["type"])
			assert.Equal(t, c.code, f["code"])
			assert.NotEmpty(t, f["message"])
		})
	}
	// Binary frames are refused politely too.
	require.NoError(t, ws.c.WriteMessage(websocket.BinaryMessage, []byte{1, 2, 3}))
	f := ws.next()
	assert.Equal(t, "error", f["type"])

	// Foreign and missing sessions are indistinguishable.
	require.NoError(t, ws.c.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.open","sessionId":"`+aliceSession.ID+`"}`)))
	f1 := ws.next()
	require.NoError(t, ws.c.WriteMessage(websocket.TextMessage, []byte(`{"type":"session.open","sessionId":"zzz"}`)))
	f2 := ws.next()
	assert.Equal(t, f1["code"], f2["code"])
	assert.Equal(t, f1["message"], f2["message"])

	// Still connected and working: a real chat goes through.
	ws.send(map[string]any{"type": "chat.send", "text": "还在吗"})
	frames := ws.until("run.finished")
	assert.Equal(t, "COMPLETED", frames[len(frames)-1]["phase"])

	// Bob never saw anything of alice's session, and nothing was written to it.
	msgs, err := e.st.ListMessages(context.Background(), aliceSession.ID)
	require.NoError(t, err)
	assert.Empty(t, msgs)
}

func TestWSRunsOfOtherUsersAreNotDelivered(t *testing.T) {
	e := newEnv(t)
	alice, aliceTok := e.user("alice")
	_, bobTok := e.user("bob")
	aws := e.mustWS(aliceTok)
	bws := e.mustWS(bobTok)
	s := e.session(alice, "a")
	// Make sure both connections are registered before the run starts.
	aws.send(map[string]any{"type": "session.open", "sessionId": s.ID})
	aws.until("session.history")
	bws.send(map[string]any{"type": "session.open", "sessionId": "x"})
	bws.until("error")

	out := e.runTurn(s.ID, "问题")
	require.Equal(t, store.PhaseCompleted, out.Phase)
	frames := aws.until("run.finished")
	assert.Equal(t, "run.started", frames[0]["type"])
	bws.quiet(200 * time.Millisecond)
}

func TestWSOriginCheck(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *agentCfg) { c.AllowedOrigins = []string{"https://desk.example.org"} })
	_, tok := e.user("alice")
	cookie := CookieName + "=" + tok
	cases := []struct {
		name   string
		origin string
		bearer bool
		ok     bool
	}{
		{"cookie, same origin", e.ts.URL, false, true},
		{"cookie, allowed extra origin", "https://desk.example.org", false, true},
		{"cookie, foreign origin", "https://evil.example", false, false},
		{"cookie, no origin", "", false, false},
		{"cookie, null origin", "null", false, false},
		{"bearer, no origin", "", true, true},
		{"bearer, foreign origin", "https://evil.example", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			if c.bearer {
				h.Set("Authorization", "Bearer "+tok)
			} else {
				h.Set("Cookie", cookie)
			}
			if c.origin != "" {
				h.Set("Origin", c.origin)
			}
			ws, resp, err := e.dialWS(h)
			if c.ok {
				require.NoError(t, err)
				ws.send(map[string]any{"type": "session.open", "sessionId": "x"})
				assert.Equal(t, "error", ws.next()["type"])
				return
			}
			require.Error(t, err)
			require.NotNil(t, resp)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		})
	}
}

func TestWSRateLimit(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *agentCfg) { c.ChatRatePerMinute = 1 })
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	// Burst 5: the first five pass, the sixth is limited with a clear message.
	var sid string
	for i := range 5 {
		f := map[string]any{"type": "chat.send", "text": "q" + itoa(i)}
		if sid != "" {
			f["sessionId"] = sid
		}
		ws.send(f)
		if sid == "" {
			created := ws.until("session.created")
			sid = created[len(created)-1]["sessionId"].(string)
		}
	}
	ws.send(map[string]any{"type": "chat.send", "sessionId": sid, "text": "one too many", "clientMsgId": "x6"})
	var limited map[string]any
	for limited == nil {
		f := ws.next()
		if f["type"] == "error" {
			limited = f
		}
	}
	assert.Equal(t, "rate_limited", limited["code"])
	assert.Equal(t, "x6", limited["clientMsgId"])
	assert.Contains(t, limited["message"], "每分钟最多 1 条")
	// It says when to retry: the next token of a 1-per-minute budget is at most a minute away.
	retry, _ := limited["retryAfterMs"].(float64)
	assert.Greater(t, retry, 0.0)
	assert.LessOrEqual(t, retry, 60000.0)
	assert.Regexp(t, `请在 \d+ 秒后再试`, limited["message"])
	// Another user is not affected.
	_, tok2 := e.user("bob")
	ws2 := e.mustWS(tok2)
	ws2.send(map[string]any{"type": "chat.send", "text": "hi"})
	assert.Equal(t, "session.created", ws2.next()["type"])
}

func TestWSCancel(t *testing.T) {
	hold := make(chan struct{})
	e := newEnv(t, func(_ *Config, a *agentCfg) {
		a.Model = &scriptedModel{answer: func(q string, _ []string) string { return "一段很长的回答正在生成中[^1^]" }, hold: hold}
	})
	defer close(hold)
	u, tok := e.user("alice")
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "chat.send", "text": "慢慢回答"})
	frames := ws.until("answer.delta")
	sid := frames[0]["sessionId"].(string)
	ws.send(map[string]any{"type": "chat.cancel", "sessionId": sid})
	frames = ws.until("run.finished")
	fin := frames[len(frames)-1]
	assert.Equal(t, "CANCELLED", fin["phase"])
	assert.NotContains(t, types(frames), "citations")
	// Cancelling where nothing runs is a clear error. (Right after run.finished the agent may
	// still be winding the run down, so use an idle session of the same user.)
	idle := e.session(u, "idle")
	ws.send(map[string]any{"type": "chat.cancel", "sessionId": idle.ID})
	f := ws.next()
	assert.Equal(t, "error", f["type"])
	assert.Equal(t, "bad_request", f["code"])
	assert.Contains(t, f["message"], "no run is in progress")
	// History marks the partial answer as interrupted.
	ws.send(map[string]any{"type": "session.open", "sessionId": sid})
	h := ws.until("session.history")
	msgs := h[len(h)-1]["messages"].([]any)
	require.Len(t, msgs, 2)
	assert.Equal(t, true, msgs[1].(map[string]any)["interrupted"])
}

func TestWSFailedRunReportsError(t *testing.T) {
	e := newEnv(t, func(_ *Config, a *agentCfg) {
		a.MaxRounds = 1 // the scripted model needs two rounds: the run fails with a readable reason
	})
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "chat.send", "text": "会失败"})
	frames := ws.until("run.finished")
	fin := frames[len(frames)-1]
	assert.Equal(t, "FAILED", fin["phase"])
	assert.NotEmpty(t, fin["error"])
}

func TestServeGracefulShutdownClosesClients(t *testing.T) {
	e := newEnv(t)
	_, tok := e.user("alice")
	ln, err := netListen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln) }()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	c, _, err := websocket.DefaultDialer.Dial("ws://"+ln.Addr().String()+"/ws", h)
	require.NoError(t, err)
	defer c.Close()
	// Wait until registered.
	require.NoError(t, c.WriteJSON(map[string]any{"type": "session.open", "sessionId": "x"}))
	_, _, err = c.ReadMessage()
	require.NoError(t, err)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, websocket.CloseGoingAway, ce.Code)
}

// TestSlowClientDropped: a client whose queue overflows is closed and counted; the producer never
// blocks (nobody drains this client's queue, so a blocking enqueue would hang the test).
func TestSlowClientDropped(t *testing.T) {
	e := newEnv(t)
	c := newClient(e.srv, store.User{ID: "u"}, "zh")
	frame := outFrame{data: []byte(`{"type":"answer.delta","text":"x"}`)}
	fit := maxQueuedBytes / (len(frame.data) + frameCost)
	require.Greater(t, fit, 4096*4, "a backlog of small frames several times the old 4,096-frame cap is kept")
	for range fit {
		require.True(t, c.enqueue(frame))
	}
	select {
	case <-c.done:
		t.Fatal("dropped before the queue was full")
	default:
	}
	assert.False(t, c.enqueue(frame), "one too many: nobody is writing")
	select {
	case <-c.done:
	default:
		t.Fatal("slow client not dropped")
	}
	c.mu.Lock()
	assert.Empty(t, c.queue, "its pending frames are released")
	assert.Equal(t, websocket.ClosePolicyViolation, c.closeCode, "the close frame will say why")
	c.mu.Unlock()
	assert.False(t, c.enqueue(frame), "after the drop: ignored")
	_, _, body := e.do("GET", "/metrics", "", nil)
	assert.Equal(t, 1.0, metricValue(t, body, "citegate_websocket_dropped_total"))

	// The byte bound applies too.
	c2 := newClient(e.srv, store.User{ID: "u"}, "zh")
	big := outFrame{data: make([]byte, maxQueuedBytes/2+1)}
	c2.enqueue(big)
	c2.enqueue(big)
	select {
	case <-c2.done:
	default:
		t.Fatal("byte bound not enforced")
	}
}

// TestWSOversizedFrame: frames over the 64 KiB read limit close the connection with 1009 (the
// protocol's answer; a chat message is at most 32 KiB, which gets an error frame instead).
func TestWSOversizedFrame(t *testing.T) {
	e := newEnv(t)
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	// The server may close while the frame is still being written: the write error does not matter.
	_ = ws.c.WriteMessage(websocket.TextMessage, []byte(`{"type":"chat.send","text":"`+strings.Repeat("a", maxFrameBytes+1<<10)+`"}`))
	for f := range ws.frames {
		t.Fatalf("unexpected frame %v", f)
	}
	// The reader goroutine saw the close; the server unregistered the client.
	assert.Eventually(t, func() bool {
		_, _, body := e.do("GET", "/metrics", "", nil)
		return metricValue(t, body, "citegate_websocket_clients") == 0
	}, 5*time.Second, 10*time.Millisecond)
}

// TestWSKeepalive: a client that never reads (so never answers pings) is closed once the pong wait
// expires; one that answers stays connected. The wait is a few seconds so that the answering
// client's pong is never late on a busy machine; the test waits for the silent client's close
// instead of sleeping a fixed time.
func TestWSKeepalive(t *testing.T) {
	e := newEnv(t)
	// The silent client is dropped after pongWait; the answering one is pinged every 20 ms, so it
	// keeps its connection as long as one of its pongs arrives within 8 s — on any machine, however
	// busy — and the verdict does not depend on how fast the client's goroutine runs.
	e.srv.pongWait, e.srv.pingPeriod = 8*time.Second, 20*time.Millisecond
	_, tok := e.user("alice")
	alive := e.mustWS(tok) // its reader goroutine answers pings
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	silent, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.ts.URL, "http")+"/ws", h)
	require.NoError(t, err)
	defer silent.Close()

	clients := func() float64 {
		_, _, body := e.do("GET", "/metrics", "", nil)
		return metricValue(t, body, "citegate_websocket_clients")
	}
	require.Eventually(t, func() bool { return clients() == 2 }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return clients() == 1 }, 30*time.Second, 50*time.Millisecond,
		"the silent client is closed")
	alive.send(map[string]any{"type": "session.open", "sessionId": "x"})
	assert.Equal(t, "error", alive.next()["type"], "the answering client still works")
}

// TestWSPerUserConnectionCap: past the cap an upgrade is refused with 429 and a plain message;
// other users are not affected, and a closed connection frees its slot.
func TestWSPerUserConnectionCap(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *agentCfg) { c.MaxConnsPerUser = 2 })
	_, tok := e.user("alice")
	_, bobTok := e.user("bob")
	first := e.mustWS(tok)
	e.mustWS(tok)
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	_, resp, err := e.dialWS(h)
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	var body struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, "rate_limited", body.Error.Code)
	assert.Contains(t, body.Error.Message, "at most 2 per user")

	e.mustWS(bobTok) // another user has slots of their own

	require.NoError(t, first.c.Close())
	require.Eventually(t, func() bool {
		ws, _, err := e.dialWS(h)
		if err != nil {
			return false
		}
		ws.c.Close()
		return true
	}, 30*time.Second, 20*time.Millisecond, "a closed connection frees its slot")
}

// TestWSEventRoutingNeverBlocksOnTheStore: the agent calls the hub in the run's goroutine. When
// routing needs the store (the session's owner is not cached), the read happens elsewhere: the
// hub returns while the read is still blocked, and the frames follow in order once it answers.
func TestWSEventRoutingNeverBlocksOnTheStore(t *testing.T) {
	e := newEnv(t)
	u, tok := e.user("alice")
	sess := e.session(u, "not cached") // created behind the hub's back: its owner is unknown
	bs := &blockingStore{wsStore: e.st, entered: make(chan struct{}), release: make(chan struct{})}
	e.srv.hub.st = bs
	ws := e.mustWS(tok)
	require.Eventually(t, func() bool { return len(e.srv.hub.clientsOf(u.ID)) == 1 }, 30*time.Second, time.Millisecond)

	evs := []agent.Event{
		{Type: agent.EventRunStarted, SessionID: sess.ID, RunID: "r1"},
		{Type: agent.EventAnswerDelta, SessionID: sess.ID, RunID: "r1", Text: "一"},
		{Type: agent.EventAnswerDelta, SessionID: sess.ID, RunID: "r1", Text: "二"},
		{Type: agent.EventRunFinished, SessionID: sess.ID, RunID: "r1", Phase: store.PhaseCompleted},
	}
	for _, ev := range evs {
		e.srv.hub.onEvent(ev)
	}
	select {
	case <-bs.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the owner lookup never started")
	}
	assert.False(t, bs.returned.Load(), "every event was handed over while the store read was still blocked")
	close(bs.release)
	// The two deltas may arrive as one frame (they join while waiting for the write pump).
	frames := joinDeltas(ws.until("run.finished"))
	assert.Equal(t, []string{"run.started", "answer.delta", "run.finished"}, types(frames))
	assert.Equal(t, "一二", frames[1]["text"])
}

// blockingStore blocks GetSession until release is closed.
type blockingStore struct {
	wsStore
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	returned atomic.Bool
}

func (b *blockingStore) GetSession(ctx context.Context, id string) (store.Session, error) {
	b.once.Do(func() { close(b.entered) })
	defer b.returned.Store(true)
	select {
	case <-b.release:
	case <-ctx.Done():
		return store.Session{}, ctx.Err()
	}
	return b.wsStore.GetSession(ctx, id)
}
