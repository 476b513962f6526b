package conntag

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"
)

var sanitizeCases = []struct{ in, want string }{
	{"checkout_completion", "checkout_completion"},
	{"inventory.reserve:v2-b", "inventory.reserve:v2-b"},
	{"", "_"},
	{"a b", "a_b"},
	{"end*/DROP TABLE x", "end__DROP_TABLE_x"},
	{"user@host", "user_host"},
	{"caf\u00e9", "caf_"},
	{"\u65e5\u672c", "__"},
	{"\xff\xfe", "__"},
	{"a/*b*/c", "a__b__c"},
	{"x'y\"z", "x_y_z"},
	{strings.Repeat("a", 70), strings.Repeat("a", 64)},
	{strings.Repeat("\u00e9", 70), strings.Repeat("_", 64)},
}

func TestSanitizeTag(t *testing.T) {
	for _, c := range sanitizeCases {
		if got := SanitizeTag(c.in); got != c.want {
			t.Errorf("SanitizeTag(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestWithTagNestedReplaces(t *testing.T) {
	ctx := WithTag(context.Background(), "outer")
	ctx = WithTag(ctx, "inner tag")
	if got, ok := TagFrom(ctx); !ok || got != "inner_tag" {
		t.Fatalf("TagFrom = %q, %v; want inner_tag", got, ok)
	}
	if _, ok := TagFrom(context.Background()); ok {
		t.Fatal("TagFrom(Background) reports a tag")
	}
}

var injectCases = []struct{ in, want string }{
	{"SELECT 1", "SELECT 1 /* conn_tag:t */"},
	{"  SELECT 1  ", "  SELECT 1   /* conn_tag:t */"},
	{"SET @x = 1", "SET @x = 1 /* conn_tag:t */"},
	{"SELECT 1;", "SELECT 1 /* conn_tag:t */;"},
	{"SELECT 1 ;\n", "SELECT 1 /* conn_tag:t */ ;\n"},
	{"SELECT 1; /* after */", "SELECT 1 /* conn_tag:t */; /* after */"},
	{"/* hostgroup=2 */ SELECT 1", "/* hostgroup=2 */ SELECT 1 /* conn_tag:t */"},
	{"/* a */ /* b */SELECT 1", "/* a */ /* b */SELECT 1 /* conn_tag:t */"},
	{"-- note\nSELECT 1", "-- note\nSELECT 1 /* conn_tag:t */"},
	{"SELECT 1 -- note", "SELECT 1 -- note\n/* conn_tag:t */"},
	{"SELECT 1 # note", "SELECT 1 # note\n/* conn_tag:t */"},
	{"SELECT 1 --1", "SELECT 1 --1 /* conn_tag:t */"},
	{"SELECT 1--", "SELECT 1--\n/* conn_tag:t */"},
	{"SELECT 1-;", "SELECT 1-/* conn_tag:t */;"},
	{"SELECT 1 /* app note */", "SELECT 1 /* app note */ /* conn_tag:t */"},
	{"SELECT ';' AS s", "SELECT ';' AS s /* conn_tag:t */"},
	{"SELECT 'it''s', \"a\\\"b\", `x``y` FROM t", "SELECT 'it''s', \"a\\\"b\", `x``y` FROM t /* conn_tag:t */"},
	{"SELECT '-- not a comment'", "SELECT '-- not a comment' /* conn_tag:t */"},
	{"SELECT '/* conn_tag:literal */'", "SELECT '/* conn_tag:literal */' /* conn_tag:t */"},
	{"/*!40101 SET NAMES utf8 */", "/*!40101 SET NAMES utf8 */ /* conn_tag:t */"},
	{"/*!40101 SET NAMES utf8 */;", "/*!40101 SET NAMES utf8 */ /* conn_tag:t */;"},
	{"SELECT /*+ MAX_EXECUTION_TIME(10) */ 1", "SELECT /*+ MAX_EXECUTION_TIME(10) */ 1 /* conn_tag:t */"},
	{"SELECT 1 /* conn_tag:mine */", "SELECT 1 /* conn_tag:mine */"},
	{"/* conn_tag:mine */ SELECT 1", "/* conn_tag:mine */ SELECT 1"},
	// Invalid or empty text is sent as written.
	{"SELECT 'unterminated", "SELECT 'unterminated"},
	{"SELECT 1 /* unterminated", "SELECT 1 /* unterminated"},
	{"/* unterminated SELECT 1", "/* unterminated SELECT 1"},
	{"", ""},
	{"   ", "   "},
	{"-- only a comment", "-- only a comment"},
}

func TestInjectTag(t *testing.T) {
	for _, c := range injectCases {
		if got := InjectTag(c.in, "t"); got != c.want {
			t.Errorf("InjectTag(%q) =\n  %q\nwant\n  %q", c.in, got, c.want)
		}
	}
}

func TestCommentFormats(t *testing.T) {
	static := map[string]string{"service": "checkout", "route": "/cart"}
	c := newCommenter(FormatConnTag, static)
	if got := c.inject("SELECT 1", c.comment("t")); got != "SELECT 1 /* conn_tag:t route:_cart service:checkout */" {
		t.Errorf("conn_tag with static attributes: %q", got)
	}
	s := newCommenter(FormatSQLCommenter, static)
	for in, want := range map[string]string{
		"SELECT 1":    "SELECT 1 /*conn_tag='t',route='_cart',service='checkout'*/",
		"SELECT 1; ":  "SELECT 1 /*conn_tag='t',route='_cart',service='checkout'*/; ",
		"SELECT 1 \n": "SELECT 1 /*conn_tag='t',route='_cart',service='checkout'*/ \n",
	} {
		if got := s.inject(in, s.comment("t")); got != want {
			t.Errorf("sqlcommenter(%q) = %q, want %q", in, got, want)
		}
	}
	for _, q := range []string{"SELECT 1 -- note", "SELECT /*+ NO_INDEX(t) */ 1", "SELECT 1 # note", "/* app */ SELECT 1"} {
		if got := s.inject(q, s.comment("t")); got != q {
			t.Errorf("sqlcommenter changed a statement that has a comment: %q -> %q", q, got)
		}
	}
	if got := newCommenter(FormatSQLCommenter, nil).comment("a:b"); got != " /*conn_tag='a%3Ab'*/" {
		t.Errorf("sqlcommenter escapes values: %q", got)
	}
	n := newCommenter(FormatNone, nil)
	if got := n.inject("SELECT 1", n.comment("t")); got != "SELECT 1" {
		t.Errorf("FormatNone changed the text: %q", got)
	}
}

func TestOperationOf(t *testing.T) {
	for q, want := range map[string]string{
		"select 1": "SELECT", "/* x */ INSERT INTO t": "INSERT", "Update t": "UPDATE", "  delete": "DELETE",
		"WITH x AS (SELECT 1) SELECT": "WITH", "start transaction": "BEGIN", "COMMIT": "COMMIT",
		"rollback": "ROLLBACK", "SELECTED": "OTHER", "": "OTHER", "(SELECT 1)": "OTHER", "set @a=1": "SET",
		"/* conn_tag:mine */ UPDATE t": "UPDATE", "/* a */ /* conn_tag:b */ -- c\nDELETE FROM t": "DELETE",
	} {
		if got := opNames[operationOf(q)]; got != want {
			t.Errorf("operationOf(%q) = %s, want %s", q, got, want)
		}
	}
}

// checkSingleComment asserts what every tagged statement must satisfy: the
// text added is exactly one comment, well formed, with a valid tag, and the
// original statement is intact around it.
func checkSingleComment(t *testing.T, query, tag string) {
	t.Helper()
	clean := SanitizeTag(tag)
	if len(clean) == 0 || len(clean) > MaxTagLen || !utf8.ValidString(clean) {
		t.Fatalf("SanitizeTag(%q) = %q: empty, too long or invalid", tag, clean)
	}
	for i := 0; i < len(clean); i++ {
		if !tagAllowed(clean[i]) {
			t.Fatalf("SanitizeTag(%q) = %q has %q", tag, clean, clean[i])
		}
	}
	got := InjectTag(query, tag)
	if got == query {
		// Only a statement that has a conn_tag comment already, or that has
		// no code or ends inside a literal or comment, is left alone.
		if tp := tailPoint(query); !tp.skip {
			t.Fatalf("InjectTag(%q) added nothing (tail %+v)", query, tp)
		}
		return
	}
	comment := " /* conn_tag:" + clean + " */"
	at := strings.Index(got, comment)
	for _, lead := range []string{"\n", ""} {
		if at < 0 {
			comment = lead + comment[strings.IndexByte(comment, '/'):]
			at = strings.Index(got, comment)
		}
	}
	if at < 0 || len(got) != len(query)+len(comment) || got[:at]+got[at+len(comment):] != query {
		t.Fatalf("InjectTag(%q, %q) = %q: not the query with one comment inserted", query, tag, got)
	}
	inner := comment[3 : len(comment)-2]
	if strings.Contains(inner, "*/") || strings.Contains(inner, "/*") || strings.Contains(inner, "@") {
		t.Fatalf("comment %q can end early or disable multiplexing", comment)
	}
	// The comment is statement-level: not inside a literal or a comment.
	if tp := tailPoint(got); !tp.tagged {
		t.Fatalf("InjectTag(%q) = %q: the tag is inside a literal or a comment", query, got)
	}
	// Nothing but a final ';' and whitespace or comments follows it, and the
	// start of the statement is untouched.
	if rest := strings.TrimLeft(got[at+len(comment):], " \t\r\n\f\v"); rest != "" && rest[0] != ';' {
		t.Fatalf("InjectTag(%q) = %q: the tag is not at the end", query, got)
	}
	// The collector reads it back, unless the statement leads with another
	// conn_tag-looking comment or continues after its final ';'.
	if _, lead := ParseTag(query); !lead {
		if back, ok := ParseTag(got); (!ok || back != clean) && !strings.Contains(got[at:], ";") {
			t.Fatalf("ParseTag(%q) = %q, %v; want %q", got, back, ok, clean)
		}
	}
}

func FuzzInjectTag(f *testing.F) {
	for _, c := range injectCases {
		f.Add(c.in, "t")
	}
	for _, c := range sanitizeCases {
		f.Add("SELECT 1", c.in)
	}
	f.Fuzz(func(t *testing.T, query, tag string) {
		checkSingleComment(t, query, tag)
	})
}
