package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	answers                         []answerReview
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
// many shares it has.
func (s *Server) reviewShares(ctx context.Context) ([]shareReview, error) {
	all, err := s.st.ListAllShares(ctx)
	if err != nil {
		return nil, s.storeErr("list_all_shares", err)
	}
	type content struct {
		msgs []store.Message
		runs []store.Run
	}
	loaded := map[string]content{}
	out := make([]shareReview, 0, len(all))
	for _, e := range all {
		rv := shareReview{share: e}
		if e.Session.ID != "" {
			c, ok := loaded[e.SessionID]
			if !ok {
				msgs, runs, err := s.sessionContent(ctx, e.SessionID)
				if err != nil && !errors.Is(err, errShareGone) {
					return nil, err
				}
				c = content{msgs, runs}
				loaded[e.SessionID] = c
			}
			rv.fill(upTo(c.msgs, e.Watermark), c.runs)
		}
		out = append(out, rv)
	}
	return out, nil
}

// sessionContent reads a session's messages and runs; a session deleted meanwhile is errShareGone.
func (s *Server) sessionContent(ctx context.Context, sessionID string) ([]store.Message, []store.Run, error) {
	msgs, err := s.st.ListMessages(ctx, sessionID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, errShareGone
		}
		return nil, nil, s.storeErr("list_messages", err)
	}
	runs, err := s.st.ListRuns(ctx, sessionID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, errShareGone
		}
		return nil, nil, s.storeErr("list_runs", err)
	}
	return msgs, runs, nil
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

// upTo keeps the messages at or below the watermark: the snapshot a share froze. Messages are in
// id order, so the cut is a prefix.
func upTo(msgs []store.Message, watermark uint64) []store.Message {
	for i, m := range msgs {
		if m.ID > watermark {
			return msgs[:i]
		}
	}
	return msgs
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

func (rv *shareReview) fill(msgs []store.Message, runs []store.Run) {
	byFinal := runsByFinal(runs)
	question := ""
	for _, m := range msgs {
		if !visible(m) {
			continue
		}
		rv.messages++
		if m.Role == store.RoleUser {
			question = shorten(m.Content, 80)
			continue
		}
		var run *store.Run
		if r, ok := byFinal[m.ID]; ok {
			run = &r
		}
		a := reviewAnswer(m, run)
		a.question = question
		rv.kept += a.kept
		rv.dropped += a.dropped
		rv.hidden += a.hidden
		rv.up += a.up
		rv.down += a.down
		rv.answers = append(rv.answers, a)
	}
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
