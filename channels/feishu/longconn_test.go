package feishu_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/feishu"
	"github.com/citegate/citegate/internal/fakes/feishu"
)

// fastReconnect keeps reconnect pauses short so the tests see them.
func fastReconnect(c *feishu.Config) {
	c.ReconnectBackoff = 20 * time.Millisecond
	c.MaxReconnectBackoff = 100 * time.Millisecond
}

// Payloads split over several frames, pushed concurrently so that the parts of different events
// interleave on the socket, each arrive whole and exactly once. The SDK's client (v3.5.4) joined
// parts in an unsynchronised slice from one goroutine per frame: the race detector failed this
// shape in CI, and a payload could be delivered twice.
func TestLongConnInterleavedMultipartPushes(t *testing.T) {
	fake := newFake(t)
	rec := newRecorder()
	startLongConn(t, fake, rec, nil)
	const n = 24
	var wg sync.WaitGroup
	errs := make([]error, n)
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := feishufake.MessageEvent{MessageID: fmt.Sprintf("om_%02d", i), ChatID: "oc_1", Text: strings.Repeat("长消息", 200) + fmt.Sprint(i)}
			ack, err := fake.Push(ctxT(t), ev.JSON(), 2+i%4)
			errs[i], codes[i] = err, ack.Code
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "push %d", i)
		assert.Equal(t, http.StatusOK, codes[i], "push %d", i)
	}
	msgs := rec.messages()
	require.Len(t, msgs, n, "every payload exactly once")
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
		var i int
		_, err := fmt.Sscanf(m.ID, "om_%d", &i)
		require.NoError(t, err)
		assert.Equal(t, strings.Repeat("长消息", 200)+fmt.Sprint(i), m.Text, "payload of %s rebuilt from its own parts", m.ID)
	}
	sort.Strings(ids)
	for i, id := range ids {
		assert.Equal(t, fmt.Sprintf("om_%02d", i), id)
	}
}

func TestLongConnReconnectsAfterDrop(t *testing.T) {
	fake := newFake(t)
	rec := newRecorder()
	h := startLongConn(t, fake, rec, fastReconnect)
	fake.DropConnections()
	require.NoError(t, fake.WaitConnected(ctxT(t), 2))
	ack, err := fake.Push(ctxT(t), feishufake.MessageEvent{MessageID: "om_after", ChatID: "oc_1", Text: "还在吗"}.JSON(), 1)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, ack.Code)
	require.Len(t, rec.messages(), 1)
	assert.Equal(t, "还在吗", rec.messages()[0].Text)
	assert.Contains(t, h.logs.String(), "reconnecting")
	assert.Equal(t, 1, fake.Connections(), "the dropped socket is not kept")
}

// A busy endpoint (code 1) and an auth failure that is not the connection limit are retried; the
// channel connects once they pass.
func TestLongConnRetriesTransientRefusals(t *testing.T) {
	fake := newFake(t)
	fake.InjectError(feishufake.OpEndpoint, 1, 2)
	fake.InjectError(feishufake.OpHandshake, 514, 1)
	startLongConn(t, fake, newRecorder(), fastReconnect)
	assert.Len(t, fake.RequestsFor(feishufake.OpEndpoint), 4, "two busy answers, one refused handshake, then the connection")
}

// Refusals that retrying cannot fix end Start with the platform's code, as long as the channel
// never connected.
func TestLongConnPermanentHandshakeRefusals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     int
		authCode int
		want     string
	}{
		{"forbidden app", 403, 0, "code 403"},
		{"connection limit", 514, 1000040350, "code 514"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := feishufake.New(feishufake.Options{HandshakeAuthErrCode: tc.authCode})
			t.Cleanup(fake.Close)
			fake.InjectError(feishufake.OpHandshake, tc.code, 1)
			ch, _ := newChannel(t, fake, fastReconnect)
			errc := make(chan error, 1)
			go func() { errc <- ch.Start(ctxT(t), newRecorder()) }()
			select {
			case err := <-errc:
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
				assert.Contains(t, err.Error(), "long connection refused")
			case <-time.After(10 * time.Second):
				t.Fatal("Start did not report the refusal")
			}
			assert.Zero(t, fake.Connections())
		})
	}
}

// Once a channel has worked, even a refusal that looks permanent is retried: an app that is
// re-enabled, or a connection limit that frees up, brings the channel back without a restart.
func TestLongConnKeepsTryingAfterItWorked(t *testing.T) {
	fake := newFake(t)
	h := startLongConn(t, fake, newRecorder(), fastReconnect)
	fake.InjectError(feishufake.OpEndpoint, 1000040351, 2)
	fake.DropConnections()
	require.NoError(t, fake.WaitConnected(ctxT(t), 2))
	select {
	case err := <-h.done:
		t.Fatalf("Start returned: %v", err)
	default:
	}
	assert.Contains(t, h.logs.String(), "code 1000040351")
}

// A peer that stops answering pings without closing the socket is given up after the ping interval
// plus up to 30 s (here 1 s + 1 s), and a new connection is opened.
func TestLongConnReplacesSilentPeer(t *testing.T) {
	fake := feishufake.New(feishufake.Options{PingInterval: 1})
	t.Cleanup(fake.Close)
	h := startLongConn(t, fake, newRecorder(), fastReconnect)
	fake.MutePongs(true)
	// Silent until the client has given up on the socket: a pong that came back in between would
	// (rightly) keep the connection.
	require.NoError(t, fake.WaitConnected(ctxT(t), 2))
	fake.MutePongs(false)
	assert.Contains(t, h.logs.String(), "no pong")
	waitFor(t, "the silent socket to close", func() bool { return fake.Connections() == 1 })
}

// The platform reconfigures a live connection through the pong's payload; a new ping interval
// takes effect without a reconnect.
func TestLongConnPongReconfiguresPing(t *testing.T) {
	fake := feishufake.New(feishufake.Options{PingInterval: 120, PongPingInterval: 1})
	t.Cleanup(fake.Close)
	startLongConn(t, fake, newRecorder(), nil)
	waitFor(t, "pings every second after the first pong", func() bool { return fake.Pings() >= 3 })
	assert.Equal(t, 1, fake.Connected())
}

// A long connection that cannot get back shows as retrying in the supervisor's state (/readyz and
// citegate_channel_state), with the platform's reason, until a socket opens again; the first
// connection, and the one after the outage, show as connected.
func TestLongConnOutageShowsInChannelState(t *testing.T) {
	fake := newFake(t)
	ch, _ := newChannel(t, fake, fastReconnect)
	sup := channels.NewSupervisor(channels.SupervisorConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx, ch, newRecorder()) }()
	t.Cleanup(func() { cancel(); <-done })
	phase := func() channels.State { st, _ := sup.State(feishu.Name); return st }
	waitFor(t, "connected", func() bool { return phase().Phase == channels.PhaseConnected })
	require.Equal(t, 1, fake.Connected())

	fake.InjectError(feishufake.OpEndpoint, 1, 1_000_000) // the endpoint is busy until cleared
	fake.DropConnections()
	waitFor(t, "retrying during the outage", func() bool { return phase().Phase == channels.PhaseRetrying })
	st := phase()
	assert.Contains(t, st.Reason, "code 1")
	assert.Positive(t, st.Attempts)

	fake.ClearInjections()
	require.NoError(t, fake.WaitConnected(ctxT(t), 2))
	waitFor(t, "connected again", func() bool { return phase().Phase == channels.PhaseConnected })
}
