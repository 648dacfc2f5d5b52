package web

import (
	"bufio"
	"fmt"
	"io"
	"time"
)

// The operator console's pages (templates/operator.html, static/operator.css). Like the share page
// they carry no script: every action is a link or a form, so the console works with JavaScript off.

// OperatorPage fills the console: one of its tabs ("shares", "dropped", "hidden", "audit").
type OperatorPage struct {
	Lang, UserName string
	Tab            string
	// Notice is a one-line confirmation shown above the content (after a revocation).
	Notice  string
	Shares  []OperatorShareRow
	Answers []OperatorAnswerRow
	Audit   []AuditRow
	// OlderURL pages back through the audit log; empty on its last page.
	OlderURL string
}

// OperatorShareRow is one live share in the console's list.
type OperatorShareRow struct {
	ID, Title, Owner   string
	CreatedAt          time.Time
	Watermark          uint64
	Messages           int
	Kept, Dropped      int
	Hidden             int
	Up, Down           int
	ViewURL, RevokeURL string
	// Live is false when the shared chat was deleted (the share opens nothing).
	Live bool
}

// OperatorAnswerRow is one shared answer a filter found (markers dropped or links hidden).
type OperatorAnswerRow struct {
	Title, Owner, Question string
	At                     time.Time
	Dropped, Hidden        int
	URL                    string
}

// AuditRow is one audit log entry as the console shows it.
type AuditRow struct {
	ID                            uint64
	Time                          time.Time
	Actor, Action, Target, Detail string
}

// OperatorShareView fills the read-only view of one share: the share page's rendering with what
// the operator needs beside each answer.
type OperatorShareView struct {
	Lang, UserName              string
	ID, Title, Owner, RevokeURL string
	CreatedAt                   time.Time
	Watermark                   uint64
	Messages                    []OperatorMessage
}

// OperatorMessage is a shared message with its review figures (answers only).
type OperatorMessage struct {
	MessageView
	Kept, Dropped, Hidden, Up, Down int
	// HasRun is true when the answer's run (and so its marker counts) is known.
	HasRun bool
}

// RenderOperator writes a console page.
func RenderOperator(w io.Writer, d OperatorPage) error {
	d.Lang = normLang(d.Lang)
	return render(w, "operator.html", d)
}

// opMsg is what the operator_share.msg template places: one message and the page language.
type opMsg struct {
	Lang string
	M    OperatorMessage
}

// OperatorShareStream writes the operator's view of a share in parts, as ShareStream writes the
// share page: StartOperatorShare everything above the messages, Message one message, End the
// empty-conversation notice when nothing was written and everything below. Output is buffered;
// Flush hands what is buffered to the writer.
type OperatorShareStream struct {
	w    *bufio.Writer
	lang string
	n    int
}

// StartOperatorShare writes the head of the view described by d (d.Messages is ignored).
func StartOperatorShare(w io.Writer, d OperatorShareView) (*OperatorShareStream, error) {
	if initErr != nil {
		return nil, initErr
	}
	d.Lang = normLang(d.Lang)
	d.Messages = nil
	s := &OperatorShareStream{w: bufio.NewWriterSize(w, 32<<10), lang: d.Lang}
	if err := s.exec("operator_share.head", d); err != nil {
		return nil, err
	}
	return s, nil
}

// Message writes one message.
func (s *OperatorShareStream) Message(m OperatorMessage) error {
	s.n++
	return s.exec("operator_share.msg", opMsg{Lang: s.lang, M: m})
}

// Flush sends what is buffered.
func (s *OperatorShareStream) Flush() error { return s.w.Flush() }

// End writes the rest of the view and flushes it.
func (s *OperatorShareStream) End() error {
	if s.n == 0 {
		if err := s.exec("operator_share.empty", struct{ Lang string }{s.lang}); err != nil {
			return err
		}
	}
	if err := s.exec("operator_share.foot", nil); err != nil {
		return err
	}
	return s.w.Flush()
}

func (s *OperatorShareStream) exec(name string, data any) error {
	if err := tmpl.ExecuteTemplate(s.w, name, data); err != nil {
		return fmt.Errorf("web: render %s: %w", name, err)
	}
	return nil
}

// RenderOperatorShare writes the operator's read-only view of one share.
func RenderOperatorShare(w io.Writer, d OperatorShareView) error {
	d.Lang = normLang(d.Lang)
	return render(w, "operator_share.html", d)
}

// Translate returns a page string in lang (zh or en), for the few texts handlers place themselves.
func Translate(lang, key string) string { return translate(normLang(lang), key) }
