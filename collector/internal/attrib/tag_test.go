package attrib

import (
	"testing"
	"unicode/utf8"
)

// TestTruncateCutsOnARuneBoundary: a malformed sample cut short stays valid
// UTF-8 (it was cut by bytes, splitting a character).
func TestTruncateCutsOnARuneBoundary(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc..."},
		{"ab日本", 3, "ab..."}, // 日 is 3 bytes: byte 3 is inside it
		{"ab日本", 5, "ab日..."},
	} {
		got := Truncate(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
