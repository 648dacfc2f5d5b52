package gateway

import (
	"bufio"
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
	msgs, err := s.st.ListMessages(r.Context(), sess.ID)
	if err != nil {
		return s.storeErr("list_messages", err)
	}
	lang := langParam(r)
	w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="citegate-`+safeFileName(sess.ID)+`.md"`)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	writeMarkdown(bw, sess, msgs, lang, s.cfg.Now())
	if err := bw.Flush(); err != nil {
		s.log.DebugContext(r.Context(), "markdown export aborted", "session", sess.ID, "err", err)
	}
	return nil
}

// writeMarkdown writes the conversation of msgs (its visible messages) as Markdown.
func writeMarkdown(b *bufio.Writer, sess store.Session, msgs []store.Message, lang string, now time.Time) {
	lb := mdLabelsFor(lang)
	title := strings.TrimSpace(sess.Title)
	if title == "" {
		title = "citegate"
	}
	visibleCount := 0
	for _, m := range msgs {
		if visible(m) {
			visibleCount++
		}
	}
	b.WriteString("# " + mdEscape(title) + "\n\n")
	b.WriteString("citegate · " + lb.exported + " " + mdTime(now) + " · " + strconv.Itoa(visibleCount) + " " + lb.messages + "\n")
	for _, m := range msgs {
		if !visible(m) {
			continue
		}
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
			continue
		}
		b.WriteString("### " + lb.assistant + " · " + mdTime(m.CreatedAt) + "\n\n")
		cits := citations.FromMetadata(m.Metadata)
		b.WriteString(answerBody(m.Content, cits, linkAllowList(m.Metadata, cits), superNumber, ",") + "\n")
		if interrupted(m.Metadata) {
			b.WriteString("\n*" + lb.interrupted + "*\n")
		}
		if len(cits) > 0 {
			b.WriteString("\n**" + sourcesLabel(lang) + "**\n\n")
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
