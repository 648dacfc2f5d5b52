package agent_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/agent/tools"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// TestExtractiveOverBundledCorpus runs the offline default end to end: the extractive model, the
// real web_search tool over the bundled corpus, the loop, the citation hook and the real store.
func TestExtractiveOverBundledCorpus(t *testing.T) {
	corpus, err := tools.LoadCorpus("", "http://127.0.0.1:8080")
	require.NoError(t, err)
	st, err := store.Open(filepath.Join(t.TempDir(), "citegate.db"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	a, err := agent.New(agent.Config{
		Store:  st,
		Model:  agent.NewExtractive(),
		Tools:  []agent.Tool{tools.NewWebSearch(corpus)},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close(context.Background()) })

	tests := []struct {
		question string
		cite     bool
		contains string
	}{
		{"电子发票抬头写错了怎么办？", true, "红冲"},
		{"年假有几天？", true, ""},
		{"火星探测器用什么推进剂？", false, "没有在检索到的资料中找到"},
		{"What is the airspeed of an unladen swallow?", false, "could not find"},
	}
	for _, tc := range tests {
		t.Run(tc.question, func(t *testing.T) {
			sess, err := st.CreateSession(context.Background(), store.Session{UserID: "u", Channel: "cli"})
			require.NoError(t, err)
			h, err := a.Submit(context.Background(), agent.Turn{SessionID: sess.ID, Text: tc.question, Channel: "cli"})
			require.NoError(t, err)
			select {
			case <-h.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("run did not finish")
			}
			out := h.Outcome()
			require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
			t.Logf("%s →\n%s", tc.question, out.Content)
			assert.Contains(t, out.Content, tc.contains)
			if !tc.cite {
				assert.Empty(t, out.Citations)
				assert.Empty(t, citations.Extract(out.Content))
				return
			}
			require.NotEmpty(t, out.Citations)
			for _, c := range out.Citations {
				doc, ok := corpus.Lookup(c.URL)
				require.True(t, ok, "cited URL %s is not in the corpus", c.URL)
				assert.Equal(t, doc.Title, c.Title)
				assert.True(t, strings.HasPrefix(c.URL, "http://127.0.0.1:8080/kb/"))
			}
			msg, err := st.GetMessage(context.Background(), out.FinalMessageID)
			require.NoError(t, err)
			assert.Equal(t, out.Citations, citations.FromMetadata(msg.Metadata))
		})
	}

	// The invoice question cites the invoice-title document.
	sess, err := st.CreateSession(context.Background(), store.Session{UserID: "u", Channel: "cli"})
	require.NoError(t, err)
	h, err := a.Submit(context.Background(), agent.Turn{SessionID: sess.ID, Text: "电子发票抬头写错了怎么办？"})
	require.NoError(t, err)
	<-h.Done()
	out := h.Outcome()
	require.NotEmpty(t, out.Citations)
	assert.Contains(t, out.Citations[0].Title, "抬头")
}
