package citations

import (
	"strings"
	"testing"
)

// TestPlain8: the word-at-a-time check agrees with a byte loop for every byte value at every
// position, next to plain bytes and next to bytes at the borders (0x1f, 0x20, 0x5b, 0x5d, 0x80, 0xff),
// where the borrow of one byte's subtraction could leak into the next.
func TestPlain8(t *testing.T) {
	slow := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] == '\\' {
				return false
			}
		}
		return true
	}
	for _, fill := range []byte{'a', 0x1f, 0x20, 0x5b, 0x5d, 0x80, 0xff, 0x00} {
		for pos := 0; pos < 8; pos++ {
			for v := 0; v < 256; v++ {
				b := []byte(strings.Repeat(string([]byte{fill}), 8))
				b[pos] = byte(v)
				s := string(b)
				if got, want := plain8(s), slow(s); got != want {
					t.Fatalf("plain8(% x) = %v, want %v", b, got, want)
				}
			}
		}
	}
}
