package web

import (
	"bytes"
	"html/template"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOperatorShareStreamMatchesRender: the streamed operator view of a share is byte for byte the
// view rendered at once, with messages and without, and keeps each answer's review note.
func TestOperatorShareStreamMatchesRender(t *testing.T) {
	at := time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC)
	msgs := []OperatorMessage{
		{MessageView: MessageView{ID: 1, Role: "USER", HTML: template.HTML(`<p class="plain">问题</p>`), CreatedAt: at}},
		{MessageView: MessageView{ID: 2, Role: "ASSISTANT", HTML: template.HTML(`<p>答</p>`), CreatedAt: at}, Kept: 1, Dropped: 2, Hidden: 3, Up: 1, HasRun: true},
	}
	for _, lang := range []string{"zh", "en"} {
		for _, list := range [][]OperatorMessage{msgs, nil} {
			d := OperatorShareView{Lang: lang, UserName: "olga", ID: "abc", Title: `发票 <script>`, Owner: "alice",
				RevokeURL: "/operator/shares/abc/revoke", CreatedAt: at, Watermark: 7, Messages: list}
			var whole bytes.Buffer
			require.NoError(t, RenderOperatorShare(&whole, d))
			var b bytes.Buffer
			st, err := StartOperatorShare(&b, d)
			require.NoError(t, err)
			for _, m := range list {
				require.NoError(t, st.Message(m))
			}
			require.NoError(t, st.End())
			assert.Equal(t, whole.String(), b.String(), "lang %s, %d messages", lang, len(list))
			assert.NotContains(t, b.String(), "<script>")
			if list == nil {
				assert.Contains(t, b.String(), `class="empty"`)
			} else {
				assert.Contains(t, b.String(), `id="msg-2"`)
				assert.Contains(t, b.String(), `op-flag`)
			}
		}
	}
}
