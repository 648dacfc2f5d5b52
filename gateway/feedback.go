package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/citegate/citegate/store"
)

// Feedback on an answer: thumbs up or down and an optional comment, kept in the answer's metadata
// under "feedback" (so the owner's JSONL export carries it; the public share export does not) and
// counted in citegate_feedback_total{vote}. Only the answer's owner can see, set or clear it, and
// a vote records its author: should anyone else ever reach the message (an operator reviewing a
// shared chat), the vote is still not theirs to change.

const (
	voteUp   = "up"
	voteDown = "down"
	// maxFeedbackComment bounds a comment, in characters.
	maxFeedbackComment = 1000
	// maxFeedbackBody bounds the request body.
	maxFeedbackBody = 16 << 10
)

// storedFeedback is metadata.feedback.
type storedFeedback struct {
	Vote    string    `json:"vote"`
	Comment string    `json:"comment,omitempty"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
}

// feedbackJSON is the feedback the desktop sees (the author is always the viewer).
type feedbackJSON struct {
	Vote    string    `json:"vote"`
	Comment string    `json:"comment,omitempty"`
	At      time.Time `json:"at"`
}

// feedbackCounter returns citegate_feedback_total registered on reg, with both votes visible at
// zero.
func feedbackCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "citegate_feedback_total",
		Help: "Votes cast on answers (a vote counts when it is set or changed, not when only its comment changes).",
	}, []string{"vote"})
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("gateway: register feedback counter: %w", err)
	}
	c.WithLabelValues(voteUp)
	c.WithLabelValues(voteDown)
	return c, nil
}

// ownedAnswer loads an answer of u's for feedback; not u's is not found, and a message that is
// not an answer cannot take feedback. A vote by someone else is not u's to change.
func (s *Server) ownedAnswer(r *http.Request, u store.User) (store.Message, actionMeta, error) {
	m, err := s.ownedMessage(r, u, r.PathValue("id"))
	if err != nil {
		return store.Message{}, actionMeta{}, err
	}
	if !isAnswer(m) {
		return store.Message{}, actionMeta{}, errBadRequest("feedback is for answers only")
	}
	am := readActionMeta(m.Metadata)
	if am.Feedback != nil && am.Feedback.By != "" && am.Feedback.By != u.ID {
		return store.Message{}, actionMeta{}, errNotFound()
	}
	return m, am, nil
}

// handleSetFeedback is PUT /api/messages/{id}/feedback {"vote":"up"|"down","comment"?}.
func (s *Server) handleSetFeedback(w http.ResponseWriter, r *http.Request, u store.User) error {
	m, am, err := s.ownedAnswer(r, u)
	if err != nil {
		return err
	}
	var req struct {
		Vote    string `json:"vote"`
		Comment string `json:"comment"`
	}
	if err := decodeBody(w, r, maxFeedbackBody, &req); err != nil {
		return err
	}
	if req.Vote != voteUp && req.Vote != voteDown {
		return errBadRequest(`vote must be "up" or "down"`)
	}
	comment, err := cleanText(req.Comment, maxFeedbackComment, true)
	if err != nil {
		return errBadRequest("comment: " + err.Error())
	}
	fb := storedFeedback{Vote: req.Vote, Comment: comment, By: u.ID, At: s.feedbackTime()}
	raw, err := json.Marshal(fb)
	if err != nil {
		return errInternal(err)
	}
	if err := s.st.MergeMetadata(r.Context(), m.ID, map[string]json.RawMessage{"feedback": raw}); err != nil {
		return s.storeErr("merge_metadata", err)
	}
	if am.Feedback == nil || am.Feedback.Vote != fb.Vote {
		s.m.feedback.WithLabelValues(fb.Vote).Inc()
	}
	writeJSON(w, http.StatusOK, map[string]any{"messageId": m.ID, "feedback": feedbackJSON{Vote: fb.Vote, Comment: fb.Comment, At: fb.At}})
	return nil
}

// handleClearFeedback is DELETE /api/messages/{id}/feedback: the vote is withdrawn (stored as
// null, so the record shows that there was none rather than losing the key's history silently).
func (s *Server) handleClearFeedback(w http.ResponseWriter, r *http.Request, u store.User) error {
	m, _, err := s.ownedAnswer(r, u)
	if err != nil {
		return err
	}
	if err := s.st.MergeMetadata(r.Context(), m.ID, map[string]json.RawMessage{"feedback": json.RawMessage("null")}); err != nil {
		return s.storeErr("merge_metadata", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// decodeBody reads one JSON object of at most limit bytes into v; anything else is a bad request
// that says what was wrong.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return errBadRequest(fmt.Sprintf("the request body is larger than %d bytes", limit))
		case errors.Is(err, io.EOF):
			return errBadRequest("the request needs a JSON body")
		}
		return errBadRequest("the request body is not the expected JSON object: " + err.Error())
	}
	if dec.More() {
		return errBadRequest("the request body holds more than one JSON value")
	}
	return nil
}

// cleanText trims s and checks it: valid UTF-8, at most maxRunes characters, no control
// characters other than line breaks and tabs when multiline (which single-line text turns into
// spaces). Empty is allowed; the caller decides whether it may be.
func cleanText(s string, maxRunes int, multiline bool) (string, error) {
	if !utf8.ValidString(s) {
		return "", errors.New("not valid UTF-8")
	}
	s = strings.TrimSpace(s)
	if n := utf8.RuneCountInString(s); n > maxRunes {
		return "", fmt.Errorf("%d characters, at most %d allowed", n, maxRunes)
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t' || r == '\r':
			if multiline {
				b.WriteRune(r)
			} else {
				b.WriteByte(' ')
			}
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029':
			return "", errors.New("contains control characters")
		default:
			b.WriteRune(r)
		}
	}
	if multiline {
		return b.String(), nil
	}
	return strings.Join(strings.Fields(b.String()), " "), nil
}
