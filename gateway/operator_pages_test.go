package gateway

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// TestOperatorShareViewReadsPages: the operator's view of a share longer than two store pages
// reads it a page at a time up to the watermark (never the whole session, nothing past the
// watermark), shows every shared message once and in order, and still has each answer's figures.
func TestOperatorShareViewReadsPages(t *testing.T) {
	rc := &readCounter{}
	f := newOpFixture(t, withReadCounter(rc))
	long := f.e.session(f.alice, "long shared chat")
	var want []uint64
	for i := range 2*exportPage + 30 {
		m := f.e.append(store.Message{SessionID: long.ID, Role: store.RoleUser, Content: fmt.Sprintf("line %d", i)})
		want = append(want, m.ID)
	}
	ans := f.e.runTurn(long.ID, "a dropped question at the end")
	want = append(want, ans.UserMessageID, ans.FinalMessageID)
	sh := f.e.createShare(f.aliceTok, long.ID)
	f.e.runTurn(long.ID, secretLater) // past the watermark

	var runTools int
	msgs, err := f.e.st.ListMessages(t.Context(), long.ID)
	require.NoError(t, err)
	for _, m := range msgs {
		if m.ID <= sh.Watermark && !visible(m) {
			runTools++
		}
	}
	pages := (len(want) + runTools + exportPage - 1) / exportPage

	rc.reset()
	status, _, view := f.req("GET", "/operator/shares/"+sh.ID, bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status, view)
	assert.Zero(t, rc.n("ListMessages"), "the whole session is never read")
	assert.Equal(t, pages, rc.n("ListMessagesAfter"), "a page at a time, none past the watermark")
	assert.Zero(t, rc.n("ListRuns"))
	assert.Equal(t, 1, rc.n("GetRun"), "the one answer's run")

	var got []uint64
	for _, m := range regexp.MustCompile(`id="msg-(\d+)"`).FindAllStringSubmatch(view, -1) {
		id, err := strconv.ParseUint(m[1], 10, 64)
		require.NoError(t, err)
		got = append(got, id)
	}
	assert.Equal(t, want, got)
	assert.NotContains(t, view, secretLater)
	assert.Contains(t, view, "引用 保留 1 / 丢弃 1", "the answer's figures from its run")
	assert.Contains(t, view, "</html>")
	assert.Len(t, f.auditOf(store.AuditShareView), 1)

	// The fixture's short share renders as before: answers with their notes, the empty notice never.
	status, _, view = f.req("GET", "/operator/shares/"+f.share.ID, bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status, view)
	assert.Contains(t, view, `id="msg-`+u64s(f.plainID)+`"`)
	assert.NotContains(t, view, `class="empty"`)
}
