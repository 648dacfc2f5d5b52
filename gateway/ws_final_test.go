package gateway

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// countingWSStore counts the hub's message reads.
type countingWSStore struct {
	wsStore
	gets atomic.Int64
}

func (s *countingWSStore) GetMessage(ctx context.Context, id uint64) (store.Message, error) {
	s.gets.Add(1)
	return s.wsStore.GetMessage(ctx, id)
}

// TestLocalFinalRoutesWithoutStoreRead: the local agent's answer.final and citations carry the
// committed record's metadata, so the hub renders them under the record's link rule (the verified
// link works, the unverified ones are hidden) without reading the message back.
func TestLocalFinalRoutesWithoutStoreRead(t *testing.T) {
	answer := "请看[官网](https://evil.example.com/login)，详见[手册](https://example.com/a)[^1^]。"
	e := newEnv(t, func(_ *Config, a *agentCfg) {
		a.Model = &scriptedModel{answer: func(string, []string) string { return answer }}
	})
	cs := &countingWSStore{wsStore: e.srv.hub.st}
	e.srv.hub.st = cs
	_, tok := e.user("alice")
	ws := e.mustWS(tok)
	ws.send(map[string]any{"type": "chat.send", "text": "年假怎么申请"})
	htmls := map[string]string{}
	for _, f := range ws.until("run.finished") {
		if h, ok := f["html"].(string); ok {
			htmls[f["type"].(string)] = h
		}
	}
	for _, typ := range []string{"answer.final", "citations"} {
		require.Contains(t, htmls, typ)
		assert.NotContains(t, htmls[typ], evilHost, typ)
		assert.Contains(t, htmls[typ], `href="https://example.com/a"`, typ+": the verified link works")
	}
	assert.Contains(t, htmls["citations"], "cite-ref", "the citations frame shows the superscripts")
	assert.NotContains(t, htmls["answer.final"], citations.HiddenLinkNotice, "a hidden markdown link keeps its text, no notice")
	assert.Zero(t, cs.gets.Load(), "no message read to route the final answer")
}
