package feishu_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/citegate/citegate/channels/feishu"
	feishufake "github.com/citegate/citegate/internal/fakes/feishu"
	"github.com/citegate/citegate/internal/testkit"
)

// TestE2EWebhookSignedEventRunsOnce drives the whole stack through an encrypted, signed webhook: the
// genuine event runs once (its re-delivery and a replay of the captured request are deduplicated),
// and forged variants of it start nothing.
func TestE2EWebhookSignedEventRunsOnce(t *testing.T) {
	model := testkit.NewScriptedModel("签名的回答。", []int{2})
	stack := testkit.NewStack(t, testkit.StackOptions{Model: model})
	fake := newFake(t)
	ch, _ := newChannel(t, fake, func(c *feishu.Config) {
		c.Mode = feishu.ModeWebhook
		c.VerificationToken = "vtoken"
		c.EncryptKey = "ekey-e2e"
	})
	srv := httptest.NewServer(ch.Routes()[feishu.WebhookPath])
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, ch.Start(ctx, stack.Dispatcher.Handler(ch)))

	ev := feishufake.MessageEvent{MessageID: "om_signed", ChatID: "oc_signed", Text: "签名的问题", Token: "vtoken"}
	forged := []feishufake.WebhookOptions{
		{EncryptKey: "ekey-e2e", BadSignature: true},
		{EncryptKey: "ekey-e2e", Unsigned: true},
		{EncryptKey: "guessed"},
	}
	for _, opt := range forged {
		status, body, err := feishufake.PostWebhook(ctxT(t), srv.URL, ev.JSON(), opt)
		require.NoError(t, err)
		assert.Equal(t, feishu.RejectStatus, status)
		assert.Equal(t, feishu.RejectBody, string(body))
	}
	stack.Wait(t)
	assert.Zero(t, model.Calls(), "forgeries start no run")
	assert.Empty(t, fake.Replies())

	for range 3 {
		status, _, err := feishufake.PostWebhook(ctxT(t), srv.URL, ev.JSON(), feishufake.WebhookOptions{EncryptKey: "ekey-e2e"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
		stack.Wait(t)
	}
	assert.Equal(t, []string{"签名的问题"}, userTexts(t, stack.Store, "oc_signed"), "the genuine event ran exactly once")
	assert.Len(t, repliesTo(fake, "om_signed"), 1)
}
