package textseg

import (
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
)

func TestTerms(t *testing.T) {
	tests := []struct {
		in      string
		has     []string
		hasNot  []string
		isEmpty bool
	}{
		{in: "电子发票抬头写错了怎么办？", has: []string{"电子", "发票", "抬头", "写错"}, hasNot: []string{"怎么", "么办", "错了", "？"}},
		{in: "How do I reset my VPN passwords?", has: []string{"reset", "vpn", "password"}, hasNot: []string{"how", "do", "my", "?"}},
		{in: "年假", has: []string{"年假"}},
		{in: "的了吗", isEmpty: true},
		{in: "？！。,.", isEmpty: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got := Terms(tc.in)
			if tc.isEmpty {
				assert.Empty(t, got)
				return
			}
			for _, w := range tc.has {
				assert.True(t, got[w], "missing %q in %v", w, got)
			}
			for _, w := range tc.hasNot {
				assert.False(t, got[w], "unexpected %q", w)
			}
		})
	}
}

func TestSentences(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"先申请红冲。再重新开具！可以吗？", []string{"先申请红冲。", "再重新开具！", "可以吗？"}},
		{"Reset it first. Version 1.2 works; see example.com", []string{"Reset it first.", " Version 1.2 works;", " see example.com"}},
		{"", nil},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, Sentences(tc.in), tc.in)
	}
}

func TestLexiconMatch(t *testing.T) {
	groups, rest := Domain.Match("密码忘了怎么办？")
	assert.Equal(t, [][]string{Domain[0], {"密码", "password"}}, groups)
	assert.NotContains(t, rest, "忘了")
	assert.NotContains(t, rest, "密码")

	// A Latin phrase matches at a word start and takes its whole word along.
	groups, rest = Domain.Match("My account is locked")
	assert.Contains(t, groups, []string{"锁了", "锁定", "被锁", "locked", "lock"})
	assert.Equal(t, Terms(rest), map[string]bool{"account": true})
	groups, _ = Domain.Match("the block list")
	assert.Empty(t, groups)

	assert.True(t, ContainsPhrase("connected but internal sites do not load", "not load"))
	assert.False(t, ContainsPhrase("reconnect", "connect"))
}

func TestReadsAsChinese(t *testing.T) {
	assert.True(t, ReadsAsChinese("打开密码自助服务门户 https://password.example.com（公司内网和外网均可访问）。"))
	assert.False(t, ReadsAsChinese("This is the English version of the Chinese guide 域账号密码重置."))
	assert.False(t, ReadsAsChinese("Use the VPN."))
}

// TestHasHanBelow2E80: the fast path of HasHan relies on no Han character lying below U+2E80.
func TestHasHanBelow2E80(t *testing.T) {
	for r := rune(0); r < 0x2E80; r++ {
		if unicode.Is(unicode.Han, r) {
			t.Fatalf("U+%04X is Han", r)
		}
	}
}
