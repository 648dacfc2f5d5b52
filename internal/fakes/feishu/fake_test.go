package feishufake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type result struct {
	Code int    `json:"code"`
	Tok  string `json:"tenant_access_token"`
	Data struct {
		CardID string `json:"card_id"`
	} `json:"data"`
}

// call makes one raw API call and returns the platform code.
func call(t *testing.T, s *Server, method, path, token string, body any) int {
	return callR(t, s, method, path, token, body).Code
}

func callR(t *testing.T, s *Server, method, path, token string, body any) result {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(method, s.URL()+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out result
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

// The checks tests rely on must be able to fail: feed the fake the violations it exists to catch.
func TestFakeDetectsViolations(t *testing.T) {
	s := New(Options{})
	defer s.Close()

	assert.Equal(t, CodeAppSecretInvalid, call(t, s, "POST", "/open-apis/auth/v3/tenant_access_token/internal", "", map[string]string{"app_id": "cli_fake", "app_secret": "nope"}))
	tr := callR(t, s, "POST", "/open-apis/auth/v3/tenant_access_token/internal", "", map[string]string{"app_id": "cli_fake", "app_secret": "fake-secret"})
	require.Zero(t, tr.Code)
	tok := tr.Tok
	assert.Equal(t, CodeInvalidToken, call(t, s, "GET", "/open-apis/bot/v3/info", "forged", nil))

	card := `{"schema":"2.0","config":{"streaming_mode":true},"body":{"elements":[{"tag":"markdown","element_id":"e","content":"x"}]}}`
	cr := callR(t, s, "POST", "/open-apis/cardkit/v1/cards", tok, map[string]string{"type": "card_json", "data": card})
	require.Zero(t, cr.Code)
	id := cr.Data.CardID
	content := "/open-apis/cardkit/v1/cards/" + id + "/elements/e/content"

	for i := 1; i <= 12; i++ { // far more than 10 operations within a second
		require.Zero(t, call(t, s, "PUT", content, tok, map[string]any{"content": "abc", "sequence": i, "uuid": "u"}))
	}
	assert.Greater(t, s.MaxOpsPerSecond(), 10)

	assert.Equal(t, CodeSequence, call(t, s, "PUT", content, tok, map[string]any{"content": "abc", "sequence": 12}))
	assert.Equal(t, 1, s.SequenceViolations())

	assert.Empty(t, s.MarkerViolations())
	require.Zero(t, call(t, s, "PUT", content, tok, map[string]any{"content": "half [^1", "sequence": 13}))
	assert.Len(t, s.MarkerViolations(), 1)

	require.Zero(t, call(t, s, "PATCH", "/open-apis/cardkit/v1/cards/"+id+"/settings", tok, map[string]any{"settings": `{"config":{"streaming_mode":false}}`, "sequence": 14}))
	assert.Equal(t, CodeStreamingClosed, call(t, s, "PUT", content, tok, map[string]any{"content": "late", "sequence": 15}))

	s.InjectError(OpCardCreate, 300100, 1)
	assert.Equal(t, 300100, call(t, s, "POST", "/open-apis/cardkit/v1/cards", tok, map[string]string{"type": "card_json", "data": card}))
	assert.Zero(t, call(t, s, "POST", "/open-apis/cardkit/v1/cards", tok, map[string]string{"type": "card_json", "data": card}), "injected once")

	ref, _ := json.Marshal(map[string]any{"type": "card", "data": map[string]string{"card_id": id}})
	reply := "/open-apis/im/v1/messages/om_1/reply"
	require.Zero(t, call(t, s, "POST", reply, tok, map[string]string{"msg_type": "interactive", "content": string(ref), "uuid": "r1"}))
	assert.Zero(t, call(t, s, "POST", reply, tok, map[string]string{"msg_type": "interactive", "content": string(ref), "uuid": "r1"}), "same uuid: delivered once")
	assert.Equal(t, CodeCardAlreadySent, call(t, s, "POST", reply, tok, map[string]string{"msg_type": "interactive", "content": string(ref), "uuid": "r2"}))
	require.Len(t, s.Replies(), 1)
	assert.Equal(t, id, s.Replies()[0].CardID())
}

// PushEach delivers one event over every open long connection, each as a frame of its own, and
// returns every connection's ack.
func TestPushEachReachesEveryConnection(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	var ep struct {
		Data struct {
			URL string `json:"URL"`
		} `json:"data"`
	}
	resp, err := http.Post(s.URL()+"/callback/ws/endpoint", "application/json", bytes.NewReader([]byte(`{"AppID":"cli_fake","AppSecret":"fake-secret"}`)))
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ep))
	resp.Body.Close()
	got := make(chan string, 8)
	for i := range 3 {
		c, _, err := websocket.DefaultDialer.Dial(ep.Data.URL, nil)
		require.NoError(t, err)
		defer c.Close()
		go func() {
			for {
				_, data, err := c.ReadMessage()
				if err != nil {
					return
				}
				var f larkws.Frame
				if f.Unmarshal(data) != nil {
					continue
				}
				got <- fmt.Sprintf("%d:%s", i, f.Payload)
				f.Payload = []byte(`{"code":200}`)
				b, _ := f.Marshal()
				_ = c.WriteMessage(websocket.BinaryMessage, b)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.WaitConnected(ctx, 3))
	acks, err := s.PushEach(ctx, []byte(`{"event":1}`))
	require.NoError(t, err)
	require.Len(t, acks, 3)
	ids := map[string]bool{}
	for _, a := range acks {
		assert.Equal(t, 200, a.Code)
		ids[a.FrameMessageID] = true
	}
	assert.Len(t, ids, 3, "each push is a frame of its own")
	var deliveries []string
	for range 3 {
		deliveries = append(deliveries, <-got)
	}
	assert.ElementsMatch(t, []string{`0:{"event":1}`, `1:{"event":1}`, `2:{"event":1}`}, deliveries)
}
