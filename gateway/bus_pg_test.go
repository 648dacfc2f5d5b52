package gateway

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/internal/pgtest"
	"github.com/citegate/citegate/store"
)

// collector is a BusHandler that records what arrives.
type collector struct {
	mu      sync.Mutex
	events  []agent.Event
	cancels []string
	users   []userFrame
	closes  []string
	changed chan struct{}
}

func (c *collector) RemoteCloseUser(userID string) {
	c.mu.Lock()
	c.closes = append(c.closes, userID)
	c.mu.Unlock()
	c.poke()
}

func (c *collector) RemoteUserFrame(userID string, frame []byte) {
	c.mu.Lock()
	c.users = append(c.users, userFrame{User: userID, Frame: frame})
	c.mu.Unlock()
	c.poke()
}

func newCollector() *collector { return &collector{changed: make(chan struct{}, 1)} }

func (c *collector) RemoteEvent(ev agent.Event) {
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
	c.poke()
}

func (c *collector) RemoteCancel(sid string) {
	c.mu.Lock()
	c.cancels = append(c.cancels, sid)
	c.mu.Unlock()
	c.poke()
}

func (c *collector) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds on the collected data; the timeout only bounds a hang.
func (c *collector) waitFor(t *testing.T, cond func(evs []agent.Event, cancels []string) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		ok := cond(c.events, c.cancels)
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatal("timed out waiting for bus traffic")
		}
	}
}

func waitReady(t *testing.T, b *PGBus) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !b.Ready() {
		require.True(t, time.Now().Before(deadline), "bus did not start listening")
		time.Sleep(20 * time.Millisecond)
	}
}

// Two PGBus instances on one database: everything one publishes reaches the other in order —
// thousands of small deltas (coalesced), a tool call too large for one NOTIFY (fragments), the
// final frames by reference — and a cancel request; a bus never hears itself.
func TestPGBusCarriesEventsBetweenReplicas(t *testing.T) {
	url := pgtest.BaseURL(t)
	channel := "citegate_test_" + strings.ToLower(NewReplicaID()[:8])
	channel = strings.NewReplacer("-", "_").Replace(channel)
	a, err := NewPGBus(PGBusConfig{URL: url, Replica: "a", Channel: channel})
	require.NoError(t, err)
	defer a.Close()
	b, err := NewPGBus(PGBusConfig{URL: url, Replica: "b", Channel: channel})
	require.NoError(t, err)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	atA, atB := newCollector(), newCollector()
	wg.Add(2)
	go func() { defer wg.Done(); assert.NoError(t, a.Run(ctx, atA)) }()
	go func() { defer wg.Done(); assert.NoError(t, b.Run(ctx, atB)) }()
	waitReady(t, a)
	waitReady(t, b)

	emit := func(e agent.Event) {
		e.SessionID, e.RunID, e.Channel, e.At = "s1", "r1", "desktop", time.Now()
		a.Publish(e)
	}
	emit(agent.Event{Type: agent.EventRunStarted, UserMessageID: 3})
	args := `{"query":"` + strings.Repeat("参数", 6000) + `"}`
	emit(agent.Event{Type: agent.EventToolStarted, CallID: "c1", Tool: "web_search", Arguments: args})
	var want strings.Builder
	for i := range 3000 {
		d := string(rune('a'+i%26)) + "文"
		want.WriteString(d)
		emit(agent.Event{Type: agent.EventAnswerDelta, Text: d})
	}
	emit(agent.Event{Type: agent.EventAnswerFinal, MessageID: 9, Content: strings.Repeat("x", 20000)})
	emit(agent.Event{Type: agent.EventRunFinished, Phase: store.PhaseCompleted})
	a.Publish(agent.Event{Type: agent.EventRunFinished, SessionID: "chat", RunID: "r2", Channel: "wechat"}) // not a desktop run
	a.PublishCancel("s7")
	a.PublishCloseUser("u1")
	a.PublishUserFrame("u1", []byte(`{"type":"session.updated","sessionId":"s1","session":{"title":"新标题"}}`))
	a.PublishUserFrame("u1", []byte(`{"type":"session.updated","sessionId":"s1","session":{"title":"`+strings.Repeat("长", 3000)+`"}}`)) // too large: dropped

	atB.waitFor(t, func(evs []agent.Event, cancels []string) bool {
		// (cond runs with atB.mu held)
		return len(cancels) == 1 && len(atB.users) == 1 && len(atB.closes) == 1 && len(evs) > 0 && evs[len(evs)-1].Type == agent.EventRunFinished
	})
	atB.mu.Lock()
	evs, cancels := atB.events, atB.cancels
	atB.mu.Unlock()
	assert.Equal(t, []string{"s7"}, cancels)
	assert.Equal(t, []string{"u1"}, atB.closes)
	atB.mu.Lock()
	users := atB.users
	atB.mu.Unlock()
	require.Len(t, users, 1, "the user frame arrives; the oversized one is dropped")
	assert.Equal(t, "u1", users[0].User)
	assert.JSONEq(t, `{"type":"session.updated","sessionId":"s1","session":{"title":"新标题"}}`, string(users[0].Frame))
	var got strings.Builder
	var kinds []agent.EventType
	for _, e := range evs {
		assert.Equal(t, "r1", e.RunID)
		if e.Type == agent.EventAnswerDelta {
			got.WriteString(e.Text)
			continue
		}
		kinds = append(kinds, e.Type)
	}
	assert.Equal(t, want.String(), got.String(), "every delta, in order")
	assert.Equal(t, []agent.EventType{agent.EventRunStarted, agent.EventToolStarted, agent.EventAnswerFinal, agent.EventRunFinished}, kinds)
	assert.Equal(t, args, evs[1].Arguments, "the fragmented tool call arrives whole")
	t.Logf("%d events arrived for 3000 deltas (the outbox coalesces what waits)", len(evs))

	atA.mu.Lock()
	defer atA.mu.Unlock()
	assert.Empty(t, atA.events, "a replica does not hear itself")
	assert.Empty(t, atA.cancels)
}

// NotifyCloseUser (what `citegate user token|revoke` call after changing the database) reaches
// every replica listening on the database's default channel, which follows the URL's search_path.
func TestNotifyCloseUserReachesListeningReplicas(t *testing.T) {
	url := pgtest.Schema(t)
	b, err := NewPGBus(PGBusConfig{URL: url, Replica: "b"})
	require.NoError(t, err)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	at := newCollector()
	wg.Add(1)
	go func() { defer wg.Done(); assert.NoError(t, b.Run(ctx, at)) }()
	waitReady(t, b)
	require.NoError(t, NotifyCloseUser(ctx, url, "user-9"))
	require.NoError(t, NotifyCloseUser(ctx, url, "user-10"), "a second notifier is a new sender: nothing counts as lost")
	at.waitFor(t, func([]agent.Event, []string) bool { return len(at.closes) == 2 })
	assert.Equal(t, []string{"user-9", "user-10"}, at.closes)
	assert.Error(t, NotifyCloseUser(ctx, url, ""))
}
