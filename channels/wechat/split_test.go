package wechat

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitText(t *testing.T) {
	para := func(n int, s string) string { return strings.Repeat(s, n) }
	tests := []struct {
		name      string
		text      string
		wantParts int
		truncated bool
	}{
		{"short", "你好，世界", 1, false},
		{"exactly the limit", para(maxPartBytes, "a"), 1, false},
		{"one byte over", para(maxPartBytes+1, "a"), 2, false},
		{"CJK without breaks", para(1500, "汉"), 3, false}, // 4500 bytes
		{"lines", para(250, "第一行内容比较长一些。\n"), 5, false},
		{"emoji", para(1200, "😀"), 3, false}, // 4800 bytes
		{"too long is truncated", para(20000, "x"), maxParts, true},
		{"too long CJK is truncated", para(10000, "文字 "), maxParts, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := splitText(tt.text, maxPartBytes, maxParts)
			require.Len(t, parts, tt.wantParts)
			var body strings.Builder
			for i, p := range parts {
				assert.LessOrEqual(t, len(p), maxPartBytes, "part %d", i+1)
				assert.True(t, utf8.ValidString(p), "part %d is not valid UTF-8", i+1)
				if len(parts) == 1 {
					assert.Equal(t, tt.text, p)
					continue
				}
				label := fmt.Sprintf("\n(%d/%d)", i+1, len(parts))
				if tt.truncated && i == len(parts)-1 {
					require.True(t, strings.HasSuffix(p, label+"\n"+truncatedNote), "last part %q", p[max(0, len(p)-60):])
					p = strings.TrimSuffix(p, "\n"+truncatedNote)
				}
				require.True(t, strings.HasSuffix(p, label), "part %d ends %q", i+1, p[max(0, len(p)-20):])
				body.WriteString(strings.TrimSuffix(p, label))
			}
			if len(parts) > 1 && !tt.truncated {
				// Nothing lost: the parts hold the whole text (cuts drop only the line break they fall on).
				assert.Equal(t, strings.ReplaceAll(tt.text, "\n", ""), strings.ReplaceAll(body.String(), "\n", ""))
			}
			if tt.truncated {
				assert.Less(t, body.Len(), len(tt.text))
				assert.True(t, strings.HasPrefix(tt.text, strings.ReplaceAll(body.String(), "\n", "")) ||
					strings.HasPrefix(strings.ReplaceAll(tt.text, "\n", ""), strings.ReplaceAll(body.String(), "\n", "")))
			}
		})
	}
}

func TestCutPointPrefersLineBreaks(t *testing.T) {
	text := strings.Repeat("a", 1500) + "\n" + strings.Repeat("b", 1000)
	assert.Equal(t, 1501, cutPoint(text, 1990))
	// A break in the first half of the window is too early; a space later wins.
	text = "a\n" + strings.Repeat("c", 1500) + " " + strings.Repeat("d", 1000)
	assert.Equal(t, 1503, cutPoint(text, 1990))
	// No break at all: the last rune boundary.
	text = strings.Repeat("汉", 1000)
	cut := cutPoint(text, 1990)
	assert.Equal(t, 1989, cut)
	assert.True(t, utf8.RuneStart(text[cut]))
}
