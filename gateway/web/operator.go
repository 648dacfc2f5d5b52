package web

import (
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

// RenderOperatorShare writes the operator's read-only view of one share.
func RenderOperatorShare(w io.Writer, d OperatorShareView) error {
	d.Lang = normLang(d.Lang)
	return render(w, "operator_share.html", d)
}

// Translate returns a page string in lang (zh or en), for the few texts handlers place themselves.
func Translate(lang, key string) string { return translate(normLang(lang), key) }
