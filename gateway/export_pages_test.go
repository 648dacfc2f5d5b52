package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// pagedOnlyStore refuses to read a whole session, so a handler that still does fails; failAfter > 0
// makes the failAfter-th ListMessagesAfter call fail.
type pagedOnlyStore struct {
	Store
	pages     atomic.Int32
	failAfter int32
}

func (p *pagedOnlyStore) ListMessages(context.Context, string) ([]store.Message, error) {
	return nil, errors.New("the export must not read the whole session")
}

func (p *pagedOnlyStore) ListMessagesAfter(ctx context.Context, sessionID string, afterID uint64, limit int) ([]store.Message, error) {
	if n := p.pages.Add(1); p.failAfter > 0 && n >= p.failAfter {
		return nil, errors.New("disk on fire")
	}
	return p.Store.ListMessagesAfter(ctx, sessionID, afterID, limit)
}

// TestExportReadsPages: the owner's export of a session longer than two pages reads it a page at
// a time (never the whole session) and writes every message once, in order.
func TestExportReadsPages(t *testing.T) {
	ps := &pagedOnlyStore{}
	e := newEnv(t, func(c *Config, _ *agentCfg) { ps.Store = c.Store; c.Store = ps })
	u, tok := e.user("alice")
	s := e.session(u, "long")
	other := e.session(u, "neighbour")
	n := 2*exportPage + 17
	var want []uint64
	for i := range n {
		m := e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprintf("message %d", i)})
		want = append(want, m.ID)
		if i%100 == 0 {
			e.append(store.Message{SessionID: other.ID, Role: store.RoleUser, Content: "not this session"})
		}
	}
	status, _, body := e.do("GET", "/api/sessions/"+s.ID+"/export.jsonl", tok, nil)
	require.Equal(t, http.StatusOK, status, body)
	lines := parseJSONL(t, body)
	var got []uint64
	for _, l := range lines {
		got = append(got, uint64(l["id"].(float64)))
		assert.Equal(t, s.ID, l["sessionId"])
	}
	assert.Equal(t, want, got)
	assert.Equal(t, int32(3), ps.pages.Load(), "three pages, no read past the newest message")
}

// TestExportStoreFailure: a store that fails on the first page gives an error response; one that
// fails later cuts the download short after the pages already sent (the status was sent with them).
func TestExportStoreFailure(t *testing.T) {
	e, ps, tok, s := pagedFailureEnv(t)
	status, _, body := e.do("GET", "/api/sessions/"+s.ID+"/export.jsonl", tok, nil)
	assert.Equal(t, http.StatusInternalServerError, status)
	assert.Contains(t, body, `"internal"`)

	ps.pages.Store(0)
	ps.failAfter = 2
	status, _, body = e.do("GET", "/api/sessions/"+s.ID+"/export.jsonl", tok, nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Len(t, parseJSONL(t, body), exportPage, "the first page, then the cut")
}

// pagedFailureEnv is alice's session of exportPage+5 messages behind a store that fails its first
// page read (set failAfter to move the failure, reset pages to start counting again).
func pagedFailureEnv(t *testing.T) (*testEnv, *pagedOnlyStore, string, store.Session) {
	t.Helper()
	ps := &pagedOnlyStore{failAfter: 1}
	e := newEnv(t, func(c *Config, _ *agentCfg) { ps.Store = c.Store; c.Store = ps })
	u, tok := e.user("alice")
	s := e.session(u, "long")
	for i := range exportPage + 5 {
		e.append(store.Message{SessionID: s.ID, Role: store.RoleUser, Content: fmt.Sprintf("message %d", i)})
	}
	return e, ps, tok, s
}
