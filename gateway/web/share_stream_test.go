package web

import (
	"bytes"
	"html/template"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShareStreamMatchesRenderShare: the streamed share page is byte for byte the page rendered at
// once, with messages and without.
func TestShareStreamMatchesRenderShare(t *testing.T) {
	at := time.Date(2026, 11, 30, 3, 4, 5, 0, time.UTC)
	msgs := []MessageView{
		{ID: 1, Role: "USER", HTML: template.HTML(`<p class="plain">问题 &lt;b&gt;</p>`), CreatedAt: at},
		{ID: 2, Role: "ASSISTANT", HTML: template.HTML(`<p>答<sup class="cite-ref"><a href="#m2-src-1">1</a></sup></p>`), CreatedAt: at},
	}
	for _, lang := range []string{"zh", "en"} {
		for _, list := range [][]MessageView{msgs, nil} {
			d := ShareData{Title: `发票 <script>`, Lang: lang, ExportURL: "/s/tok/export.jsonl", CreatedAt: at, Messages: list}
			whole := renderTo(t, func(b *bytes.Buffer) error { return RenderShare(b, d) })
			var b bytes.Buffer
			st, err := StartShare(&b, d)
			require.NoError(t, err)
			for _, m := range list {
				require.NoError(t, st.Message(m))
			}
			assert.Equal(t, len(list), st.Count())
			require.NoError(t, st.End())
			assert.Equal(t, whole, b.String(), "lang %s, %d messages", lang, len(list))
		}
	}
}
