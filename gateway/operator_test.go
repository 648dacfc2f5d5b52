package gateway

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/store"
)

// opFixture is a gateway with two users' conversations, some shared, and an operator.
type opFixture struct {
	e                *testEnv
	alice, bob, olga store.User
	aliceTok, bobTok string
	olgaTok          string
	shared, unshared store.Session
	bobSess          store.Session
	share, bobShare  shareJSON
	droppedID, hidID uint64 // the shared answers with a dropped marker and with a hidden link
	plainID          uint64 // a shared answer with nothing to flag
	laterQ           string // asked after the share was made: past its watermark
	unsharedQ        string // asked in a chat nobody shared
}

// Texts that must never reach an operator: they were never shared.
const (
	secretLater    = "LATER-QUESTION-PAST-WATERMARK"
	secretUnshared = "UNSHARED-CHAT-QUESTION"
)

func newOpFixture(t *testing.T, opts ...envOpt) *opFixture {
	t.Helper()
	e := newEnv(t, opts...)
	// The scripted model answers by question: a marker it never retrieved ([^9^], dropped), a bare
	// link nobody verified (hidden), or a plain cited answer.
	e.model.answer = func(q string, _ []string) string {
		switch {
		case strings.Contains(q, "dropped"):
			return "答案 [^1^] 以及没有检索过的 [^9^]"
		case strings.Contains(q, "hidden"):
			return "答案见 https://unverified.example/page 。[^1^]"
		}
		return "答案：" + q + "。[^1^]"
	}
	f := &opFixture{e: e}
	f.alice, f.aliceTok = e.user("alice")
	f.bob, f.bobTok = e.user("bob")
	ctx := context.Background()
	var err error
	f.olga, f.olgaTok, err = e.st.CreateUserRole(ctx, "olga", true, store.Actor{Name: "cli:test"})
	require.NoError(t, err)

	f.shared = e.session(f.alice, "Alice <b>报销</b>")
	f.plainID = e.runTurn(f.shared.ID, "plain question").FinalMessageID
	f.droppedID = e.runTurn(f.shared.ID, "a dropped question").FinalMessageID
	f.hidID = e.runTurn(f.shared.ID, "a hidden question").FinalMessageID
	// Feedback as the owner gives it in the desktop view (actions' PUT route, metadata.feedback).
	for id, vote := range map[uint64]string{f.plainID: "up", f.droppedID: "down"} {
		status, _, body := e.do("PUT", "/api/messages/"+u64s(id)+"/feedback", f.aliceTok, strings.NewReader(`{"vote":"`+vote+`","comment":"好"}`))
		require.Equal(t, http.StatusOK, status, body)
	}
	f.share = e.createShare(f.aliceTok, f.shared.ID)
	// Past the watermark: asked after sharing, with a dropped marker and a hidden link of its own.
	f.laterQ = secretLater + " dropped hidden"
	e.runTurn(f.shared.ID, f.laterQ)

	f.unshared = e.session(f.alice, "never shared")
	f.unsharedQ = secretUnshared + " dropped"
	e.runTurn(f.unshared.ID, f.unsharedQ)

	f.bobSess = e.session(f.bob, "Bob's chat")
	e.runTurn(f.bobSess.ID, "bob asks")
	f.bobShare = e.createShare(f.bobTok, f.bobSess.ID)
	return f
}

// cookieFor logs u in as a browser would and returns the session cookie value.
func (f *opFixture) cookieFor(u store.User) string {
	f.e.t.Helper()
	c, err := f.e.st.CreateWebSession(context.Background(), u.ID, time.Hour)
	require.NoError(f.e.t, err)
	return c
}

