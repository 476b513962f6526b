package locks

import (
	"regexp"
	"strings"
)

// maxStatementLen bounds a normalised statement; longer ones end in "…".
const maxStatementLen = 1024

var (
	// A parenthesised list of placeholders, as IN (?, ?, ?) or VALUES (?, ?).
	placeholderList = regexp.MustCompile(`\(\s*\?(?:\s*,\s*\?)*\s*\)`)
	// Repeated row lists: VALUES (...), (...), (...).
	repeatedLists = regexp.MustCompile(`\(\.\.\.\)(?:\s*,\s*\(\.\.\.\))+`)
)

// Normalize returns a statement without its literal values and comments:
// strings and numbers become ?, lists of them (...), whitespace one space.
// It keeps identifiers (also `quoted` ones) and keywords, so two statements
// that differ only in their values normalise to the same text. A statement
// the server cut short (an unterminated string) loses the rest of the
// string. The result is at most about 1 KiB.
func Normalize(q string) string {
	var b strings.Builder
	b.Grow(min(len(q), maxStatementLen+16))
	space := false
	emit := func(s string) {
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteString(s)
	}
	placeholder := func() {
		// Drop a literal introducer written just before the quote: X'..'
		// B'..' N'..' (no space allowed) and _charset '..'.
		s := b.String()
		start := len(s)
		for start > 0 && isIdentByte(s[start-1]) {
			start--
		}
		if tok := s[start:]; start == 0 || strings.IndexByte(" (,=", s[start-1]) >= 0 {
			single := len(tok) == 1 && strings.IndexByte("xXbBnN", tok[0]) >= 0 && !space
			if single || len(tok) > 1 && tok[0] == '_' {
				b.Reset()
				b.WriteString(s[:start])
				space = false
			}
		}
		emit("?")
	}
	for i := 0; i < len(q) && b.Len() <= maxStatementLen; {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			space = true
			i++
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				i = len(q)
			} else {
				i += 2 + end + 2
			}
			space = true
		case c == '#' || c == '-' && i+2 < len(q) && q[i+1] == '-' && (q[i+2] == ' ' || q[i+2] == '\t'):
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				i = len(q)
			} else {
				i += end
			}
			space = true
		case c == '\'' || c == '"':
			i = skipString(q, i)
			placeholder()
		case c == '`':
			end := strings.IndexByte(q[i+1:], '`')
			if end < 0 {
				emit(q[i:])
				i = len(q)
			} else {
				emit(q[i : i+1+end+1])
				i += 1 + end + 1
			}
		case isDigit(c) || c == '.' && i+1 < len(q) && isDigit(q[i+1]):
			if prev := lastByte(&b); !space && (isIdentByte(prev) || prev == '@') {
				// Part of a name such as t1 or @@x1.
				emit(string(c))
				i++
				continue
			}
			i = skipNumber(q, i)
			emit("?")
		default:
			j := i
			for j < len(q) && isIdentByte(q[j]) {
				j++
			}
			if j == i {
				j = i + 1
			}
			emit(q[i:j])
			i = j
		}
	}
	out := b.String()
	if strings.Contains(out, "?") {
		out = placeholderList.ReplaceAllString(out, "(...)")
		out = repeatedLists.ReplaceAllString(out, "(...)")
	}
	if len(out) > maxStatementLen {
		cut := maxStatementLen
		for cut > 0 && out[cut]&0xC0 == 0x80 {
			cut--
		}
		out = out[:cut] + "…"
	}
	return out
}

// skipString returns the index after the string literal starting at i,
// honouring doubled quotes and backslash escapes; len(q) when it is not
// terminated.
func skipString(q string, i int) int {
	quote := q[i]
	for j := i + 1; j < len(q); j++ {
		switch q[j] {
		case '\\':
			j++
		case quote:
			if j+1 < len(q) && q[j+1] == quote {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(q)
}

// skipNumber returns the index after the number starting at i: decimal,
// fraction, exponent, 0x… and 0b… forms.
func skipNumber(q string, i int) int {
	if q[i] == '0' && i+1 < len(q) && (q[i+1] == 'x' || q[i+1] == 'X' || q[i+1] == 'b' || q[i+1] == 'B') {
		j := i + 2
		for j < len(q) && isHex(q[j]) {
			j++
		}
		if j > i+2 {
			return j
		}
	}
	j := i
	for j < len(q) && (isDigit(q[j]) || q[j] == '.') {
		j++
	}
	if j < len(q) && (q[j] == 'e' || q[j] == 'E') {
		k := j + 1
		if k < len(q) && (q[k] == '+' || q[k] == '-') {
			k++
		}
		if k < len(q) && isDigit(q[k]) {
			for k < len(q) && isDigit(q[k]) {
				k++
			}
			j = k
		}
	}
	return j
}

func lastByte(b *strings.Builder) byte {
	s := b.String()
	if s == "" {
		return 0
	}
	return s[len(s)-1]
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isIdentByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c == '_' || c == '$' || c >= 0x80
}
