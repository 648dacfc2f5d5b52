package feishu_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/feishu"
)

// TestStartRetriesUntilPlatformUp: Feishu is unreachable at start (connection refused, not bad
// credentials); the supervisor retries and the channel connects once the platform is up.
func TestStartRetriesUntilPlatformUp(t *testing.T) {
	fake := newFake(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	ch, _ := newChannel(t, fake, func(c *feishu.Config) {
		c.BaseURL = "http://" + addr
		c.Mode = feishu.ModeWebhook
		c.VerificationToken = "vtoken"
	})
	waits := make(chan chan time.Time)
	sup := channels.NewSupervisor(channels.SupervisorConfig{After: func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		waits <- c
		return c
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx, ch, newRecorder()) }()
	t.Cleanup(func() { cancel(); <-done })

	var wait chan time.Time
	select {
	case wait = <-waits:
	case <-time.After(30 * time.Second):
		t.Fatal("no retry")
	}
	st, _ := sup.State(feishu.Name)
	assert.Equal(t, channels.PhaseRetrying, st.Phase)
	assert.Contains(t, st.Reason, "connection refused")
	assert.Contains(t, st.Reason, "cannot reach")
	assert.NotContains(t, st.Reason, "app_id/app_secret rejected")

	target, err := url.Parse(fake.URL())
	require.NoError(t, err)
	up, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	proxy := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	go func() { _ = proxy.Serve(up) }()
	t.Cleanup(func() { _ = proxy.Close() })
	wait <- time.Now()
	require.Eventually(t, func() bool { st, _ := sup.State(feishu.Name); return st.Phase == channels.PhaseConnected }, 30*time.Second, 5*time.Millisecond)
}

func TestStartBadCredentialsSaySo(t *testing.T) {
	fake := newFake(t)
	ch, _ := newChannel(t, fake, func(c *feishu.Config) { c.AppSecret = "wrong" })
	err := ch.Start(ctxT(t), newRecorder())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "app_id/app_secret rejected")
	assert.Contains(t, channels.Explain(err), "rejected the credentials")
}
