package agent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/citations"
	"github.com/citegate/citegate/store"
)

// TestLinkRuleInTheRun drives a model that writes links the run never saw, in chunks that cut the
// URLs, beside links the run did see (a registry URL, a URL inside a tool result, the user's own).
// The stream never shows an unverified host, the record keeps the raw text, and metadata.links
// holds the decision every renderer applies.
func TestLinkRuleInTheRun(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hit{title: "发票指南", url: "https://tax.example.cn/invoice", content: "详见 https://tax.example.cn/faq 的说明。"})
	final := "按指南办理[^1^]，见 [指南](https://tax.example.cn/invoice) 与 https://tax.example.cn/faq 。" +
		"另见 [官网](https://evil.example.com/login) 和 https://evil.example.net/x ，你给的 https://user.example.org/doc 也对。" +
		"`https://code.example.io/literal` 是代码。"
	llm := newFakeLLM(t,
		toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
		textStream("按指南办理[^1^]，见 [指南](https://tax.exa", "mple.cn/invoice) 与 https://tax.example.cn/faq 。另见 [官网](https://ev",
			"il.example.com/login) 和 https://evil.exa", "mple.net/x ，你给的 https://user.example.org/doc 也对。`https://code.example.io/literal` 是代码。"),
	)
	rec := &recorder{}
	a := newAgent(t, Config{Store: st, Model: llm.model(t), Tools: []Tool{search}})
	unsub := a.Subscribe(rec.sink)
	defer unsub()

	out := run(t, a, sid, "发票怎么开？参考 https://user.example.org/doc", nil)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	require.Equal(t, final, out.Content, "the answer keeps its raw text")
	assert.Equal(t, 2, out.LinksHidden)

	evs := rec.all()
	streamed := strings.Join(finalRoundDeltas(evs), "")
	assert.NotContains(t, streamed, "evil.example")
	assert.Contains(t, streamed, "https://tax.example.cn/faq")
	assert.Contains(t, streamed, "https://user.example.org/doc")
	assert.Contains(t, streamed, "https://code.example.io/literal", "code is literal")
	assert.Contains(t, streamed, citations.HiddenLinkNotice)
	want, _, _ := citations.FilterLinks(citations.Strip(final), func(u string) bool { return !strings.Contains(u, "evil.") })
	assert.Equal(t, want, streamed, "the stream equals the whole-text rule")

	var finished Event
	for _, e := range evs {
		if e.Type == EventRunFinished {
			finished = e
		}
	}
	assert.Equal(t, 2, finished.LinksHidden)

	msg, err := st.GetMessage(context.Background(), out.FinalMessageID)
	require.NoError(t, err)
	var meta struct {
		Citations []citations.Citation `json:"citations"`
		Links     struct {
			Hidden  int      `json:"hidden"`
			Allowed []string `json:"allowed"`
		} `json:"links"`
	}
	require.NoError(t, json.Unmarshal(msg.Metadata, &meta), "%s", msg.Metadata)
	require.Len(t, meta.Citations, 1, "citations and links commit together")
	assert.Equal(t, 2, meta.Links.Hidden)
	assert.ElementsMatch(t, []string{"https://tax.example.cn/invoice", "https://tax.example.cn/faq", "https://user.example.org/doc"}, meta.Links.Allowed)
}

// TestAnswerWithoutLinksHasNoLinksKey keeps the record small: no URL, no metadata.links.
func TestAnswerWithoutLinksHasNoLinksKey(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	llm := newFakeLLM(t, textStream("没有链接的回答。"))
	a := newAgent(t, Config{Store: st, Model: llm.model(t)})
	out := run(t, a, sid, "你好", nil)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)
	msg, err := st.GetMessage(context.Background(), out.FinalMessageID)
	require.NoError(t, err)
	assert.Empty(t, msg.Metadata)
	assert.Zero(t, out.LinksHidden)
}

// TestEventsCarryTheRunsLinks: run.started carries the URLs of the turn's text and every
// tool.finished those of the tool results so far (escaped JSON included, other tools too), as
// immutable snapshots; the history window's user URLs and the registry's are the run's own rule,
// not in them. A round that adds no URL hands out the same snapshot again.
func TestEventsCarryTheRunsLinks(t *testing.T) {
	st := openStore(t)
	sid := newSession(t, st)
	search, _ := searchTool(hit{title: "指南", url: "https://tax.example.cn/invoice?a=1&b=2", content: "见 https://tax.example.cn/faq"})
	other := funcTool{name: "lookup", fn: func(context.Context, string) (string, error) {
		return `{"items":[{"link":"https:\/\/other.example\/x"}]}`, nil
	}}
	llm := newFakeLLM(t,
		textStream("第一轮。"),
		toolStream("", call{id: "c1", name: "web_search", args: []string{`{"query":"发票"}`}}),
		toolStream("", call{id: "c2", name: "lookup", args: []string{`{}`}}),
		toolStream("", call{id: "c3", name: "lookup", args: []string{`{}`}}),
		textStream("好的。"),
	)
	rec := &recorder{}
	a := newAgent(t, Config{Store: st, Model: llm.model(t), Tools: []Tool{search, other}})
	unsub := a.Subscribe(rec.sink)
	defer unsub()
	require.Equal(t, store.PhaseCompleted, run(t, a, sid, "旧问题 https://old.example/q", nil).Phase)
	out := run(t, a, sid, "发票怎么开？见 https://user.example.org/doc", nil)
	require.Equal(t, store.PhaseCompleted, out.Phase, out.Error)

	var snaps []*citations.LinkSnapshot
	for _, e := range rec.all() {
		if e.RunID != "" && (e.Type == EventRunStarted || e.Type == EventToolFinished) && e.Links != nil {
			snaps = append(snaps, e.Links)
		}
	}
	require.Len(t, snaps, 2+3, "run.started of both runs, three tool.finished")
	started, afterSearch, afterLookup, again := snaps[1], snaps[2], snaps[3], snaps[4]
	assert.True(t, started.Allows("https://user.example.org/doc"))
	assert.False(t, started.Allows("https://old.example/q"), "the history window's URLs are not the pump's")
	assert.Equal(t, 1, started.Len(), "a snapshot does not grow with the run")
	assert.True(t, afterSearch.Allows("https://tax.example.cn/invoice?a=1&b=2"), "escaped in the JSON")
	assert.True(t, afterSearch.Allows("https://tax.example.cn/faq"))
	assert.False(t, afterSearch.Allows("https://other.example/x"))
	assert.True(t, afterLookup.Allows("https://other.example/x"), "another tool's result counts")
	assert.Same(t, afterLookup, again, "nothing new, no copy")
	// The raw text also shows "https://tax.example.cn/invoice?a=1" (cut at the encoder's \u0026).
	assert.True(t, again.Allows("https://tax.example.cn/invoice?a=1"))
	assert.Equal(t, 5, again.Len())
}
