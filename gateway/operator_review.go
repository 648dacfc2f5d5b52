package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/citegate/citegate/store"
)

// shareReview is one live share with the figures the console shows for it, all computed from the
// share's snapshot (messages up to its watermark) and nothing past it.
type shareReview struct {
	share                           store.OperatorShare
	messages                        int // visible messages (questions and answers)
	kept, dropped, hidden, up, down int
	// answers are the shared answers a console filter can list (markers dropped or links
	// hidden), in message order.
	answers []answerReview
}

// answerReview is one shared answer's figures.
type answerReview struct {
	id               uint64
	at               time.Time
	question         string // the question it answers, shortened
	hasRun           bool   // its run is known, so kept/dropped are too
	kept, dropped    int
	hidden, up, down int
}

// reviewShares lists every live share with its figures. Each shared session is read once however
// many shares it has (reviewSession), one session at a time.
func (s *Server) reviewShares(ctx context.Context) ([]shareReview, error) {
	all, err := s.st.ListAllShares(ctx)
	if err != nil {
		return nil, s.storeErr("list_all_shares", err)
	}
	out := make([]shareReview, len(all))
	bySession := map[string][]*shareReview{}
	var order []string
	for i, e := range all {
		out[i] = shareReview{share: e}
		if e.Session.ID == "" {
			continue
		}
		if _, ok := bySession[e.SessionID]; !ok {
			order = append(order, e.SessionID)
		}
		bySession[e.SessionID] = append(bySession[e.SessionID], &out[i])
	}
	for _, id := range order {
		if err := s.reviewSession(ctx, id, bySession[id]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// reviewPage is how many messages one read of the console's review fetches.
const reviewPage = 256

// pendingAnswer is a flagged answer (dropped markers or hidden links) read before its question:
// the review walks a session backwards.
type pendingAnswer struct {
	a  answerReview
	in []*shareReview // the shares whose snapshot holds it
}

// reviewSession fills the figures of the shares of one session. It reads the conversation
// backwards from the newest watermark a page at a time, USER messages and answers only (the
// dialog index skips tool traffic without decoding it), so it holds one page, the session's run
// records (for marker counts) and the flagged answers still waiting for their question, never the
// session. A message counts for every share whose watermark it is at or below. A session deleted
// meanwhile leaves its shares' figures at zero.
func (s *Server) reviewSession(ctx context.Context, sessionID string, shares []*shareReview) error {
	var newest uint64
	for _, rv := range shares {
		newest = max(newest, rv.share.Watermark)
	}
	if newest == 0 {
		return nil
	}
	runs, err := s.st.ListRuns(ctx, sessionID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return s.storeErr("list_runs", err)
	}
	byFinal := runsByFinal(runs)
	var pending []pendingAnswer
	settle := func(question string) {
		for _, p := range pending {
			p.a.question = question
			for _, rv := range p.in {
				rv.answers = append(rv.answers, p.a)
			}
		}
		pending = pending[:0]
	}
	before := newest + 1
	for {
		page, err := s.st.ListDialogBefore(ctx, sessionID, before, reviewPage)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			return s.storeErr("list_dialog_before", err)
		}
		for i := len(page) - 1; i >= 0; i-- {
			m := page[i]
			if !visible(m) {
				continue
			}
			var in []*shareReview
			for _, rv := range shares {
				if m.ID <= rv.share.Watermark {
					rv.messages++
					in = append(in, rv)
				}
			}
			if m.Role == store.RoleUser {
				settle(shorten(m.Content, 80))
				continue
			}
			var run *store.Run
			if r, ok := byFinal[m.ID]; ok {
				run = &r
			}
			a := reviewAnswer(m, run)
			for _, rv := range in {
				rv.kept += a.kept
				rv.dropped += a.dropped
				rv.hidden += a.hidden
				rv.up += a.up
				rv.down += a.down
			}
			if a.dropped > 0 || a.hidden > 0 {
				pending = append(pending, pendingAnswer{a, in})
			}
		}
		if len(page) < reviewPage {
			break
		}
		before = page[0].ID
	}
	settle("")
	for _, rv := range shares {
		slices.Reverse(rv.answers)
	}
	return nil
}

// shareContent is what an operator may see of a share: its session and an iterator over the
// session's messages up to the watermark, a page per call (messagePages, as the share page reads
// it), its first page already read. A share whose session is gone is not found.
func (s *Server) shareContent(ctx context.Context, sh store.Share) (store.Session, []store.Message, func() ([]store.Message, error), error) {
	sess, err := s.st.GetSession(ctx, sh.SessionID)
	if err != nil {
		return sess, nil, nil, s.storeErr("get_session", err)
	}
	next := s.messagePages(ctx, sess.ID, sh.Watermark)
	first, err := next()
	if err != nil {
		return sess, nil, nil, s.storeErr("list_messages_after", err) // ErrNotFound: deleted a moment ago
	}
	return sess, first, next, nil
}

// finalRun is the run whose final answer m is, when its record says so; a failed read costs the
// answer its marker counts, not the view.
func (s *Server) finalRun(ctx context.Context, m store.Message) *store.Run {
	if m.RunID == "" {
		return nil
	}
	r, err := s.st.GetRun(ctx, m.RunID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.storeErr("get_run", err)
			s.log.WarnContext(ctx, "operator review: run unreadable", "run", m.RunID, "err", err)
		}
		return nil
	}
	if r.FinalMessageID != m.ID {
		return nil
	}
	return &r
}

// runsByFinal indexes runs by their final answer's message id.
func runsByFinal(runs []store.Run) map[uint64]store.Run {
	out := make(map[uint64]store.Run, len(runs))
	for _, r := range runs {
		if r.FinalMessageID != 0 {
			out[r.FinalMessageID] = r
		}
	}
	return out
}

// reviewAnswer reads an answer's figures: marker counts from its run (nil: unknown), hidden links
// from metadata.links.hidden, feedback from metadata.feedback.
func reviewAnswer(m store.Message, run *store.Run) answerReview {
	a := answerReview{id: m.ID, at: m.CreatedAt}
	if run != nil {
		a.hasRun, a.kept, a.dropped = true, run.MarkersKept, run.MarkersDropped
	}
	a.hidden = hiddenLinks(m.Metadata)
	a.up, a.down = feedbackVotes(m.Metadata)
	return a
}

// hiddenLinks reads metadata.links.hidden; missing or malformed is 0.
func hiddenLinks(metadata []byte) int {
	if !bytes.Contains(metadata, []byte(`"links"`)) {
		return 0
	}
	var doc struct {
		Links struct {
			Hidden int `json:"hidden"`
		} `json:"links"`
	}
	if json.Unmarshal(metadata, &doc) != nil || doc.Links.Hidden < 0 {
		return 0
	}
	return doc.Links.Hidden
}

// feedbackVotes reads the answer's feedback (metadata.feedback, see feedback.go) as up and down
// counts. The record is its owner's vote, {"vote":"up"|"down","comment",...}, or null once
// withdrawn; "rating" or "value" in place of "vote", a bare "up"/"down" string, or a list of such
// records (should several readers ever vote) are read too, and anything else counts as no vote.
func feedbackVotes(metadata []byte) (up, down int) {
	if !bytes.Contains(metadata, []byte(`"feedback"`)) {
		return 0, 0
	}
	var doc struct {
		Feedback json.RawMessage `json:"feedback"`
	}
	if json.Unmarshal(metadata, &doc) != nil || len(doc.Feedback) == 0 {
		return 0, 0
	}
	var list []json.RawMessage
	if json.Unmarshal(doc.Feedback, &list) != nil {
		list = []json.RawMessage{doc.Feedback}
	}
	for _, raw := range list {
		switch vote(raw) {
		case "up":
			up++
		case "down":
			down++
		}
	}
	return up, down
}

func vote(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.ToLower(strings.TrimSpace(s))
	}
	var rec struct {
		Vote, Rating, Value string
	}
	if json.Unmarshal(raw, &rec) != nil {
		return ""
	}
	for _, v := range []string{rec.Vote, rec.Rating, rec.Value} {
		if v != "" {
			return strings.ToLower(strings.TrimSpace(v))
		}
	}
	return ""
}

// shorten cuts s to n characters on one line.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
