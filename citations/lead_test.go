package citations

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestLead(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", "", ""},
		{"heading and text", "## 年假天数\n\n员工累计工作已满1年不满10年的，年休假5天。[^2^]", "年假天数\n员工累计工作已满1年不满10年的，年休假5天。"},
		{"table", "| 工龄 | 天数 |\n| --- | :---: |\n| 1-10 年 | 5 天 |\n| 10-20 年 | 10 天 |", "工龄 · 天数\n1-10 年 · 5 天\n10-20 年 · 10 天"},
		{"three lines", "a\nb\nc\nd", "a\nb\nc…"},
		{"bullets and quotes", "> - first\n* second\n+ third", "first\nsecond\nthird"},
		{"fence skipped", "```go\nx := 1\n```", "x := 1"},
		{"hash without space is text", "#hashtag and C#", "#hashtag and C#"},
		{"whitespace", "  a \t  b  ", "a b"},
		{"long", strings.Repeat("长", 300), strings.Repeat("长", MaxLeadRunes-1) + "…"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, Lead(tc.in), tc.name)
	}
}

func FuzzLead(f *testing.F) {
	for _, s := range []string{"", "## 年假\n| a | b |\n|---|---|\n| 1 | 2 |", strings.Repeat("x ", 150) + "\n" + strings.Repeat("长", 120), "a\nb\nc\nd\ne", "\xff\xfe# x", "[^1^] [^2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Lead(s)
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8: %q", got)
		}
		if n := utf8.RuneCountInString(got); n > MaxLeadRunes {
			t.Fatalf("%d runes > %d: %q", n, MaxLeadRunes, got)
		}
		if strings.Count(got, "\n") >= MaxLeadLines {
			t.Fatalf("more than %d lines: %q", MaxLeadLines, got)
		}
		if again := Lead(got); again != got {
			t.Fatalf("not idempotent:\n%q\n%q", got, again)
		}
		if len(Markers(got)) > 0 {
			t.Fatalf("a marker survived: %q", got)
		}
	})
}
