package conntag

import (
	"bytes"
	"strings"
)

// The tag grammar, read back: what a statement's text says its tag is. It is
// the one parser of it; holdtime's collector and locks import it, so a tag
// conntag writes reads back the same everywhere. Longer names than MaxTagLen
// are cut rather than rejected, so that a tool writing longer tags still lands
// in one stable bucket.

// tagKeyLeading starts conntag's own comment form: /* conn_tag:NAME ... */.
const tagKeyLeading = "conn_tag:"

// tagKeyCommenter starts the sqlcommenter pair: conn_tag='NAME'.
const tagKeyCommenter = "conn_tag='"

// ValidTag reports whether tag is in the tag grammar: 1 to MaxTagLen bytes
// of [A-Za-z0-9_.:-], what SanitizeTag returns and ParseTag reads. Sources
// that receive a tag as a value (a span attribute, a label) check it here.
func ValidTag(tag string) bool {
	if tag == "" || len(tag) > MaxTagLen {
		return false
	}
	for i := 0; i < len(tag); i++ {
		if !tagAllowed(tag[i]) {
			return false
		}
	}
	return true
}

// A byte outside the grammar after a tag name means "not our comment"
// (tagAllowed in tag.go).

// ParseTag returns the tag a statement carries and whether it carries one.
// It is the convenience form of AppendTag; hot paths use AppendTag with a
// reused buffer.
func ParseTag(query string) (string, bool) {
	var buf [MaxTagLen]byte
	tag, ok := AppendTag(buf[:0], []byte(query))
	return string(tag), ok
}

// AppendTag appends to dst the tag that query carries and reports whether it
// carries one. Three forms are recognised, in this order:
//
//  1. conntag's leading form (older conntag versions wrote it; hand-tagged
//     statements still use it): the first /* conn_tag:NAME ... */ among the
//     comments that lead the statement.
//  2. conntag's trailing form, what conntag writes now: /* conn_tag:NAME ... */
//     among the comments that end the statement (before a final ';'). A tag in
//     front of the statement can defeat ProxySQL's checks of how a statement
//     begins (SET, user variables, …), one at its end cannot.
//  3. sqlcommenter's form: a comment at the end of the statement holding
//     comma-separated key='value' pairs, one of them conn_tag='NAME', with the
//     value URL-encoded. Decoded bytes outside the grammar become '_', as
//     conntag's sanitiser would have written them.
//
// In conntag's forms anything after NAME inside the comment (conntag may add
// space-separated key:value pairs) is ignored, and a NAME followed by a byte
// outside the tag grammar is not a tag: guessing a prefix would put hold time
// under a tag nobody wrote. A comment in the middle of a statement is never
// read: it may be part of a literal.
//
// It does not allocate when dst has room for MaxTagLen bytes.
func AppendTag(dst, query []byte) ([]byte, bool) {
	if out, ok := appendLeadingTag(dst, query); ok {
		return out, true
	}
	return appendTrailingTag(dst, query)
}

// appendLeadingTag scans the comments that lead query.
func appendLeadingTag(dst, q []byte) ([]byte, bool) {
	for {
		q = trimLeftSpace(q)
		if len(q) < 4 || q[0] != '/' || q[1] != '*' {
			return dst, false
		}
		end := bytes.Index(q[2:], []byte("*/"))
		if end < 0 {
			return dst, false
		}
		body := q[2 : 2+end]
		q = q[2+end+2:]
		if out, ok := appendConnTag(dst, body); ok {
			return out, true
		}
	}
}

// appendConnTag reads conntag's comment body " conn_tag:NAME k:v ".
func appendConnTag(dst, body []byte) ([]byte, bool) {
	body = trimLeftSpace(body)
	if !bytes.HasPrefix(body, []byte(tagKeyLeading)) {
		return dst, false
	}
	name := body[len(tagKeyLeading):]
	n := 0
	for n < len(name) && tagAllowed(name[n]) {
		n++
	}
	if n == 0 || n < len(name) && !isSpace(name[n]) {
		return dst, false
	}
	return append(dst, name[:min(n, MaxTagLen)]...), true
}

