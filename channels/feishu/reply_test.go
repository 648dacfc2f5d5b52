package feishu_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels"
	"github.com/citegate/citegate/channels/feishu"
	"github.com/citegate/citegate/internal/fakes/feishu"
	"github.com/citegate/citegate/internal/testkit"
)

// startedChannel is a webhook-mode channel after Start (no socket needed to test replies).
func startedChannel(t *testing.T, fake *feishufake.Server, mutate func(*feishu.Config)) (*feishu.Channel, *testkit.SyncBuffer) {
	t.Helper()
	ch, logs := newChannel(t, fake, func(c *feishu.Config) {
		c.Mode = feishu.ModeWebhook
		c.VerificationToken = "vtoken"
		if mutate != nil {
			mutate(c)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, ch.Start(ctx, newRecorder()))
	return ch, logs
}

func msg(id string) channels.Message {
	return channels.Message{Channel: "feishu", ID: id, ConversationID: "oc_1", Ref: feishu.Ref{MessageID: id, ChatID: "oc_1"}}
}

// checkCards asserts the CardKit rules on every card the fake saw.
func checkCards(t *testing.T, fake *feishufake.Server) {
	t.Helper()
	t.Logf("cards: %d, max operations per card per second: %d", len(fake.Cards()), fake.MaxOpsPerSecond())
	assert.Zero(t, fake.SequenceViolations(), "sequence must increase strictly over all operations on a card")
	assert.LessOrEqual(t, fake.MaxOpsPerSecond(), 10, "at most 10 operations per second per card")
	assert.Empty(t, fake.MarkerViolations(), "no marker or partial marker may reach the platform")
	for _, c := range fake.Cards() {
		last := 0
		for _, op := range c.Ops {
			if op.Op == feishufake.OpCardCreate || op.Code != 0 {
				continue
			}
			assert.Greater(t, op.Sequence, last)
			last = op.Sequence
		}
	}
}

func TestCardStreaming(t *testing.T) {
	fake := newFake(t)
	ch, _ := startedChannel(t, fake, nil)
	ctx := ctxT(t)
	r, err := ch.Reply(ctx, msg("om_s1"))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))

	// Updates come faster than CardKit allows; the reply paces them itself.
	text := ""
	for i := 0; i < 14; i++ {
		text += "第" + string(rune('A'+i)) + "段 "
		require.NoError(t, r.Update(ctx, text))
	}
	require.NoError(t, r.Update(ctx, text), "same text again is a no-op")
	require.NoError(t, r.Finish(ctx, text+"完。"))

	cards := fake.Cards()
	require.Len(t, cards, 1)
	c := cards[0]
	assert.False(t, c.Streaming, "Finish closes streaming")
	final := c.Elements["answer"]
	assert.True(t, strings.HasSuffix(final, "完。"))
	assert.NotContains(t, final, "[^")
	assert.Contains(t, c.Summary, "第A段")
	assert.Contains(t, c.JSON, `"streaming_mode":true`)
	assert.Contains(t, c.JSON, `"schema":"2.0"`)

	replies := fake.Replies()
	require.Len(t, replies, 1)
	assert.Equal(t, "om_s1", replies[0].ReplyTo)
	assert.Equal(t, c.ID, replies[0].CardID())

	// Each streamed content extends the previous one (typewriter), after the placeholder.
	var contents []string
	for _, op := range c.Ops {
		if op.Op == feishufake.OpCardContent {
			contents = append(contents, op.Content)
		}
	}
	require.GreaterOrEqual(t, len(contents), 10)
	for i := 1; i < len(contents); i++ {
		assert.True(t, strings.HasPrefix(contents[i], contents[i-1]), "update %d does not extend the previous", i)
	}
	assert.Equal(t, feishufake.OpCardSettings, c.Ops[len(c.Ops)-1].Op, "settings is the last operation")
	checkCards(t, fake)
}

func TestCardFallbacks(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*feishu.Config)
		inject    func(*feishufake.Server)
		wantCards int
	}{
		{"cardkit disabled", func(c *feishu.Config) { c.DisableCardKit = true }, nil, 0},
		{"card create fails", nil, func(f *feishufake.Server) { f.InjectError(feishufake.OpCardCreate, 300100, 1) }, 0},
		{"card reply fails", nil, func(f *feishufake.Server) { f.InjectError(feishufake.OpReply, 230002, 1) }, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFake(t)
			ch, logs := startedChannel(t, fake, tc.mutate)
			if tc.inject != nil {
				tc.inject(fake)
			}
			ctx := ctxT(t)
			r, err := ch.Reply(ctx, msg("om_f"))
			require.NoError(t, err)
			require.NoError(t, r.Start(ctx))
			require.NoError(t, r.Update(ctx, "部分"))
			require.NoError(t, r.Finish(ctx, "部分回答，完整。"))
			assert.Len(t, fake.Cards(), tc.wantCards)
			var texts []string
			for _, rep := range fake.Replies() {
				assert.Empty(t, rep.CardID(), "no card may be sent")
				texts = append(texts, rep.Text())
			}
			assert.Equal(t, []string{"部分回答，完整。"}, texts)
			if tc.inject != nil {
				assert.Contains(t, logs.String(), "code=")
			}
			checkCards(t, fake)
		})
	}
}

