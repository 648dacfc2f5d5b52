package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

func cmdAsk(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlagSet("ask", `citegate ask [flags] "question"`, stderr)
	fv := registerFlags(fs)
	fv.logDefault = "warn"
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	question := strings.TrimSpace(strings.Join(pos, " "))
	if question == "" {
		fmt.Fprintln(stderr, `citegate ask: a question is required, e.g. citegate ask "电子发票抬头写错了怎么办？"`)
		return errUsage
	}
	cfg, err := loadConfig(fv, getenv)
	if err != nil {
		return err
	}
	log := newLogger(cfg.LogLevel, stderr)

	st, err := openStore(cfg, log, 300*time.Millisecond)
	if errors.Is(err, store.ErrLocked) {
		// serve holds the database: answer from a throw-away one rather than wait for the lock.
		tmp, terr := os.MkdirTemp("", "citegate-ask-")
		if terr != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		fmt.Fprintf(stderr, "note: %s is in use by a running server; this answer is not saved there\n", cfg.dbPath())
		cfg.Data = tmp
		st, err = openStore(cfg, log, time.Second)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	cr, err := buildCore(cfg, st, nil, log)
	if err != nil {
		return err
	}
	defer closeAgent(cr.Agent, log)

	sess, err := st.CreateSession(ctx, store.Session{UserID: "cli", Channel: "cli", Title: question})
	if err != nil {
		return err
	}
	h, err := cr.Agent.Submit(ctx, agent.Turn{SessionID: sess.ID, Text: question, Channel: "cli"})
	if err != nil {
		return err
	}
	select {
	case <-h.Done():
	case <-ctx.Done():
		cr.Agent.Cancel(sess.ID)
		<-h.Done()
	}
	out := h.Outcome()
	allowed := storedAllowList(ctx, st, out, log)
	if out.Phase != store.PhaseCompleted {
		if out.Content != "" {
			text, _ := citations.SafeText(out.Content, citations.AllowList(allowed))
			fmt.Fprintln(stdout, text)
		}
		return fmt.Errorf("run %s: %s", strings.ToLower(string(out.Phase)), out.Error)
	}
	lang := cfg.Lang
	if !hasHan(question) {
		lang = "en"
	}
	fmt.Fprint(stdout, formatAnswer(out.Content, out.Citations, allowed, lang))
	fmt.Fprintf(stderr, "(model: %s; %d verified source(s))\n", cr.Agent.ModelName(), len(out.Citations))
	if note := kbLinksNote(cfg, out.Citations); note != "" {
		fmt.Fprintln(stderr, note)
	}
	return nil
}

// kbLinksNote says so when the answer cites local corpus pages (/kb/ under the public URL) and no
// server answers at the configured address: those links open only while `citegate serve` runs.
func kbLinksNote(cfg Config, cits []citations.Citation) string {
	prefix := cfg.PublicURL + "/kb/"
	kb := false
	for _, c := range cits {
		if strings.HasPrefix(c.URL, prefix) {
			kb = true
			break
		}
	}
	if !kb {
		return ""
	}
	conn, err := net.DialTimeout("tcp", cfg.Addr, 300*time.Millisecond)
	if err == nil {
		_ = conn.Close()
		return ""
	}
	return fmt.Sprintf("note: the %s… links open while `citegate serve` runs at %s (nothing answers there now)", prefix, cfg.Addr)
}

func hasHan(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Han, r) {
			return true
		}
	}
	return false
}

// storedAllowList is the URL list behind the answer's link rule (DESIGN §4), read from the stored
// answer: metadata.links.allowed and the citations' URLs. When the answer cannot be read, only the
// citations' URLs are allowed, so a failure can hide a verified link but never show another.
func storedAllowList(ctx context.Context, st store.Backend, out agent.Outcome, log *slog.Logger) []string {
	allowed := make([]string, 0, len(out.Citations))
	for _, c := range out.Citations {
		allowed = append(allowed, c.URL)
	}
	if out.FinalMessageID == 0 {
		return allowed
	}
	m, err := st.GetMessage(ctx, out.FinalMessageID)
	if err != nil {
		log.Warn("ask: read the stored answer for its link rule", "err", err)
		return allowed
	}
	var doc struct {
		Links struct {
			Allowed []string `json:"allowed"`
		} `json:"links"`
	}
	if len(m.Metadata) > 0 && json.Unmarshal(m.Metadata, &doc) == nil {
		allowed = append(allowed, doc.Links.Allowed...)
	}
	return allowed
}

// formatAnswer renders an answer for a terminal: the link rule applies (a markdown link to a URL
// not in allowed keeps its text, a bare one becomes citations.HiddenLinkNotice; the citations' URLs
// are always allowed), verified markers become [k] with display numbers 1..k, other markers
// vanish, and the sources follow.
func formatAnswer(content string, cits []citations.Citation, allowed []string, lang string) string {
	list := make([]string, 0, len(allowed)+len(cits))
	list = append(list, allowed...)
	for _, c := range cits {
		list = append(list, c.URL)
	}
	content, _, _ = citations.FilterLinks(content, citations.AllowList(list))
	display := citations.DisplayNumbers(cits)
	body := citations.Replace(content, func(m citations.Marker) string {
		if k, ok := display[m.N]; ok {
			return fmt.Sprintf("[%d]", k)
		}
		return ""
	})
	var b strings.Builder
	b.WriteString(strings.TrimRight(body, "\n"))
	b.WriteString("\n")
	if len(cits) > 0 {
		if lang == "en" {
			b.WriteString("\nSources:\n")
		} else {
			b.WriteString("\n来源：\n")
		}
		for _, c := range cits {
			title := c.Title
			if title == "" {
				title = c.URL
			}
			fmt.Fprintf(&b, "[%d] %s — %s\n", display[c.N], title, c.URL)
		}
	}
	return b.String()
}