// appendTrailingTag walks the comments that end q, last first, and reads the
// first one in conntag's or sqlcommenter's form.
func appendTrailingTag(dst, q []byte) ([]byte, bool) {
	q = trimRightSpace(q)
	if len(q) > 0 && q[len(q)-1] == ';' {
		q = trimRightSpace(q[:len(q)-1])
	}
	for bytes.HasSuffix(q, []byte("*/")) {
		start := bytes.LastIndex(q[:len(q)-2], []byte("/*"))
		if start < 0 {
			return dst, false
		}
		body := q[start+2 : len(q)-2]
		if out, ok := appendConnTag(dst, body); ok {
			return out, true
		}
		if out, ok := appendCommenterTag(dst, body); ok {
			return out, true
		}
		q = trimRightSpace(q[:start])
	}
	return dst, false
}

// appendCommenterTag looks for conn_tag='...' in a comment body.
func appendCommenterTag(dst, body []byte) ([]byte, bool) {
	for len(body) > 0 {
		body = trimLeftSpace(body)
		if bytes.HasPrefix(body, []byte(tagKeyCommenter)) {
			val := body[len(tagKeyCommenter):]
			end := bytes.IndexByte(val, '\'')
			if end < 0 {
				return dst, false
			}
			return appendDecodedTag(dst, val[:end])
		}
		// Skip this pair: its value is quoted and URL-encoded, so it holds
		// no quote or comma of its own.
		i := bytes.IndexByte(body, '\'')
		if i < 0 {
			return dst, false
		}
		j := bytes.IndexByte(body[i+1:], '\'')
		if j < 0 {
			return dst, false
		}
		body = body[i+1+j+1:]
		body = trimLeftSpace(body)
		if len(body) == 0 || body[0] != ',' {
			return dst, false
		}
		body = body[1:]
	}
	return dst, false
}

// appendDecodedTag URL-decodes v onto dst, mapping bytes outside the grammar
// to '_' (one '_' per UTF-8 sequence, as conntag's sanitiser does) and
// cutting at MaxTagLen.
func appendDecodedTag(dst, v []byte) ([]byte, bool) {
	start := len(dst)
	inSeq := false
	for i := 0; i < len(v) && len(dst)-start < MaxTagLen; i++ {
		c := v[i]
		switch {
		case c == '%' && i+2 < len(v):
			h, ok1 := unhex(v[i+1])
			l, ok2 := unhex(v[i+2])
			if ok1 && ok2 {
				c = h<<4 | l
				i += 2
			}
		case c == '+':
			c = ' '
		}
		if c >= 0x80 {
			if c&0xC0 == 0x80 && inSeq {
				continue
			}
			inSeq = true
			dst = append(dst, '_')
			continue
		}
		inSeq = false
		if !tagAllowed(c) {
			c = '_'
		}
		dst = append(dst, c)
	}
	return dst, len(dst) > start
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

// WholeTagComment reports whether the conntag comment that carries tag in
// text is whole: "conn_tag:NAME" followed, up to the comment's closing "*/",
// by nothing but key:value words (conntag may add them). Text that carries
// the sqlcommenter form instead is left to its parser (true). Mixed-up
// comment bytes (ProxySQL's digest text) leave it unclosed or run SQL into
// it.
func WholeTagComment(text, tag string) bool {
	i := strings.Index(text, tagKeyLeading+tag)
	if i < 0 {
		return strings.Contains(text, tagKeyCommenter) // sqlcommenter form: URL-encoded, checked by its parser
	}
	rest := text[i+len(tagKeyLeading)+len(tag):]
	end := strings.Index(rest, "*/")
	if end < 0 {
		return false
	}
	body := rest[:end]
	if strings.Contains(body, "/*") {
		return false
	}
	for _, w := range strings.Fields(body) {
		if !strings.Contains(w, ":") {
			return false
		}
	}
	return true
}