func TestCardErrorMidStream(t *testing.T) {
	fake := newFake(t)
	ch, logs := startedChannel(t, fake, nil)
	ctx := ctxT(t)
	r, err := ch.Reply(ctx, msg("om_e"))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Update(ctx, "第一段"))
	fake.InjectError(feishufake.OpCardContent, 300500, 1)
	require.Error(t, r.Update(ctx, "第一段，第二段"))
	require.NoError(t, r.Update(ctx, "第一段，第二段，第三段"), "after the failure the card is left alone")
	require.NoError(t, r.Finish(ctx, "第一段，第二段，第三段。"))

	replies := fake.Replies()
	require.Len(t, replies, 2)
	assert.NotEmpty(t, replies[0].CardID())
	assert.Contains(t, replies[1].Text(), "卡片更新失败")
	assert.True(t, strings.HasSuffix(replies[1].Text(), "第一段，第二段，第三段。"))
	assert.Contains(t, logs.String(), "code=300500")
	checkCards(t, fake)
}

func TestFail(t *testing.T) {
	fake := newFake(t)
	ch, _ := startedChannel(t, fake, nil)
	ctx := ctxT(t)

	r, err := ch.Reply(ctx, msg("om_fail"))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Update(ctx, "已经写了一半"))
	require.NoError(t, r.Fail(ctx, "抱歉，这次回答失败了：model timeout"))
	require.NoError(t, r.Finish(ctx, "ignored"), "after Fail the reply is over")
	c := fake.Cards()[0]
	assert.False(t, c.Streaming)
	assert.True(t, strings.HasPrefix(c.Elements["answer"], "已经写了一半"))
	assert.Contains(t, c.Elements["answer"], "⚠️ 抱歉，这次回答失败了：model timeout")

	// Without streamed text the failure replaces the placeholder.
	r2, err := ch.Reply(ctx, msg("om_fail2"))
	require.NoError(t, err)
	require.NoError(t, r2.Start(ctx))
	require.NoError(t, r2.Fail(ctx, "失败"))
	assert.Equal(t, "⚠️ 失败", fake.Cards()[1].Elements["answer"])
	checkCards(t, fake)
}

func TestTokenRefreshAndRateLimit(t *testing.T) {
	fake := newFake(t)
	ch, logs := startedChannel(t, fake, nil)
	ctx := ctxT(t)
	r, err := ch.Reply(ctx, msg("om_t"))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))

	fake.InvalidateTokens() // the cached token is now rejected with 99991663
	require.NoError(t, r.Update(ctx, "一"))
	fake.InjectError(feishufake.OpCardContent, feishufake.CodeRateLimited, 2)
	require.NoError(t, r.Update(ctx, "一二"))
	fake.InjectError(feishufake.OpCardContent, feishufake.CodeStreamingClosed, 1)
	require.NoError(t, r.Update(ctx, "一二三"), "streaming closed by timeout is re-opened")
	require.NoError(t, r.Finish(ctx, "一二三四"))

	c := fake.Cards()[0]
	assert.Equal(t, "一二三四", c.Elements["answer"])
	assert.False(t, c.Streaming)
	assert.Len(t, fake.RequestsFor(feishufake.OpToken), 2, "the probe at Start and one refresh")
	assert.Contains(t, logs.String(), "code=99991663")
	assert.Contains(t, logs.String(), "code=230020")
	checkCards(t, fake)
}

func TestLongAnswers(t *testing.T) {
	fake := newFake(t)
	ch, _ := startedChannel(t, fake, nil)
	ctx := ctxT(t)

	var b strings.Builder
	for i := 0; b.Len() < 400*1024; i++ {
		b.WriteString("第")
		b.WriteString(strings.Repeat("长", i%50))
		b.WriteString(`段 "quoted" <b>&</b>` + "\n")
	}
	long := b.String()

	r, err := ch.Reply(ctx, msg("om_long"))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Update(ctx, long[:cutRunes(long, 20000)]))
	require.NoError(t, r.Update(ctx, long[:cutRunes(long, 60000)]))
	require.NoError(t, r.Finish(ctx, long))

	c := fake.Cards()[0]
	shown := c.Elements["answer"]
	assert.Contains(t, shown, "truncated", "a cut card says so")
	var parts []string
	for _, rep := range fake.Replies()[1:] {
		parts = append(parts, rep.Text())
	}
	require.GreaterOrEqual(t, len(parts), 2, "400 KB does not fit one text message")
	// Nothing is lost: the card's text (without its note) and the parts (without theirs) rebuild it.
	rebuilt := shown[:strings.Index(shown, "\n\n……")]
	for i, p := range parts {
		nl := strings.IndexByte(p, '\n')
		require.Positive(t, nl)
		assert.Contains(t, p[:nl], "/"+itoa(len(parts)), "part %d carries its note", i)
		rebuilt += p[nl+1:]
	}
	assert.Equal(t, long, rebuilt)
	for _, rq := range fake.RequestsFor(feishufake.OpReply) {
		assert.LessOrEqual(t, len(rq.Body), feishufake.MaxTextBody)
	}
	checkCards(t, fake)
}

func cutRunes(s string, n int) int {
	i := 0
	for k := 0; k < n && i < len(s); k++ {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestSendRepliesAsGiven(t *testing.T) {
	fake := newFake(t)
	ch, _ := startedChannel(t, fake, nil)
	ctx := ctxT(t)
	require.NoError(t, ch.Send(ctx, msg("om_cmd"), "已开始新的会话。"))
	require.NoError(t, ch.Send(ctx, channels.Message{ID: "om_noref", ConversationID: "oc_9"}, "ok"))
	require.Error(t, ch.Send(ctx, channels.Message{}, "nowhere"))
	replies := fake.Replies()
	require.Len(t, replies, 2)
	assert.Equal(t, "已开始新的会话。", replies[0].Text())
	assert.Equal(t, "om_noref", replies[1].ReplyTo)
	assert.Empty(t, fake.MarkerViolations())
}
