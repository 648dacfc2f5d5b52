package agent_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/agent"
	"github.com/citegate/citegate/agent/extractive"
	"github.com/citegate/citegate/agent/tools"
	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// offlineStack is the offline default: the extractive model and web_search over the bundled corpus,
// on a real store in a temp dir.
func offlineStack(t *testing.T, publicURL string) (*tools.Corpus, *store.Store, *agent.Agent) {
	t.Helper()
	corpus, err := tools.LoadCorpus("", publicURL)
	require.NoError(t, err)
	st, err := store.Open(filepath.Join(t.TempDir(), "citegate.db"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	a, err := agent.New(agent.Config{
		Store:  st,
		Model:  extractive.New(),
		Tools:  []agent.Tool{tools.NewWebSearch(corpus, nil)},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return corpus, st, a
}

// TestExtractiveOverBundledCorpus runs the offline default end to end: the extractive model, the
// real web_search tool over the bundled corpus, the loop, the citation hook and the real store.
func TestExtractiveOverBundledCorpus(t *testing.T) {
	corpus, st, a := offlineStack(t, "http://127.0.0.1:8080")

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

// TestExtractiveAnswersOverBundledCorpus asks realistic questions of the offline default over the
// bundled corpus: the answer must state the key fact, and the sentence stating it must cite the
// document it comes from.
func TestExtractiveAnswersOverBundledCorpus(t *testing.T) {
	const base = "http://127.0.0.1:8080"
	_, st, a := offlineStack(t, base)

	tests := []struct {
		question string
		slug     string   // the document the fact must be cited from; "" for "nothing found"
		facts    []string // each must be in the answer, in a sentence citing slug
		not      []string // must not be in the answer
	}{
		{"年假有几天？", "annual-leave", []string{"法定年假 5 天", "法定年假 15 天"}, []string{"职工带薪年休假条例"}},
		{"差旅住宿标准是多少", "business-travel", []string{"一类：北京、上海、广州、深圳，普通员工 600 元，经理及以上 800 元", "三类：其他城市，普通员工 350 元"}, []string{"本标准适用于"}},
		{"how do I reset my password?", "password-reset-en", []string{"https://password.example.com"}, []string{"Authentication failed"}},
		{"电子发票抬头写错了怎么办？", "einvoice-title-correction", []string{"先申请红冲原发票，再按正确抬头重新开具"}, nil},
		{"出差伙食补贴多少钱", "business-travel", []string{"每天 100 元"}, nil},
		{"年假可以结转吗", "annual-leave", []string{"结转到次年 3 月 31 日"}, nil},
		{"会议室最长能订多久", "meeting-room", []string{"单次预订最长 4 小时"}, nil},
		{"公司的纳税人识别号是多少", "einvoice-title-correction", []string{"91310115MA1K4YQ83T"}, nil},
		{"账号被锁定了怎么办", "password-reset", []string{"锁定 30 分钟"}, nil},
		{"笔记本电脑用几年可以换", "it-equipment", []string{"使用满 4 年可申请更换"}, []string{"英寸"}},
		{"Can I use a USB drive?", "data-security", []string{"USB storage devices are blocked"}, nil},
		{"Who do I report a lost laptop to?", "data-security", []string{"security@example.com"}, nil},
		{"火星探测器用什么推进剂？", "", []string{"没有在检索到的资料中找到"}, nil},
		{"What is the airspeed of an unladen swallow?", "", []string{"could not find"}, nil},
	}
	marker := regexp.MustCompile(`\[\^(\d+)\^\]`)
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
			for _, s := range tc.not {
				assert.NotContains(t, out.Content, s)
			}
			if tc.slug == "" {
				for _, f := range tc.facts {
					assert.Contains(t, out.Content, f)
				}
				assert.Empty(t, out.Citations)
				assert.Empty(t, citations.Extract(out.Content))
				return
			}
			// The marker numbers of the final content are the display numbers of the citations.
			urlOf := map[string]string{}
			for _, c := range out.Citations {
				urlOf[strconv.Itoa(c.N)] = c.URL
			}
			want := base + "/kb/" + tc.slug
			for _, f := range tc.facts {
				found := false
				for _, line := range strings.Split(out.Content, "\n") {
					if !strings.Contains(line, f) {
						continue
					}
					found = true
					m := marker.FindAllStringSubmatch(line, -1)
					require.NotEmpty(t, m, "the sentence with %q cites nothing", f)
					assert.Equal(t, want, urlOf[m[len(m)-1][1]], "the sentence with %q cites the wrong document", f)
				}
				assert.True(t, found, "the answer lacks %q", f)
			}
			// Every sentence of the answer is cited.
			lines := strings.Split(out.Content, "\n")
			for _, line := range lines[1:] {
				if strings.TrimSpace(line) != "" {
					assert.Regexp(t, `\[\^\d+\^\]$`, line)
				}
			}
		})
	}
}
