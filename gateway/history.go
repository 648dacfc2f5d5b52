package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/citegate/citegate/store"
)

// toolLineJSON is one tool call of a run as the desktop shows it under the answer ("已搜索 …",
// "已阅读网页 …"): the same fields as the live tool.started / tool.finished frames, so history and
// live runs render alike.
type toolLineJSON struct {
	CallID    string `json:"callId"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// OK is false when the tool failed (its result is an error object) or never answered.
	OK bool `json:"ok"`
}

// maxToolArg bounds the query or URL a tool line carries; the desktop shows the first 120
// characters.
const maxToolArg = 300

// pageJSON is the conversation view of a page read without tool traffic (session.open /
// session.more, see ws_page.go; the paged REST history): the visible messages, each final answer
// with the tool lines of its own run, read through the run → messages index. A failed read costs that answer its tool
// lines, not the page.
func (s *Server) pageJSON(ctx context.Context, page []store.Message, lang string) []messageJSON {
	out := make([]messageJSON, 0, len(page))
	for _, m := range page {
		if !visible(m) {
			continue
		}
		mj := s.toMessageJSON(m, lang)
		if m.Role == store.RoleAssistant && m.RunID != "" {
			run, err := s.st.ListRunMessages(ctx, m.RunID)
			if err != nil {
				s.storeErr("list_run_messages", err)
			} else {
				mj.Tools = runToolLines(run)[m.RunID]
			}
		}
		out = append(out, mj)
	}
	return out
}

// runToolLines collects, per run, the tool calls its assistant messages made, in order, each
// marked ok when its result is not an error object (DESIGN §4's failure shape; the agent decides
// tool.finished's ok the same way).
func runToolLines(all []store.Message) map[string][]toolLineJSON {
	// One rule for both readers: the streamed history feeds the same collector a page at a time.
	var l runLines
	for _, m := range all {
		l.note(m)
	}
	return l.lines
}

// toolLabelArgs keeps of a tool call's arguments what a tool line shows, the query or the URL,
// each cut to maxToolArg runes, as a JSON object the desktop parses like a live frame's. Arguments
// that are not a JSON object give "".
func toolLabelArgs(raw string) string {
	var args map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &args) != nil {
		return ""
	}
	kept := map[string]string{}
	for _, k := range []string{"query", "url"} {
		var v string
		if json.Unmarshal(args[k], &v) == nil && v != "" {
			if utf8.RuneCountInString(v) > maxToolArg {
				v = string([]rune(v)[:maxToolArg])
			}
			kept[k] = v
		}
	}
	if len(kept) == 0 {
		return "{}"
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return ""
	}
	return string(b)
}

// hasErrorKey reports whether content is a JSON object with a top-level "error" key. Successful
// results are the large ones (page text); most never spell "error" nor an escape that could, and
// are passed without parsing.
func hasErrorKey(content string) bool {
	if !strings.Contains(content, "error") && !strings.Contains(content, `\u`) {
		return false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal([]byte(content), &top) != nil {
		return false
	}
	_, ok := top["error"]
	return ok
}
