package citations

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExtractAndStrip(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		extract []int
		strip   string
	}{
		{"empty", "", nil, ""},
		{"no marker", "纯文本，没有标记。", nil, "纯文本，没有标记。"},
		{"single", "截止时间是 11 月 30 日。[^1^]", []int{1}, "截止时间是 11 月 30 日。"},
		{"consecutive", "A[^1^][^2^]B", []int{1, 2}, "AB"},
		{"out of order", "A[^2^] B[^1^]", []int{2, 1}, "A B"},
		{"out of range kept by extract", "X[^9^]", []int{9}, "X"},
		{"leading zero", "X[^01^]", []int{1}, "X"},
		{"zero", "X[^0^]", []int{0}, "X"},
		{"non digit", "X[^a^]", nil, "X[^a^]"},
		{"standard footnote", "X[^1] and [1]", nil, "X[^1] and [1]"},
		{"missing caret", "X[^1]^]", nil, "X[^1]^]"},
		{"max digits", "X[^123456789^]", []int{123456789}, "X"},
		{"too many digits", "X[^1234567890^]", nil, "X[^1234567890^]"},
		{"thirty digits", "X[^" + strings.Repeat("9", 30) + "^]", nil, "X[^" + strings.Repeat("9", 30) + "^]"},
		{"nested brackets", "[[^1^]]", []int{1}, "[]"},
		{"nested caret", "[^[^2^]^]", []int{2}, "[^^]"},
		{"removal joins neighbours", "[^0[^0^]^]", []int{0}, ""},
		{"deep nesting", "[^[^[^1^]1^]1^]", []int{1}, ""},
		{"unclosed at end", "X[^1^", nil, "X[^1^"},
		{"lone bracket", "[", nil, "["},
		{"in code", "`[^1^]` and\n```\n[^2^]\n```", []int{1, 2}, "`` and\n```\n\n```"},
		{"cjk around", "发票[^3^]红冲[^4^]。", []int{3, 4}, "发票红冲。"},
		{"space in number", "X[^1 ^]", nil, "X[^1 ^]"},
		{"negative", "X[^-1^]", nil, "X[^-1^]"},
		{"non-ascii digit", "X[^١^]", nil, "X[^١^]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.extract, Extract(tt.in))
			assert.Equal(t, tt.strip, Strip(tt.in))
			// Reusing the functions gives the same answer (no shared state between calls).
			assert.Equal(t, tt.extract, Extract(tt.in))
			assert.Empty(t, Markers(Strip(tt.in)), "stripped text must hold no complete marker")
		})
	}
}

func TestStripNoMarkerReturnsSameString(t *testing.T) {
	s := strings.Repeat("没有标记 [ ^ ] ", 100)
	assert.Equal(t, s, Strip(s))
}

func TestReplace(t *testing.T) {
	got := Replace("A[^2^]B[^7^]C", func(m Marker) string {
		if m.N == 2 {
			return "[1]"
		}
		return ""
	})
	assert.Equal(t, "A[1]BC", got)
}

func TestHugeAnswer(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		b.WriteString("这是一个很长的句子，用来测试大文本。")
		if i < 10000 {
			b.WriteString("[^")
			b.WriteString(strings.Repeat("1", 1+i%12))
			b.WriteString("^]")
		}
	}
	text := b.String()
	ns := Extract(text)
	require.NotEmpty(t, ns)
	out := Strip(text)
	assert.Empty(t, Markers(out))
	assert.True(t, utf8.ValidString(out))
}

// stripperChunks feeds text to a Stripper split at the given sizes (cycled) and returns the output.
func stripperChunks(text string, sizes []int) (string, []string) {
	var s Stripper
	var b strings.Builder
	var parts []string
	for i, k := 0, 0; i < len(text); k++ {
		n := sizes[k%len(sizes)]
		if n <= 0 {
			n = 1
		}
		end := min(i+n, len(text))
		out := s.Push(text[i:end])
		parts = append(parts, out)
		b.WriteString(out)
		i = end
	}
	tail := s.Flush()
	parts = append(parts, tail)
	b.WriteString(tail)
	return b.String(), parts
}

func TestStripperChunkings(t *testing.T) {
	texts := []string{
		"",
		"plain",
		"A[^1^]B[^12^]C[^99^]",
		"[^1^][^2^][^3^]",
		"[[^1^]][^",
		"x[^123456789^]y[^1234567890^]z",
		"发票抬头写错后，应先申请红冲[^1^]，再重新开具。[^2^]",
		"ends with [^4",
		"ends with [^4^",
		"[^a^] [^^] [^1] [1]",
	}
	for _, text := range texts {
		for _, sizes := range [][]int{{1}, {2}, {3}, {5}, {7}, {1, 2, 3}, {100}, {4, 1}} {
			got, parts := stripperChunks(text, sizes)
			require.Equal(t, Strip(text), got, "text %q sizes %v", text, sizes)
			for _, p := range parts {
				// A completed marker never crosses a chunk boundary in the output: each part alone is
				// marker-free and the concatenation is too.
				assert.Empty(t, Markers(p))
			}
			assert.Empty(t, Markers(got))
		}
	}
}

func TestStripperHoldsBackOnlyPossibleMarkers(t *testing.T) {
	var s Stripper
	assert.Equal(t, "abc", s.Push("abc["))
	assert.Equal(t, 1, s.Pending())
	assert.Equal(t, "[x", s.Push("x"), "a '[' that cannot start a marker is released at once")
	assert.Equal(t, 0, s.Pending())
	assert.Equal(t, "", s.Push("[^12"))
	assert.Equal(t, 4, s.Pending())
	assert.Equal(t, "", s.Push("^"))
	assert.Equal(t, "!", s.Push("]!"))
	assert.Equal(t, "", s.Flush())
	// Ten digits can never become a marker, so they are not held.
	assert.Equal(t, "[^1234567890", s.Push("[^1234567890"))
	assert.LessOrEqual(t, s.Pending(), maxMarkerLen-1)
}

func BenchmarkStripperPush(b *testing.B) {
	text := strings.Repeat("电子发票抬头写错后，应先申请红冲原发票[^1^]，再按正确抬头重新开具。[^2^] ", 50)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		var s Stripper
		for i := 0; i < len(text); i += 7 {
			s.Push(text[i:min(i+7, len(text))])
		}
		s.Flush()
	}
}

func BenchmarkStrip(b *testing.B) {
	text := strings.Repeat("电子发票抬头写错后，应先申请红冲原发票[^1^]，再按正确抬头重新开具。[^2^] ", 50)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Strip(text)
	}
}

// BenchmarkChunkCopyBaseline is the floor for BenchmarkStripperPush: the same chunks appended to a
// builder with no marker handling.
func BenchmarkChunkCopyBaseline(b *testing.B) {
	text := strings.Repeat("电子发票抬头写错后，应先申请红冲原发票[^1^]，再按正确抬头重新开具。[^2^] ", 50)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		var sb strings.Builder
		for i := 0; i < len(text); i += 7 {
			sb.WriteString(text[i:min(i+7, len(text))])
		}
		_ = sb.String()
	}
}
