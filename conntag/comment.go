package conntag

import (
	"net/url"
	"sort"
	"strings"
)

// Format is how the tag is written into statement text.
type Format int

const (
	// FormatConnTag writes " /* conn_tag:NAME */" at the end of the
	// statement: after its last keyword or value, before a final ';' and
	// before any comments that end it (on a new line after a statement that
	// ends in a -- or # comment). Never in front: ProxySQL recognises
	// statements by how they begin (SET, user variables, …) and with
	// mysql-query_digests_keep_comment=true a leading comment hides that; a
	// leading ProxySQL annotation (/* hostgroup=2 */) stays first and
	// untouched. Static attributes follow NAME as space-separated key:value
	// pairs. The default.
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
		b.WriteString(" /* conn_tag:")
		b.WriteString(tag)
		for _, kv := range c.static {
			b.WriteByte(' ')
			b.WriteString(kv.key)
			b.WriteByte(':')
			b.WriteString(kv.value)
		}
		b.WriteString(" */")
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
	return insertTail(query, comment, tailPoint(query))
}

// injectOp is inject that also returns the statement's operation. Only the
// measuring path needs the operation; inject does not pay for it.
func (c commenter) injectOp(query, comment string) (string, op) {
	if c.format != FormatConnTag {
		return c.append(query, comment), operationOf(query)
	}
	return insertTail(query, comment, tailPoint(query)), operationOf(query)
}

// insertTail puts comment (" /* conn_tag:… */") where tailPoint says (one
// concatenation: one allocation). After a '-' the comment goes without its
// space: "-- " would start a line comment that swallows the tag.
func insertTail(query, comment string, t tail) string {
	switch {
	case t.skip:
		return query
	case t.newline:
		return query + "\n" + comment[1:]
	case t.at > 0 && query[t.at-1] == '-':
		comment = comment[1:]
	}
	switch {
	case t.at == len(query):
		return query + comment
	}
	return query[:t.at] + comment + query[t.at:]
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

// tail is where the tag comment goes in a statement.
type tail struct {
	at      int  // offset: the end, or before a final ';'
	newline bool // append on a new line: the statement ends in a line comment
	skip    bool // leave the statement alone
	tagged  bool // the statement has a conn_tag comment already (skip is set)
}

// tailPoint lexes q (strings, quoted identifiers, comments) to find where
// the tag goes: at the end of the text, so that it is the last comment
// (what the collector reads), on a new line when q ends inside a -- or #
// comment; but before a ';' that is the statement's last code byte (an
// executable comment /*!…*/, /*M!…*/ or an optimizer hint /*+…*/ is code). skip is set when q
// already has a conn_tag comment (a caller who tagged by hand keeps their
// tag), when q has no code at all, and when q ends inside a string, a quoted
// identifier or an unterminated comment (invalid text the server must see as
// it was written: a tag there would become part of the literal). With
// NO_BACKSLASH_ESCAPES a backslash ending a string reads as an escape here:
// the safe side, the statement is left untagged.
func tailPoint(q string) tail {
	end := -1    // offset after the last code byte
	semi := -1   // offset of a ';' that is the last code byte
	codeEnd := 0 // offset after the token before that ';'
	tokEnd := 0  // offset after the last token (code or comment)
	inLine := false
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case isSpace(c):
			i++
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for {
				if j >= len(q) {
					return tail{skip: true}
				}
				if q[j] == '\\' && c != '`' {
					j += 2
					continue
				}
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c { // a doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			i = j + 1
			end, semi, inLine, tokEnd = i, -1, false, i
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			n := strings.Index(q[i+2:], "*/")
			if n < 0 {
				return tail{skip: true}
			}
			body := q[i+2 : i+2+n]
			i += 2 + n + 2
			switch {
			case strings.HasPrefix(body, "!") || strings.HasPrefix(body, "+") || strings.HasPrefix(body, "M!"):
				end, semi = i, -1
			case strings.HasPrefix(body, " conn_tag:") || strings.HasPrefix(body, "conn_tag:"):
				return tail{skip: true, tagged: true}
			}
			inLine, tokEnd = false, i
		case c == '#' || c == '-' && i+1 < len(q) && q[i+1] == '-' && (i+2 == len(q) || q[i+2] <= ' '):
			nl := strings.IndexByte(q[i:], '\n')
			if nl < 0 {
				inLine = true
				i = len(q)
				continue
			}
			i += nl + 1
			inLine, tokEnd = false, i
		default:
			semi = -1
			if c == ';' {
				semi, codeEnd = i, tokEnd
			}
			i++
			end, inLine, tokEnd = i, false, i
		}
	}
	switch {
	case end < 0:
		return tail{skip: true}
	case semi >= 0:
		at := semi
		for at > codeEnd && isSpace(q[at-1]) {
			at--
		}
		return tail{at: at}
	case inLine:
		return tail{newline: true}
	}
	return tail{at: len(q)}
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
