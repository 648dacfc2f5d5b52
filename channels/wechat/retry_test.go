package wechat

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	wechatfake "github.com/citegate/citegate/internal/fakes/wechat"
	"github.com/citegate/citegate/internal/testkit"
)

// TestStartRetriesUntilPlatformUp: the API is down (connection refused) when the channel starts;
// the supervisor says so in plain words and retries; once the platform is up the channel connects
// and the webhook serves.
func TestStartRetriesUntilPlatformUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // down: nothing listens there

	ch, err := New(Config{AppID: testAppID, AppSecret: testSecret, Token: testToken, APIBaseURL: "http://" + addr,
		Logger: slog.New(slog.NewTextHandler(&testkit.SyncBuffer{}, nil))})
	require.NoError(t, err)
	hook := httptest.NewServer(ch.Routes()[Route])
	t.Cleanup(hook.Close)

	waits := make(chan chan time.Time)
	sup := channels.NewSupervisor(channels.SupervisorConfig{After: func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		waits <- c
		return c
	}})
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx, ch, rec) }()
	t.Cleanup(func() { cancel(); <-done })

	next := func() chan time.Time {
		select {
		case c := <-waits:
			return c
		case <-time.After(30 * time.Second):
			t.Fatal("no retry")
			return nil
		}
	}
	wait := next()
	st, _ := sup.State(Name)
	assert.Equal(t, channels.PhaseRetrying, st.Phase)
	assert.Contains(t, st.Reason, "connection refused")
	assert.NotContains(t, st.Reason, "credentials")
	assert.NotContains(t, st.Reason, testSecret)
	client := &wechatfake.Client{URL: hook.URL, Token: testToken, AppID: testAppID}
	resps, err := client.SendText(context.Background(), testOpenID, "还没好", 1, wechatfake.Delivery{})
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resps[0].Status, "the webhook is closed while the channel is down")

	// The platform comes up at the same address.
	api := wechatfake.NewServer(testAppID, testSecret)
	t.Cleanup(api.Close)
	target, err := url.Parse(api.URL)
	require.NoError(t, err)
	up, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	proxy := &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	go func() { _ = proxy.Serve(up) }()
	t.Cleanup(func() { _ = proxy.Close() })
	wait <- time.Now()

	require.Eventually(t, func() bool { st, _ := sup.State(Name); return st.Phase == channels.PhaseConnected }, 30*time.Second, 5*time.Millisecond)
	resps, err = client.SendText(context.Background(), testOpenID, "好了吗", 2, wechatfake.Delivery{})
	require.NoError(t, err)
	assert.Equal(t, "success", resps[0].Body)
	assert.Len(t, rec.got(), 1)
}

// TestStartBadCredentialsSaySo: rejected credentials are told apart from an unreachable platform.
func TestStartBadCredentialsSaySo(t *testing.T) {
	api := wechatfake.NewServer(testAppID, "the-real-secret")
	t.Cleanup(api.Close)
	ch, err := New(Config{AppID: testAppID, AppSecret: testSecret, Token: testToken, APIBaseURL: api.URL,
		Logger: slog.New(slog.NewTextHandler(&testkit.SyncBuffer{}, nil))})
	require.NoError(t, err)
	err = ch.Start(context.Background(), &recorder{})
	require.Error(t, err)
	assert.Contains(t, channels.Explain(err), "rejected the credentials")
}
