package termtext

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// Line returns s with every character a terminal would interpret escaped
// visibly, newlines and tabs included: the result stays on one line.
func Line(s string) string { return escape(s, false) }

// Text is Line for text of several lines: newlines and tabs are kept, every
// other control character escaped.
func Text(s string) string { return escape(s, true) }

// Safe reports whether s holds nothing Line would escape.
func Safe(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return false
			}
		}
		if unsafe(r) {
			return false
		}
	}
	return true
}

func escape(s string, keepLines bool) string {
	if Safe(s) {
		return s // the common case: no copy
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			// Not UTF-8: a terminal would guess; show the byte.
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unsafe(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// unsafe reports whether a terminal would act on r rather than draw it:
// the C0 controls (ESC, which starts every escape sequence, among them),
// DEL, the C1 controls (CSI U+009B and OSC U+009D start sequences on
// their own on some terminals), the line and paragraph separators, and
// the bidirectional formatting characters that reorder what follows them.
func unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, // ALM, LRM, RLM
		r >= 0x202a && r <= 0x202e, // LRE, RLE, PDF, LRO, RLO
		r >= 0x2066 && r <= 0x2069, // LRI, RLI, FSI, PDI
		r == 0x2028, r == 0x2029:   // line and paragraph separators
		return true
	}
	return false
}

// Width is the number of terminal cells s takes: two for an East Asian
// wide character or an emoji, none for a combining mark or a zero-width
// joiner inside a cluster. Give it text that went through Line or Text:
// control characters count zero cells, however a terminal acts on them.
func Width(s string) int { return uniseg.StringWidth(s) }

// Truncate returns the longest prefix of s that fits in cells terminal
// cells, cut between grapheme clusters: a wide character that would
// straddle the limit is left out whole.
func Truncate(s string, cells int) string {
	if cells <= 0 {
		return ""
	}
	used, state, rest := 0, -1, s
	for len(rest) > 0 {
		var w int
		var cluster string
		cluster, rest, w, state = uniseg.FirstGraphemeClusterInString(rest, state)
		if used+w > cells {
			return s[:len(s)-len(rest)-len(cluster)]
		}
		used += w
	}
	return s
}

// PadRight fills s with spaces to cells terminal cells (s as it is when it
// is as wide or wider).
func PadRight(s string, cells int) string {
	return s + strings.Repeat(" ", max(cells-Width(s), 0))
}

// PadLeft puts spaces before s to make it cells terminal cells wide.
func PadLeft(s string, cells int) string {
	return strings.Repeat(" ", max(cells-Width(s), 0)) + s
}
