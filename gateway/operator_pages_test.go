package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
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

// TestOperatorConsoleReadsPages: the console's figures for a long chat shared twice (two
// watermarks) come from one backward walk of its dialog a page at a time, each message counted
// for the shares that hold it, and a filtered answer keeps its question across a page boundary.
func TestOperatorConsoleReadsPages(t *testing.T) {
	rc := &readCounter{}
	f := newOpFixture(t, withReadCounter(rc))
	long := f.e.session(f.alice, "long shared chat")
	f.e.append(store.Message{SessionID: long.ID, Role: store.RoleUser, Content: "an early hidden question"})
	for i := range reviewPage + 10 {
		f.e.append(store.Message{SessionID: long.ID, Role: store.RoleAssistant, Content: fmt.Sprintf("note %d", i)})
	}
	hidden := f.e.append(store.Message{SessionID: long.ID, Role: store.RoleAssistant, Content: "答案",
		Metadata: json.RawMessage(`{"links":{"hidden":2}}`)})
	early := f.e.createShare(f.aliceTok, long.ID)
	dropped := f.e.runTurn(long.ID, "a later dropped question")
	late := f.e.createShare(f.aliceTok, long.ID)
	require.NotEqual(t, early.ID, late.ID)

	rc.reset()
	status, _, page := f.req("GET", "/operator", bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status, page)
	assert.Zero(t, rc.n("ListMessages"))
	assert.Zero(t, rc.n("ListMessagesAfter"))
	// Three sessions shared: the fixture's two (one page each) and the long one (two pages).
	assert.Equal(t, 4, rc.n("ListDialogBefore"))
	assert.Equal(t, 3, rc.n("ListRuns"), "one per shared session")

	e := cellTexts(between(t, page, `data-share="`+early.ID+`"`, "</tr>"))
	l := cellTexts(between(t, page, `data-share="`+late.ID+`"`, "</tr>"))
	assert.Equal(t, strconv.Itoa(reviewPage+12), e[3], "question, notes, answer")
	assert.Equal(t, strconv.Itoa(reviewPage+14), l[3])
	assert.Equal(t, "0 / 0", e[4])
	assert.Equal(t, "1 / 1", l[4])
	assert.Equal(t, "2", e[5])
	assert.Equal(t, "2", l[5])

	_, _, flagged := f.req("GET", "/operator?filter=hidden", bearer(f.olgaTok))
	for _, sh := range []shareJSON{early, late} {
		assert.Contains(t, flagged, `href="/operator/shares/`+sh.ID+`#msg-`+u64s(hidden.ID)+`"`)
	}
	assert.Equal(t, 2, strings.Count(flagged, "an early hidden question"), "its question, read a page later, for both shares")
	_, _, flagged = f.req("GET", "/operator?filter=dropped", bearer(f.olgaTok))
	assert.Contains(t, flagged, `href="/operator/shares/`+late.ID+`#msg-`+u64s(dropped.FinalMessageID)+`"`)
	assert.NotContains(t, flagged, `href="/operator/shares/`+early.ID+`#msg-`+u64s(dropped.FinalMessageID)+`"`, "past the early watermark")
	assert.Contains(t, flagged, "a later dropped question")
}
