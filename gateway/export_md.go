package gateway

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// The Markdown export (GET /api/sessions/{id}/export.md) is the conversation as a person reads
// it: each question, each answer with superscript numbers (¹ ²) and its numbered sources, from the
// stored record with the link rule applied as on the page. Tool traffic stays out (the JSONL export
// is the full record). It is plain Markdown with no HTML, so it reads the same in an editor and in
// a viewer.

type mdLabels struct {
	user, assistant, regenerated, edited, interrupted, exported, messages, helpful, unhelpful, feedback string
}

func mdLabelsFor(lang string) mdLabels {
	if lang == "en" {
		return mdLabels{user: "User", assistant: "Assistant", regenerated: "regenerated", edited: "edited",
			interrupted: "(the answer was interrupted)", exported: "exported", messages: "messages",
			helpful: "helpful", unhelpful: "not helpful", feedback: "Feedback"}
	}
	return mdLabels{user: "用户", assistant: "助手", regenerated: "重新生成", edited: "已编辑",
		interrupted: "（回答被中断）", exported: "导出于", messages: "条消息",
		helpful: "有帮助", unhelpful: "没有帮助", feedback: "反馈"}
}

func (s *Server) handleExportMarkdown(w http.ResponseWriter, r *http.Request, u store.User) error {
	sess, err := s.ownedSession(r, u, r.PathValue("id"))
	if err != nil {
		return err
	}
	// Like the JSONL export, the Markdown export walks the session a page at a time, each page its
	// own short read, so a session of any length costs a page of memory and a slow download holds
	// no read transaction open. The header names the number of messages before any of them is
	// written: a first walk counts them over the dialog index (tool traffic is skipped without
	// being decoded), then the second writes them. Both stop at the newest message when the
	// download started, so the count and the body agree while new messages arrive. Everything
	// that can fail before the first byte is read first, so a failing store is still a proper
	// error response.
	ctx := r.Context()
	last, err := s.st.LastMessageID(ctx, sess.ID)
	if err != nil {
		return s.storeErr("last_message_id", err)
	}
	count, err := s.countDialog(ctx, sess.ID, last)
	if err != nil {
		return s.storeErr("list_dialog_before", err)
	}
	next := s.messagePages(ctx, sess.ID, last)
	first, err := next()
	if err != nil {
		return s.storeErr("list_messages_after", err)
	}
	lang := langParam(r)
	w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="citegate-`+safeFileName(sess.ID)+`.md"`)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	mw := mdWriter{b: bw, lb: mdLabelsFor(lang), lang: lang}
	mw.header(sess, count, s.cfg.Now())
	for page := first; len(page) > 0; {
		for _, m := range page {
			mw.message(m)
		}
		if page, err = next(); err != nil {
			s.storeErr("list_messages_after", err)
			s.log.ErrorContext(ctx, "markdown export cut short by a store error", "session", sess.ID, "err", err)
			break
		}
	}
	if err := bw.Flush(); err != nil {
		s.log.DebugContext(ctx, "markdown export aborted", "session", sess.ID, "err", err)
	}
	return nil
}

// countDialog counts the session's visible messages (USER messages and answers, see visible) with
// ids up to last, newest first a page of the dialog index at a time.
func (s *Server) countDialog(ctx context.Context, sessionID string, last uint64) (int, error) {
	if last == 0 {
		return 0, nil
	}
	n := 0
	before := last + 1
	for {
		page, err := s.st.ListDialogBefore(ctx, sessionID, before, exportPage)
		if err != nil {
			return 0, err
		}
		n += len(page)
		if len(page) < exportPage {
			return n, nil
		}
		before = page[0].ID
	}
}

// mdWriter writes a conversation as Markdown, one message at a time.
type mdWriter struct {
	b    *bufio.Writer
	lb   mdLabels
	lang string
}

// header writes the title line and the export line naming count visible messages.
func (mw mdWriter) header(sess store.Session, count int, now time.Time) {
	title := strings.TrimSpace(sess.Title)
	if title == "" {
		title = "citegate"
	}
	mw.b.WriteString("# " + mdEscape(title) + "\n\n")
	mw.b.WriteString("citegate · " + mw.lb.exported + " " + mdTime(now) + " · " + strconv.Itoa(count) + " " + mw.lb.messages + "\n")
}

// message writes m when it is visible (a question or an answer); tool traffic is left out.
func (mw mdWriter) message(m store.Message) {
	if !visible(m) {
		return
	}
	b, lb := mw.b, mw.lb
	am := readActionMeta(m.Metadata)
	b.WriteString("\n---\n\n")
	if m.Role == store.RoleUser {
		head := lb.user
		switch {
		case am.RegenerateOf != 0:
			head += " · " + lb.regenerated
		case am.EditOf != 0:
			head += " · " + lb.edited
		}
		b.WriteString("### " + head + " · " + mdTime(m.CreatedAt) + "\n\n")
		b.WriteString(strings.TrimRight(m.Content, " \t\n") + "\n")
		return
	}
	b.WriteString("### " + lb.assistant + " · " + mdTime(m.CreatedAt) + "\n\n")
	cits := citations.FromMetadata(m.Metadata)
	b.WriteString(answerBody(m.Content, cits, linkAllowList(m.Metadata, cits), superNumber, ",") + "\n")
	if interrupted(m.Metadata) {
		b.WriteString("\n*" + lb.interrupted + "*\n")
	}
	if len(cits) > 0 {
		b.WriteString("\n**" + sourcesLabel(mw.lang) + "**\n\n")
		display := citations.DisplayNumbers(cits)
		for _, c := range cits {
			t := strings.TrimSpace(c.Title)
			if t == "" {
				t = c.URL
			}
			b.WriteString(strconv.Itoa(display[c.N]) + ". [" + mdEscape(t) + "](<" + mdURL(c.URL) + ">)\n")
		}
	}
	if fb := am.Feedback; fb != nil && (fb.Vote == voteUp || fb.Vote == voteDown) {
		verdict := lb.helpful
		if fb.Vote == voteDown {
			verdict = lb.unhelpful
		}
		line := lb.feedback + ": " + verdict
		if fb.Comment != "" {
			line += " — " + mdEscape(strings.Join(strings.Fields(fb.Comment), " "))
		}
		b.WriteString("\n*" + line + "*\n")
	}
}

func mdTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// mdEscaper backslash-escapes the characters that would make a title or comment Markdown syntax
// (a link, an image, emphasis, code, HTML); line breaks become spaces.
var mdEscaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`, "<", `\<`, ">", `\>`,
	"!", `\!`, "#", `\#`, "|", `\|`, "\n", " ", "\r", " ",
)

func mdEscape(s string) string { return mdEscaper.Replace(s) }

// mdURL makes a URL safe inside <…>: the characters that would end it are percent-encoded.
var mdURLEscaper = strings.NewReplacer("<", "%3C", ">", "%3E", " ", "%20", "\n", "%0A", "\r", "%0D")

func mdURL(u string) string { return mdURLEscaper.Replace(u) }
