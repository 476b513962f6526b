package attrib

import (
	"unicode/utf8"

	"github.com/holdtime/holdtime/conntag"
)

// MaxTagLen is the longest tag, in bytes: conntag's limit.
const MaxTagLen = conntag.MaxTagLen

// ParseTag returns the tag a statement carries and whether it carries one:
// conntag.ParseTag, the one parser of the tag grammar, kept here for
// callers that pass collector.ParseTag (locks.Config.ParseTag).
func ParseTag(query string) (string, bool) { return conntag.ParseTag(query) }

// AppendTag is conntag.AppendTag: it appends the tag query carries to dst
// without allocating when dst has room for MaxTagLen bytes.
func AppendTag(dst, query []byte) ([]byte, bool) { return conntag.AppendTag(dst, query) }

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func trimLeftSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	return b
}

func trimRightSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Truncate cuts s to n bytes, marking the cut with "...".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// On a rune boundary: a sample cut inside a character would be
	// invalid UTF-8 wherever it is shown.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
