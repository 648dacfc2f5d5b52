package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dingtalkfake "github.com/citegate/citegate/internal/fakes/dingtalk"
	feishufake "github.com/citegate/citegate/internal/fakes/feishu"
	"github.com/citegate/citegate/internal/pgtest"
	"github.com/citegate/citegate/store"
)

// TestReplicasLongConnectionChannels runs three real `citegate serve` processes on one PostgreSQL
// database (CITEGATE_TEST_POSTGRES; mandatory under CI=true), each with the Feishu long connection
// and the DingTalk Stream channel configured against loopback fakes of the platforms, and proves:
//
//   - every replica connects to both platforms (three long connections each);
//   - an event that reaches every replica at once (what the platforms' re-pushes to random
//     connections of the app amount to at worst; see PushEach) starts one run and gets one reply;
//   - a chat turn queued behind a long run of its conversation, and the long run itself (and a
//     long desktop run), stay RUNNING past several lease periods (2 s here) while every replica's
//     reaper runs, and complete when the model answers — the reaper never fails a live replica's
//     waiting or long turn;
//   - `citegate user revoke` on the database closes the user's connections on every replica.
//
// Every wait only bounds a hang; the verdicts are acks, stored records and what the fakes received.
func TestReplicasLongConnectionChannels(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several citegate processes; skipped with -short")
	}
	dbURL := pgtest.Schema(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "citegate.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("chat_rate_per_minute: 100000\n"), 0o600))
	llm := newReplicaLLM(t)
	fs := feishufake.New(feishufake.Options{})
	// Long connections are left to the processes' deaths (see feishufake.Server.Close).
	t.Cleanup(fs.Close)
	dt := dingtalkfake.New(dingtalkfake.Options{})
	t.Cleanup(dt.Close)
	fo := fs.Options()
	const lease = 2 * time.Second
	env := []string{
		"CITEGATE_STORE=" + dbURL, "CITEGATE_RUN_LEASE=" + lease.String(), "CITEGATE_LLM_BASE_URL=" + llm.srv.URL + "/v1",
		"CITEGATE_LLM_MODEL=fake", "CITEGATE_LOG_LEVEL=warn",
		"CITEGATE_FEISHU_APP_ID=" + fo.AppID, "CITEGATE_FEISHU_APP_SECRET=" + fo.AppSecret, "CITEGATE_FEISHU_BASE_URL=" + fs.URL(),
		"CITEGATE_DINGTALK_CLIENT_ID=ding-client", "CITEGATE_DINGTALK_CLIENT_SECRET=ding-secret",
		"CITEGATE_DINGTALK_API_BASE_URL=" + dt.URL, "CITEGATE_DINGTALK_STREAM_BASE_URL=" + dt.URL,
	}
	procs := []*replicaProc{
		startReplica(t, dir, cfgPath, env, "a"),
		startReplica(t, dir, cfgPath, env, "b"),
		startReplica(t, dir, cfgPath, env, "c"),
	}
	logs := func() string {
		var b strings.Builder
		for _, p := range procs {
			b.WriteString("--- " + p.name + "\n" + p.logs.String())
		}
		return b.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()

	// 1. Every replica holds a connection to each platform (ready means its channels connected).
	require.NoError(t, fs.WaitConnected(wctx, 3), logs())
	require.NoError(t, dt.WaitConnected(wctx, 3), logs())
	assert.Equal(t, 3, fs.Connections(), "one Feishu long connection per replica")
	assert.Equal(t, 3, dt.LiveConnections(), "one DingTalk Stream connection per replica")

	st := openPG(t, dbURL)
	runsOf := func(conversation string) []store.Run {
		t.Helper()
		sid, err := st.ConversationSession(ctx, conversation)
		require.NoError(t, err, "conversation %s has a session", conversation)
		runs, err := st.ListRuns(ctx, sid)
		require.NoError(t, err)
		return runs
	}
	completed := func(conversation string, n int) {
		t.Helper()
		waitFor(t, 60*time.Second, func() bool {
			sid, err := st.ConversationSession(ctx, conversation)
			if err != nil {
				return false
			}
			runs, err := st.ListRuns(ctx, sid)
			if err != nil || len(runs) < n {
				return false
			}
			for _, r := range runs {
				if r.Phase != store.PhaseCompleted {
					return false
				}
			}
			return true
		}, "runs of "+conversation+" did not complete: %s", logs)
	}
	// closedCards counts the Feishu cards whose streaming was closed with an answer in them.
	closedCards := func() int {
		n := 0
		for _, c := range fs.Cards() {
			if !c.Streaming && len(c.Ops) > 0 {
				n++
			}
		}
		return n
	}
	repliesTo := func(messageID string) int {
		n := 0
		for _, r := range fs.Replies() {
			if r.ReplyTo == messageID {
				n++
			}
		}
		return n
	}

	// 2. Feishu: one event delivered to all three replicas at once → every push acked (200: a
	// duplicate is handled, not failed, or Feishu would push it yet again), one run, one reply.
	acks, err := fs.PushEach(wctx, feishufake.MessageEvent{MessageID: "om_r1", ChatID: "oc_r", Text: "年假有几天？"}.JSON())
	require.NoError(t, err, logs())
	require.Len(t, acks, 3)
	for _, a := range acks {
		assert.Equal(t, 200, a.Code, "every replica acks the event")
	}
	// The dispatcher decides on a message before the channel acks it, so with every ack in, the
	// number of runs is final.
	assert.Len(t, runsOf("feishu:oc_r"), 1, "the event runs once")
	completed("feishu:oc_r", 1)
	waitFor(t, 60*time.Second, func() bool { return closedCards() == 1 }, "the answer card was not closed: %s", logs)
	// A later message of the chat, answered after the first: a second reply to om_r1 would have
	// come from a second run, and there is none.
	_, err = fs.Push(wctx, feishufake.MessageEvent{MessageID: "om_r2", ChatID: "oc_r", Text: "怎么申请VPN？"}.JSON(), 1)
	require.NoError(t, err)
	completed("feishu:oc_r", 2)
	waitFor(t, 60*time.Second, func() bool { return closedCards() == 2 }, "the second answer card was not closed: %s", logs)
	assert.Len(t, runsOf("feishu:oc_r"), 2)
	assert.Equal(t, 1, repliesTo("om_r1"), "one reply to the event delivered three times")
	assert.Equal(t, 1, repliesTo("om_r2"))
	assert.Empty(t, fs.MarkerViolations())

	// 3. DingTalk: the same bot message pushed on all three connections → three acks, one run, one
	// answer through the session webhook.
	msg, ids, err := dt.PushBotMessageEach(dingtalkfake.BotMessage("cid-r", "staff-r", "差旅住宿标准是多少？", false))
	require.NoError(t, err, logs())
	require.Len(t, ids, 3)
	require.NoError(t, dt.Await(wctx, func() bool {
		for _, id := range ids {
			if _, ok := dt.AckFor(id); !ok {
				return false
			}
		}
		return true
	}), logs())
	for _, id := range ids {
		f, _ := dt.AckFor(id)
		assert.Equal(t, 200, f.Response.Code)
	}
	assert.Len(t, runsOf("dingtalk:cid-r"), 1, "the message runs once")
	completed("dingtalk:cid-r", 1)
	deliveriesTo := func(cid string) int {
		n := 0
		for _, d := range dt.Deliveries() {
			if d.ConversationID == cid {
				n++
			}
		}
		return n
	}
	require.NoError(t, dt.Await(wctx, func() bool { return deliveriesTo("cid-r") >= 1 }), logs())
	later := dingtalkfake.BotMessage("cid-r", "staff-r", "怎么申请VPN？", false)
	later.SessionWebhook, later.SessionWebhookExpiredTime = msg.SessionWebhook, msg.SessionWebhookExpiredTime
	_, _, err = dt.PushBotMessage(later)
	require.NoError(t, err)
	completed("dingtalk:cid-r", 2)
	require.NoError(t, dt.Await(wctx, func() bool { return deliveriesTo("cid-r") >= 2 }), logs())
	assert.Equal(t, 2, deliveriesTo("cid-r"), "one answer per message: %v", dt.Deliveries())
	assert.Len(t, runsOf("dingtalk:cid-r"), 2)

	// 3b. Turn order across replicas: a Feishu message held by the model on replica a; the next
	// message of the same chat pushed to replica b is acked at once and stored, but waits for the
	// first run to end before its own starts; then a DingTalk chat the same way. The model never
	// works on both turns of a chat at once: every request of the second turn follows the first's.
	ordered := func(first, second string) {
		t.Helper()
		log := llm.requests()
		lastFirst, firstSecond := -1, -1
		for i, e := range log {
			if strings.HasSuffix(e, " "+first) {
				lastFirst = i
			}
			if firstSecond < 0 && strings.HasSuffix(e, " "+second) {
				firstSecond = i
			}
		}
		require.GreaterOrEqual(t, lastFirst, 0, "%v", log)
		require.GreaterOrEqual(t, firstSecond, 0, "%v", log)
		assert.Less(t, lastFirst, firstSecond, "every model request of the second turn after the first turn's last: %v", log)
	}
	// waiting(n): the replicas' gauges together show n turns held back.
	waiting := func(n int) func() bool {
		return func() bool {
			sum := 0
			for _, p := range procs {
				resp, err := http.Get(p.base + "/metrics")
				if err != nil {
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, line := range strings.Split(string(body), "\n") {
					var v int
					if _, err := fmt.Sscanf(line, "citegate_turns_waiting %d", &v); err == nil {
						sum += v
					}
				}
			}
			return sum == n
		}
	}
	fq1, fq2 := holdWord+"：飞书第一问", "飞书第二问"
	_, err = fs.PushOn(wctx, 0, feishufake.MessageEvent{MessageID: "om_o1", ChatID: "oc_o", Text: fq1}.JSON(), 1)
	require.NoError(t, err)
	waitHeld(t, llm)
	ack, err := fs.PushOn(wctx, 1, feishufake.MessageEvent{MessageID: "om_o2", ChatID: "oc_o", Text: fq2}.JSON(), 1)
	require.NoError(t, err, "the second message is acked while the first runs")
	assert.Equal(t, 200, ack.Code)
	waitFor(t, 60*time.Second, waiting(1), "the second Feishu turn did not wait: %s", logs)
	oRuns := runsOf("feishu:oc_o")
	require.Len(t, oRuns, 2)
	assert.NotEqual(t, oRuns[0].LeaseOwner, oRuns[1].LeaseOwner, "two replicas took the two messages")
	assert.Equal(t, store.PhaseRunning, oRuns[1].Phase, "the second turn is stored and waits")
	assert.NotContains(t, llm.requests(), "start "+fq2, "the second turn does not run while the first does")

	dq1, dq2 := holdWord+"：钉钉第一问", "钉钉第二问"
	dmsg, _, err := dt.PushBotMessageOn(2, dingtalkfake.BotMessage("cid-o", "staff-o", dq1, false))
	require.NoError(t, err)
	waitHeld(t, llm)
	dlater := dingtalkfake.BotMessage("cid-o", "staff-o", dq2, false)
	dlater.SessionWebhook, dlater.SessionWebhookExpiredTime = dmsg.SessionWebhook, dmsg.SessionWebhookExpiredTime
	_, dID, err := dt.PushBotMessageOn(0, dlater)
	require.NoError(t, err)
	require.NoError(t, dt.Await(wctx, func() bool { _, ok := dt.AckFor(dID); return ok }), logs())
	waitFor(t, 60*time.Second, waiting(2), "the second DingTalk turn did not wait: %s", logs)
	dRuns := runsOf("dingtalk:cid-o")
	require.Len(t, dRuns, 2)
	assert.NotEqual(t, dRuns[0].LeaseOwner, dRuns[1].LeaseOwner, "two replicas took the two messages")
	assert.NotContains(t, llm.requests(), "start "+dq2)

	llm.releaseAll()
	completed("feishu:oc_o", 2)
	completed("dingtalk:cid-o", 2)
	ordered(fq1, fq2)
	ordered(dq1, dq2)
	require.NoError(t, dt.Await(wctx, func() bool { return deliveriesTo("cid-o") >= 2 }), logs())
	var dTexts []string
	for _, d := range dt.Deliveries() {
		if d.ConversationID == "cid-o" {
			dTexts = append(dTexts, d.Text)
		}
	}
	// Both answers, one each. Their order is not asserted here: a replica's 2 s poll may release the
	// second turn between the first run's end and its delivery (gateway's TestTurnOrder* tests, with
	// polling out of the way, check that the release follows the delivery).
	require.Len(t, dTexts, 2)
	assert.True(t, strings.Contains(dTexts[0], "第二部分回答") != strings.Contains(dTexts[1], "第二部分回答"), "the held first answer once: %v", dTexts)
	assert.True(t, strings.Contains(dTexts[0], dq2) != strings.Contains(dTexts[1], dq2), "the second answer once: %v", dTexts)
	waitFor(t, 60*time.Second, func() bool { return repliesTo("om_o1") == 1 && repliesTo("om_o2") == 1 }, "the ordered turns were not answered: %s", logs)
	oRuns = runsOf("feishu:oc_o")
	assert.True(t, !oRuns[1].StartedAt.Before(oRuns[0].StartedAt))
	llm.rearm()

	// 4. Long and queued runs keep their leases. A Feishu question the model holds; a second
	// question of the same chat over the same connection, stored RUNNING and queued behind it on
	// that replica; a desktop question held on another replica.
	_, err = fs.Push(wctx, feishufake.MessageEvent{MessageID: "om_h1", ChatID: "oc_h", Text: holdWord + "：长的回答"}.JSON(), 1)
	require.NoError(t, err)
	waitHeld(t, llm)
	_, err = fs.Push(wctx, feishufake.MessageEvent{MessageID: "om_h2", ChatID: "oc_h", Text: "排在后面的问题"}.JSON(), 1)
	require.NoError(t, err)
	token := func() string {
		cmd := citegateProcess("user", "add", "alice")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}()
	onB := procs[1].ws(t, token)
	onB.send(map[string]any{"type": "chat.send", "text": holdWord + "：桌面上的长回答", "clientMsgId": "long-1"})
	created := onB.until("", "session.created")
	deskSID := created[len(created)-1]["sessionId"].(string)
	waitHeld(t, llm)
	held := runsOf("feishu:oc_h")
	require.Len(t, held, 2, "the long run and the one queued behind it")
	deskRuns, err := st.ListRuns(ctx, deskSID)
	require.NoError(t, err)
	require.Len(t, deskRuns, 1)
	watched := append(held, deskRuns[0])
	// Wait until every run's lease was renewed past three lease periods after it started: by then
	// each has outlived its first lease twice over while the reapers of all three replicas ran
	// every lease/4. A run whose lease lapsed would have been failed "interrupted" instead.
	waitFor(t, 90*time.Second, func() bool {
		for _, w := range watched {
			r, err := st.GetRun(ctx, w.ID)
			if err != nil || r.Phase != store.PhaseRunning || r.LeaseUntil.Before(r.StartedAt.Add(3*lease)) {
				return false
			}
		}
		return true
	}, "the held and queued runs were not renewed past three leases (or ended): %s", logs)
	for _, w := range watched {
		r, err := st.GetRun(ctx, w.ID)
		require.NoError(t, err)
		assert.Equal(t, store.PhaseRunning, r.Phase, "run %s (%s) is still running", r.ID, r.Channel)
		assert.Empty(t, r.Error)
	}
	llm.releaseAll()
	completed("feishu:oc_h", 2)
	fin := onB.until(deskSID, "run.finished")
	assert.Equal(t, "COMPLETED", fin[len(fin)-1]["phase"])
	waitFor(t, 60*time.Second, func() bool { return repliesTo("om_h1") == 1 && repliesTo("om_h2") == 1 }, "the held and queued turns were not answered: %s", logs)

	// 5. `citegate user revoke`, run straight on the database, closes the user's open connections
	// on every replica; a new connection with the old token is refused.
	onC := procs[2].ws(t, token)
	cmd := citegateProcess("user", "revoke", "alice")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "warning")
	for _, w := range []*replicaWS{onB, onC} {
		closed := false
		for !closed {
			select {
			case _, ok := <-w.frames:
				closed = !ok
			case <-time.After(60 * time.Second):
				t.Fatalf("a revoked user's connection stayed open: %s", logs())
			}
		}
	}
	url := "ws" + strings.TrimPrefix(procs[0].base, "http") + "/ws"
	_, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {"Bearer " + token}})
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// waitFor polls cond until it holds; the timeout only bounds a hang, and the failure shows the
// replicas' logs (msg formats them with %s).
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, msg string, logs func() string) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf(msg, logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