// req performs a request with the given headers.
func (f *opFixture) req(method, path string, hdr map[string]string) (int, http.Header, string) {
	f.e.t.Helper()
	r, err := http.NewRequest(method, f.e.ts.URL+path, nil)
	require.NoError(f.e.t, err)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(r)
	require.NoError(f.e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(f.e.t, err)
	return resp.StatusCode, resp.Header, string(b)
}

func (f *opFixture) audit() []store.AuditEntry {
	f.e.t.Helper()
	all, err := f.e.st.AuditSince(context.Background(), 0, 1000)
	require.NoError(f.e.t, err)
	return all
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func TestOperatorRoutesAreNotFoundForEveryoneElse(t *testing.T) {
	f := newOpFixture(t)
	_, _, missing := f.req("GET", "/s/no-such-share", nil)
	before := f.audit()
	routes := []struct{ method, path string }{
		{"GET", "/operator"}, {"GET", "/operator/"}, {"GET", "/operator?filter=dropped"}, {"GET", "/operator?filter=hidden"},
		{"GET", "/operator/shares/" + f.share.ID}, {"POST", "/operator/shares/" + f.share.ID + "/revoke"},
		{"GET", "/operator/audit"}, {"GET", "/operator/audit.jsonl"}, {"GET", "/operator/audit.csv"},
		{"GET", "/operator/no-such-page"},
		// Wrong methods on console paths: not 405, which would tell the path exists.
		{"POST", "/operator"}, {"DELETE", "/operator/audit"}, {"PUT", "/operator/shares/" + f.share.ID},
		{"GET", "/operator/shares/" + f.share.ID + "/revoke"},
	}
	aliceCookie := map[string]string{"Cookie": CookieName + "=" + f.cookieFor(f.alice), "Sec-Fetch-Site": "same-origin"}
	for _, who := range []struct {
		name string
		hdr  map[string]string
	}{{"signed out", nil}, {"bad token", bearer("nope")}, {"user by bearer", bearer(f.aliceTok)}, {"user by cookie", aliceCookie}} {
		for _, rt := range routes {
			status, hdr, body := f.req(rt.method, rt.path, who.hdr)
			assert.Equal(t, http.StatusNotFound, status, "%s: %s %s", who.name, rt.method, rt.path)
			assert.Equal(t, missing, body, "%s: %s %s looks like a missing page", who.name, rt.method, rt.path)
			assert.Contains(t, hdr.Get("Cache-Control"), "no-store")
		}
	}
	// Nothing happened: the share still opens and nothing was audited.
	status, _, _ := f.req("GET", "/s/"+f.share.Token, nil)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, before, f.audit())

	// The desktop view links the console for operators only.
	_, _, index := f.req("GET", "/", bearer(f.olgaTok))
	assert.Contains(t, index, `href="/operator"`)
	_, _, index = f.req("GET", "/", bearer(f.aliceTok))
	assert.Contains(t, index, `id="new-chat"`)
	assert.NotContains(t, index, `href="/operator"`)

	_, _, me := f.req("GET", "/api/me", bearer(f.olgaTok))
	assert.Contains(t, me, `"operator":true`)
	_, _, me = f.req("GET", "/api/me", bearer(f.aliceTok))
	assert.Contains(t, me, `"operator":false`)

	// Taking the role away closes the console at the next request.
	status, _, _ = f.req("GET", "/operator", bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status)
	_, _, err := f.e.st.SetOperator(context.Background(), "olga", false, store.Actor{Name: "cli:test"})
	require.NoError(t, err)
	status, _, _ = f.req("GET", "/operator", bearer(f.olgaTok))
	assert.Equal(t, http.StatusNotFound, status)
}

func TestOperatorConsoleListsSharesWithFigures(t *testing.T) {
	rc := &readCounter{} // refuses whole-session reads
	f := newOpFixture(t, withReadCounter(rc))
	status, hdr, page := f.req("GET", "/operator", bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status, page)
	assert.Contains(t, hdr.Get("Content-Type"), "text/html")
	assert.Contains(t, hdr.Get("X-Robots-Tag"), "noindex")
	assert.NotContains(t, page, "<script", "the console works without JavaScript")
	assert.Contains(t, page, "Alice &lt;b&gt;报销&lt;/b&gt;", "titles are escaped")
	assert.Contains(t, page, "Bob&#39;s chat")
	row := between(t, page, `data-share="`+f.share.ID+`"`, "</tr>")
	assert.Contains(t, row, ">alice<")
	cells := cellTexts(row)
	// chat, owner, created, messages, kept/dropped, hidden, feedback, actions
	require.Len(t, cells, 8, row)
	assert.Equal(t, "6", cells[3], "three questions and three answers up to the watermark")
	assert.Equal(t, "3 / 1", cells[4], "kept: one per answer; dropped: the [^9^] never retrieved")
	assert.Equal(t, "1", cells[5], "one hidden link")
	assert.Equal(t, "1 / 1", cells[6], "feedback up / down")
	assert.Contains(t, row, `action="/operator/shares/`+f.share.ID+`/revoke"`)
	assert.Contains(t, page, `data-share="`+f.bobShare.ID+`"`)
	assert.Less(t, strings.Index(page, f.bobShare.ID), strings.Index(page, f.share.ID), "newest share first")

	// The filters list answers, each linked to its place in the read-only view.
	status, _, dropped := f.req("GET", "/operator?filter=dropped", bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, dropped, `href="/operator/shares/`+f.share.ID+`#msg-`+u64s(f.droppedID)+`"`)
	assert.Contains(t, dropped, "a dropped question")
	assert.NotContains(t, dropped, "#msg-"+u64s(f.hidID))
	assert.NotContains(t, dropped, "#msg-"+u64s(f.plainID))
	assert.Contains(t, dropped, `aria-current="page">`)
	status, _, hidden := f.req("GET", "/operator?filter=hidden", bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, hidden, `href="/operator/shares/`+f.share.ID+`#msg-`+u64s(f.hidID)+`"`)
	assert.NotContains(t, hidden, "#msg-"+u64s(f.droppedID))
	status, _, _ = f.req("GET", "/operator?filter=bogus", bearer(f.olgaTok))
	assert.Equal(t, http.StatusBadRequest, status)

	for _, p := range []string{page, dropped, hidden} {
		assert.NotContains(t, p, secretLater, "nothing past the watermark")
		assert.NotContains(t, p, secretUnshared, "nothing unshared")
		assert.NotContains(t, p, f.unshared.ID)
		assert.NotContains(t, p, f.share.Token, "the owner's link is not handed out")
	}
	assert.Empty(t, f.auditOf(store.AuditShareView), "listing is not a view of a conversation")
	assert.Zero(t, rc.n("ListMessages"))
	assert.Zero(t, rc.n("ListMessagesAfter"), "the console reads dialog pages, not tool traffic")
}

func (f *opFixture) auditOf(action string) []store.AuditEntry {
	var out []store.AuditEntry
	for _, e := range f.audit() {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

func TestOperatorViewsShareReadOnlyAndAudited(t *testing.T) {
	f := newOpFixture(t)
	status, _, view := f.req("GET", "/operator/shares/"+f.share.ID, bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status, view)
	assert.NotContains(t, view, "<script")
	assert.Contains(t, view, "a dropped question")
	assert.Contains(t, view, `id="msg-`+u64s(f.droppedID)+`"`)
	assert.Contains(t, view, `class="cite-ref"`, "the share page's rendering: superscripts")
	assert.Contains(t, view, `class="sources"`)
	assert.Contains(t, view, "https://example.com/a")
	assert.NotContains(t, view, "https://unverified.example", "the hidden link stays hidden")
	assert.Contains(t, view, "引用 保留 1 / 丢弃 1", "the review note beside the answer")
	assert.NotContains(t, view, secretLater)
	assert.NotContains(t, view, secretUnshared)

	// Same message HTML as the public share page.
	_, _, public := f.req("GET", "/s/"+f.share.Token, nil)
	assert.Equal(t, between(t, public, `id="msg-`+u64s(f.droppedID)+`"`, "</article>")[:200],
		between(t, view, `id="msg-`+u64s(f.droppedID)+`"`, "</article>")[:200])

	views := f.auditOf(store.AuditShareView)
	require.Len(t, views, 1)
	assert.Equal(t, f.olga.ID, views[0].ActorID)
	assert.Equal(t, "olga", views[0].Actor)
	assert.Equal(t, f.share.ID, views[0].Target)
	assert.Contains(t, views[0].Detail, "alice")

	// Ids that are not live shares are the 404 page, and nothing is recorded for them: a session id,
	// a message id, the owner's token, a malformed id.
	for _, id := range []string{f.unshared.ID, f.shared.ID, u64s(f.plainID), f.share.Token, strings.Repeat("0", 64), "x"} {
		status, _, _ := f.req("GET", "/operator/shares/"+url.PathEscape(id), bearer(f.olgaTok))
		assert.Equal(t, http.StatusNotFound, status, id)
	}
	assert.Len(t, f.auditOf(store.AuditShareView), 1)
}

func TestOperatorRevokesAnyShare(t *testing.T) {
	f := newOpFixture(t)
	olgaCookie := CookieName + "=" + f.cookieFor(f.olga)
	path := "/operator/shares/" + f.bobShare.ID + "/revoke"

	// A cookie post from elsewhere (or with no origin information) is refused and changes nothing.
	for _, hdr := range []map[string]string{
		{"Cookie": olgaCookie},
		{"Cookie": olgaCookie, "Origin": "https://evil.example"},
		{"Cookie": olgaCookie, "Sec-Fetch-Site": "cross-site"},
	} {
		status, _, body := f.req("POST", path, hdr)
		assert.Equal(t, http.StatusForbidden, status, "%v", hdr)
		assert.Contains(t, body, `"code":"forbidden"`)
	}
	status, _, _ := f.req("GET", "/s/"+f.bobShare.Token, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Empty(t, f.auditOf(store.AuditShareRevoke))

	status, hdr, _ := f.req("POST", path, map[string]string{"Cookie": olgaCookie, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/operator?done=revoked", hdr.Get("Location"))
	status, _, _ = f.req("GET", "/s/"+f.bobShare.Token, nil)
	assert.Equal(t, http.StatusNotFound, status, "bob's link no longer opens")
	_, _, page := f.req("GET", "/operator?done=revoked", bearer(f.olgaTok))
	assert.Contains(t, page, `role="status"`)
	assert.NotContains(t, page, f.bobShare.ID)
	status, _, _ = f.req("POST", path, bearer(f.olgaTok))
	assert.Equal(t, http.StatusNotFound, status, "revoked twice")

	revs := f.auditOf(store.AuditShareRevoke)
	require.Len(t, revs, 1)
	assert.Equal(t, f.bobShare.ID, revs[0].Target)
	assert.Equal(t, "olga", revs[0].Actor)
	assert.Contains(t, revs[0].Detail, "Bob's chat")

	// A bearer post (an API client, not a browser) needs no origin.
	status, _, _ = f.req("POST", "/operator/shares/"+f.share.ID+"/revoke", bearer(f.olgaTok))
	assert.Equal(t, http.StatusSeeOther, status)
	assert.Len(t, f.auditOf(store.AuditShareRevoke), 2)
}

func TestOperatorAuditLogPageAndExport(t *testing.T) {
	f := newOpFixture(t)
	ctx := context.Background()
	// A user name a spreadsheet would evaluate.
	_, _, err := f.e.st.CreateUserRole(ctx, "=HYPERLINK(\"x\")", true, store.Actor{Name: "cli:test"})
	require.NoError(t, err)
	status, _, _ := f.req("GET", "/operator/shares/"+f.share.ID, bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status)

	status, _, page := f.req("GET", "/operator/audit", bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, `data-action="share.view"`)
	assert.Contains(t, page, `data-action="role.grant"`)
	assert.Less(t, strings.Index(page, `data-action="share.view"`), strings.Index(page, `data-action="role.grant"`), "newest first")
	assert.Contains(t, page, `href="/operator/audit.jsonl"`)
	assert.NotContains(t, page, "/operator/audit?before=", "one page only")
	status, _, _ = f.req("GET", "/operator/audit?before=abc", bearer(f.olgaTok))
	assert.Equal(t, http.StatusBadRequest, status)

	status, hdr, body := f.req("GET", "/operator/audit.jsonl", bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, hdr.Get("Content-Disposition"), `attachment; filename="citegate-audit-`)
	lines := parseJSONL(t, body)
	require.Len(t, lines, 4, "olga's grant, the new operator's grant, the view, the export itself")
	assert.Equal(t, "role.grant", lines[0]["action"])
	assert.Equal(t, "share.view", lines[2]["action"])
	assert.Equal(t, "audit.export", lines[3]["action"], "the export records itself")
	assert.Equal(t, "jsonl", lines[3]["detail"])

	status, hdr, body = f.req("GET", "/operator/audit.csv", bearer(f.olgaTok))
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, hdr.Get("Content-Type"), "text/csv")
	rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+5)
	assert.Equal(t, []string{"id", "time", "actor_id", "actor", "action", "target", "detail"}, rows[0])
	assert.Equal(t, `'=HYPERLINK("x")`, rows[2][5], "formulas are defused")
	assert.Equal(t, "audit.export", rows[5][4])
	assert.Equal(t, "csv", rows[5][6])
	assert.Len(t, f.auditOf(store.AuditExport), 2)
}

func TestOperatorAuditPaging(t *testing.T) {
	f := newOpFixture(t)
	ctx := context.Background()
	for range auditPageSize + 5 {
		_, err := f.e.st.AppendAudit(ctx, store.AuditEntry{Actor: "olga", Action: store.AuditShareView, Target: "t"})
		require.NoError(t, err)
	}
	_, _, page := f.req("GET", "/operator/audit", bearer(f.olgaTok))
	assert.Equal(t, auditPageSize, strings.Count(page, "data-audit="))
	older := between(t, page, `href="/operator/audit?before=`, `"`)
	_, _, page2 := f.req("GET", "/operator/audit?before="+older, bearer(f.olgaTok))
	assert.Equal(t, 6, strings.Count(page2, "data-audit="), "the rest: 5 views and olga's grant")
	assert.NotContains(t, page2, "/operator/audit?before=")
}

func TestAPISharesForOperators(t *testing.T) {
	f := newOpFixture(t)
	type entry struct {
		ID, Token, URL, Owner, OperatorURL, Title string
		Own                                       bool
	}
	list := func(tok, query string) []entry {
		status, _, body := f.req("GET", "/api/shares"+query, bearer(tok))
		require.Equal(t, http.StatusOK, status, body)
		var out struct{ Shares []entry }
		require.NoError(t, json.Unmarshal([]byte(body), &out))
		assert.NotContains(t, body, secretLater)
		assert.NotContains(t, body, secretUnshared)
		return out.Shares
	}
	// A user sees their own.
	mine := list(f.aliceTok, "")
	require.Len(t, mine, 1)
	assert.Equal(t, f.share.Token, mine[0].Token)
	assert.True(t, mine[0].Own)

	// An operator sees every share: their own with its link, others' with owner and console address.
	olgaSess := f.e.session(f.olga, "olga's own")
	f.e.runTurn(olgaSess.ID, "olga asks")
	own := f.e.createShare(f.olgaTok, olgaSess.ID)
	all := list(f.olgaTok, "")
	require.Len(t, all, 3)
	byID := map[string]entry{}
	for _, e := range all {
		byID[e.ID] = e
	}
	assert.Equal(t, own.Token, byID[own.ID].Token)
	assert.True(t, byID[own.ID].Own)
	a := byID[f.share.ID]
	assert.False(t, a.Own)
	assert.Equal(t, "alice", a.Owner)
	assert.Empty(t, a.Token, "no owner's token in an operator's hands")
	assert.Empty(t, a.URL)
	assert.Equal(t, f.e.srv.cfg.PublicURL+"/operator/shares/"+f.share.ID, a.OperatorURL)
	assert.Equal(t, "Bob's chat", byID[f.bobShare.ID].Title)
	only := list(f.olgaTok, "?scope=own")
	require.Len(t, only, 1)
	assert.Equal(t, own.ID, only[0].ID)

	// DELETE by id: a user cannot revoke another's share; an operator can, audited.
	status, _, _ := f.req("DELETE", "/api/shares/"+f.bobShare.ID, bearer(f.aliceTok))
	assert.Equal(t, http.StatusNotFound, status)
	assert.Empty(t, f.auditOf(store.AuditShareRevoke))
	status, _, _ = f.req("DELETE", "/api/shares/"+f.bobShare.ID, bearer(f.olgaTok))
	assert.Equal(t, http.StatusNoContent, status)
	revs := f.auditOf(store.AuditShareRevoke)
	require.Len(t, revs, 1)
	assert.Equal(t, f.bobShare.ID, revs[0].Target)
	status, _, _ = f.req("DELETE", "/api/shares/"+own.ID, bearer(f.olgaTok))
	assert.Equal(t, http.StatusNoContent, status, "their own, as any owner")
	assert.Len(t, f.auditOf(store.AuditShareRevoke), 1, "revoking one's own share is not an operator action")
}

func TestFeedbackVotesForms(t *testing.T) {
	for meta, want := range map[string][2]int{
		``: {0, 0}, `{}`: {0, 0}, `{"feedback":{"rating":"up"}}`: {1, 0}, `{"feedback":{"rating":"DOWN","comment":"x"}}`: {0, 1},
		`{"feedback":"up"}`: {1, 0}, `{"feedback":{"value":"down"}}`: {0, 1}, `{"feedback":{"vote":"up"}}`: {1, 0},
		`{"feedback":[{"rating":"up"},{"rating":"up"},{"rating":"down"},{"rating":"meh"}]}`: {2, 1},
		`{"feedback":42}`: {0, 0}, `{"feedback":null}`: {0, 0}, `not json "feedback"`: {0, 0},
	} {
		up, down := feedbackVotes([]byte(meta))
		assert.Equal(t, want, [2]int{up, down}, meta)
	}
	assert.Equal(t, 2, hiddenLinks([]byte(`{"links":{"hidden":2,"allowed":[]}}`)))
	assert.Equal(t, 0, hiddenLinks([]byte(`{"links":{"hidden":-1}}`)))
	assert.Equal(t, 0, hiddenLinks([]byte(`{"links":"x"}`)))
}

// between returns the text after the first from up to the next to.
func between(t *testing.T, s, from, to string) string {
	t.Helper()
	i := strings.Index(s, from)
	require.GreaterOrEqual(t, i, 0, "%q not found", from)
	rest := s[i+len(from):]
	j := strings.Index(rest, to)
	require.GreaterOrEqual(t, j, 0, "%q not found after %q", to, from)
	return rest[:j]
}

// cellTexts returns the text of each <td> of a table row, tags removed and space collapsed.
func cellTexts(row string) []string {
	var out []string
	for _, part := range strings.Split(row, "<td")[1:] {
		part = part[strings.Index(part, ">")+1:]
		if k := strings.Index(part, "</td>"); k >= 0 {
			part = part[:k]
		}
		var b strings.Builder
		in := false
		for _, r := range part {
			switch {
			case r == '<':
				in = true
			case r == '>':
				in = false
			case !in:
				b.WriteRune(r)
			}
		}
		out = append(out, strings.Join(strings.Fields(b.String()), " "))
	}
	return out
}

func u64s(v uint64) string { return strconv.FormatUint(v, 10) }
