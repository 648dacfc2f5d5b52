package dingtalk

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitMarkdown(t *testing.T) {
	tests := []struct {
		name           string
		text           string
		maxRunes, maxB int
		want           []string
	}{
		{"fits", "short", 10, 100, []string{"short"}},
		{"empty", "", 10, 100, []string{""}},
		{"paragraph break preferred", "aaaa\n\nbbbb\ncc", 10, 100, []string{"aaaa\n\n", "bbbb\ncc"}},
		{"line break", "aaaaaa\nbbbbbbb", 10, 100, []string{"aaaaaa\n", "bbbbbbb"}},
		{"hard cut", "abcdefghijkl", 5, 100, []string{"abcde", "fghij", "kl"}},
		{"runes not bytes", "一二三四五六", 4, 100, []string{"一二三四", "五六"}},
		{"byte limit on a rune boundary", "一二三四五六", 100, 7, []string{"一二", "三四", "五六"}},
		{"break in first half ignored", "a\nbcdefghijk", 6, 100, []string{"a\nbcde", "fghijk"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, splitMarkdown(tt.text, tt.maxRunes, tt.maxB))
		})
	}
}

func FuzzSplitMarkdown(f *testing.F) {
	f.Add("hello\n\nworld, 你好世界。再见", 7, 12)
	f.Add(strings.Repeat("ab\n", 50), 10, 10)
	f.Add("\xff\xfe broken utf8", 3, 3)
	f.Fuzz(func(t *testing.T, text string, maxRunes, maxBytes int) {
		maxRunes = 1 + abs(maxRunes)%200
		maxBytes = 1 + abs(maxBytes)%600
		parts := splitMarkdown(text, maxRunes, maxBytes)
		require.Equal(t, text, strings.Join(parts, ""), "parts concatenate to the text")
		for _, p := range parts {
			if text == "" {
				continue
			}
			require.NotEmpty(t, p)
			if utf8.RuneCountInString(p) > 1 {
				require.LessOrEqual(t, utf8.RuneCountInString(p), maxRunes)
				require.LessOrEqual(t, len(p), max(maxBytes, utf8.UTFMax))
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func TestTitleOf(t *testing.T) {
	assert.Equal(t, "结论", titleOf("\n## **结论**\n正文"))
	assert.Equal(t, "回答", titleOf("  \n\n"))
	assert.Equal(t, strings.Repeat("长", 20)+"…", titleOf(strings.Repeat("长", 30)))
}

func TestMsgParamKeepsHTMLAndIsCompact(t *testing.T) {
	assert.Equal(t, `{"text":"a<b>&c","title":"t"}`, msgParam("t", "a<b>&c"))
}

func TestCardCutLeavesRoomForNote(t *testing.T) {
	text := strings.Repeat("x", cardMaxRunes+10)
	n := cardCut(text)
	require.Less(t, n, len(text))
	assert.LessOrEqual(t, utf8.RuneCountInString(text[:n]+noteCardContinued), cardMaxRunes)
	assert.Equal(t, 5, cardCut("short"))
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	c, err := New(Config{ClientID: "a", ClientSecret: "b", ReconnectBackoff: 100e6, MaxReconnectBackoff: 1e9})
	require.NoError(t, err)
	for range 50 {
		assert.LessOrEqual(t, c.backoff(0), time.Duration(25e6+1))
		d1 := c.backoff(1)
		assert.True(t, d1 >= 50e6 && d1 <= 100e6, d1)
		d3 := c.backoff(3)
		assert.True(t, d3 >= 200e6 && d3 <= 400e6, d3)
		d10 := c.backoff(10)
		assert.True(t, d10 >= 500e6 && d10 <= 1e9, d10)
	}
}
