package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	cr, err := buildCore(cfg, st, log)
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
	if out.Phase != store.PhaseCompleted {
		if out.Content != "" {
			fmt.Fprintln(stdout, citations.Strip(out.Content))
		}
		return fmt.Errorf("run %s: %s", strings.ToLower(string(out.Phase)), out.Error)
	}
	lang := cfg.Lang
	if !hasHan(question) {
		lang = "en"
	}
	fmt.Fprint(stdout, formatAnswer(out.Content, out.Citations, lang))
	fmt.Fprintf(stderr, "(model: %s; %d verified source(s))\n", cr.Agent.ModelName(), len(out.Citations))
	return nil
}

func hasHan(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Han, r) {
			return true
		}
	}
	return false
}

// formatAnswer renders an answer for a terminal: verified markers become [k] with display numbers
// 1..k, other markers vanish, and the sources follow.
func formatAnswer(content string, cits []citations.Citation, lang string) string {
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
