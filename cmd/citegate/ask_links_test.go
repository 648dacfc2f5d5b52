package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// TestAskLinkRule: `citegate ask` prints an answer under the link rule read from the stored answer:
// an unverified markdown link keeps only its text, an unverified bare URL becomes the notice, a URL
// recorded in metadata.links.allowed and a citation's URL stay.
func TestAskLinkRule(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "citegate.db"), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	sess, err := st.CreateSession(ctx, store.Session{UserID: "cli", Channel: "cli"})
	require.NoError(t, err)
	content := "见[官网](https://evil.example.com/login)或 https://evil.example.com/x ，" +
		"流程见 https://kb.example.com/leave [^1^]，原文 [手册](https://example.com/a)。\n\n`https://code.example.com/literal`\n"
	final, err := st.AppendMessage(ctx, store.Message{SessionID: sess.ID, Role: store.RoleAssistant, Content: content,
		Metadata: json.RawMessage(`{"citations":[{"n":1,"url":"https://example.com/a","title":"手册"}],"links":{"hidden":2,"allowed":["https://kb.example.com/leave"]}}`)})
	require.NoError(t, err)
	cits := citations.FromMetadata(final.Metadata)
	out := agent.Outcome{Phase: store.PhaseCompleted, FinalMessageID: final.ID, Content: content, Citations: cits}

	allowed := storedAllowList(ctx, st, out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	text := formatAnswer(content, cits, allowed, "zh")
	assert.NotContains(t, text, "evil.example.com")
	assert.Contains(t, text, "见官网或 "+citations.HiddenLinkNotice)
	assert.Contains(t, text, "https://kb.example.com/leave [1]", "a recorded verified URL stays")
	assert.Contains(t, text, "[手册](https://example.com/a)", "a citation's URL is always allowed")
	assert.Contains(t, text, "`https://code.example.com/literal`", "code is literal")
	assert.Contains(t, text, "[1] 手册 — https://example.com/a")

	// Without metadata.links only the citations' URLs are allowed.
	text = formatAnswer(content, cits, nil, "zh")
	assert.NotContains(t, text, "kb.example.com")
	assert.NotContains(t, text, "evil.example.com")
	assert.Equal(t, 2, strings.Count(text, citations.HiddenLinkNotice))
}
