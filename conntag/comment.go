package conntag

import (
	"net/url"
	"sort"
	"strings"
)

// Format is how the tag is written into statement text.
type Format int

const (
	// FormatConnTag writes "/* conn_tag:NAME */ " before the statement,
	// after any leading comments the application wrote itself (ProxySQL
	// reads key=value annotations from the first comment only, so the
	// application's must stay first). Static attributes follow NAME as
	// space-separated key:value pairs. The default.
	FormatConnTag Format = iota
	// FormatSQLCommenter appends "/*conn_tag='NAME',key='value'*/" in the
	// sqlcommenter form (keys sorted, values URL-encoded), for tools that
	// read that format.
	FormatSQLCommenter
	// FormatNone leaves statement text untouched: measurement only.
	FormatNone
)

// commenter renders the comment for a tag. The static part is built once;
// per tag the full comment is cached by the caller (tagState), so a
// statement pays one string concatenation.
type commenter struct {
	format Format
	static []keyValue // sorted by key, sanitised
}

type keyValue struct{ key, value string }

func newCommenter(format Format, static map[string]string) commenter {
	c := commenter{format: format}
	for k, v := range static {
		c.static = append(c.static, keyValue{SanitizeTag(k), SanitizeTag(v)})
	}
	sort.Slice(c.static, func(i, j int) bool { return c.static[i].key < c.static[j].key })
	return c
}

// comment returns the text inserted for tag (already sanitised), or "".
func (c commenter) comment(tag string) string {
	var b strings.Builder
	switch c.format {
	case FormatConnTag:
		b.WriteString("/* conn_tag:")
		b.WriteString(tag)
		for _, kv := range c.static {
			b.WriteByte(' ')
			b.WriteString(kv.key)
			b.WriteByte(':')
			b.WriteString(kv.value)
		}
		b.WriteString(" */ ")
	case FormatSQLCommenter:
		pairs := append([]keyValue{{"conn_tag", tag}}, c.static...)
		sort.Slice(pairs, func(i, j int) bool { return pairs[i].key < pairs[j].key })
		b.WriteString(" /*")
		for i, kv := range pairs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(url.QueryEscape(kv.key))
			b.WriteString("='")
			b.WriteString(url.QueryEscape(kv.value))
			b.WriteByte('\'')
		}
		b.WriteString("*/")
	}
	return b.String()
}

// inject returns query with comment inserted where format wants it.
func (c commenter) inject(query, comment string) string {
	if c.format != FormatConnTag {
		return c.append(query, comment)
	}
	at, tagged := insertPoint(query)
	return insertAt(query, comment, at, tagged)
}

// injectOp is inject that also returns the statement's operation, so that
// the statement is scanned once. Only the measuring path needs the
// operation; inject does not pay for it.
func (c commenter) injectOp(query, comment string) (string, op) {
	if c.format != FormatConnTag {
		return c.append(query, comment), operationOf(query)
	}
	at, tagged := insertPoint(query)
	return insertAt(query, comment, at, tagged), operationAt(query, at)
}

// insertAt puts comment at offset at, unless the statement is tagged
// already (one concatenation: one allocation).
func insertAt(query, comment string, at int, tagged bool) string {
	switch {
	case tagged:
		return query
	case at == 0:
		return comment + query
	}
	return query[:at] + comment + query[at:]
}

// append writes the sqlcommenter form, or leaves the query alone.
func (c commenter) append(query, comment string) string {
	switch c.format {
	case FormatSQLCommenter:
		// The sqlcommenter specification: a statement that already has a
		// comment MUST NOT be changed. A trailing -- or # comment would also
		// swallow an appended one. (A literal containing these is left
		// alone too: the safe side.)
		if strings.Contains(query, "/*") || strings.Contains(query, "--") || strings.IndexByte(query, '#') >= 0 {
			return query
		}
		end := len(query)
		for end > 0 && isSpace(query[end-1]) {
			end--
		}
		if end > 0 && query[end-1] == ';' {
			end--
			return query[:end] + comment + query[end:]
		}
		return query[:end] + comment + query[end:]
	}
	return query
}

// InjectTag returns query as conntag sends it for tag in the default format.
// It is the pure function behind every statement; exported for tools and
// tests that want to see the exact text.
func InjectTag(query, tag string) string {
	c := commenter{format: FormatConnTag}
	return c.inject(query, c.comment(SanitizeTag(tag)))
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// insertPoint returns the offset after the leading whitespace and
// non-executable comments of query, where the tag comment goes, and whether
// one of those comments already is a conn_tag comment (then nothing is
// added: a caller who tagged by hand keeps their tag). Executable comments
// (/*!…*/, /*M!…*/) and optimizer hints (/*+…*/) are statement text: the tag
// goes before them. An unterminated comment puts the tag at the start, so it
// can never end up inside it.
func insertPoint(q string) (at int, tagged bool) {
	i := 0
	for {
		for i < len(q) && isSpace(q[i]) {
			i++
		}
		if i >= len(q) {
			return at, tagged
		}
		switch {
		case strings.HasPrefix(q[i:], "/*"):
			if len(q) > i+2 && (q[i+2] == '!' || q[i+2] == '+') ||
				strings.HasPrefix(q[i+2:], "M!") {
				return i, tagged
			}
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return 0, tagged
			}
			if strings.HasPrefix(q[i+2:], " conn_tag:") || strings.HasPrefix(q[i+2:], "conn_tag:") {
				tagged = true
			}
			i += 2 + end + 2
		case strings.HasPrefix(q[i:], "--") && len(q) > i+2 && isSpace(q[i+2]) || q[i] == '#':
			nl := strings.IndexByte(q[i:], '\n')
			if nl < 0 {
				// A comment to the end: the statement is only comments.
				return 0, tagged
			}
			i += nl + 1
		default:
			return i, tagged
		}
		at = i
	}
}
