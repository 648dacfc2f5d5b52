package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
)

func TestReadyzShowsChannelStates(t *testing.T) {
	var mu sync.Mutex
	states := []channels.State{
		{Channel: "feishu", Phase: channels.PhaseConnected, Since: time.Unix(1, 0)},
		{Channel: "wechat", Phase: channels.PhaseRetrying, Reason: "platform unreachable: connection refused", Attempts: 3, Since: time.Unix(2, 0)},
	}
	e := newEnv(t, func(c *Config, _ *agentCfg) {
		c.ChannelStates = func() []channels.State {
			mu.Lock()
			defer mu.Unlock()
			return append([]channels.State(nil), states...)
		}
	})
	status, _, body := e.do(http.MethodGet, "/readyz", "", nil)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	var got struct {
		Status   string           `json:"status"`
		Store    string           `json:"store"`
		Channels []channels.State `json:"channels"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	assert.Equal(t, "not_ready", got.Status)
	assert.Equal(t, "ok", got.Store)
	require.Len(t, got.Channels, 2)
	assert.Equal(t, "retrying", got.Channels[1].Phase)
	assert.Contains(t, got.Channels[1].Reason, "connection refused")

	_, _, metrics := e.do(http.MethodGet, "/metrics", "", nil)
	assert.Contains(t, metrics, `citegate_channel_state{channel="wechat",state="retrying"} 1`)
	assert.Contains(t, metrics, `citegate_channel_state{channel="wechat",state="connected"} 0`)
	assert.Contains(t, metrics, `citegate_channel_state{channel="feishu",state="connected"} 1`)

	mu.Lock()
	states[1] = channels.State{Channel: "wechat", Phase: channels.PhaseConnected}
	mu.Unlock()
	status, _, body = e.do(http.MethodGet, "/readyz", "", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.True(t, strings.Contains(body, `"status":"ready"`), body)
}

func TestReadyzWithoutChannels(t *testing.T) {
	e := newEnv(t)
	status, _, body := e.do(http.MethodGet, "/readyz", "", nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"channels":[]`)
}
