package conntag

import (
	"strings"
	"testing"
)

var parseTests = []struct {
	name  string
	query string
	tag   string
	ok    bool
}{
	{"leading", "/* conn_tag:checkout_completion */ SELECT 1", "checkout_completion", true},
	{"no spaces", "/*conn_tag:a.b-c:d*/SELECT 1", "a.b-c:d", true},
	{"key value pairs", "/* conn_tag:reserve route:api trace:x */ UPDATE t SET a=1", "reserve", true},
	{"after proxysql annotation", "/* hostgroup=2 */ /* conn_tag:report */ SELECT 1", "report", true},
	{"first of two", "/* conn_tag:first */ /* conn_tag:second */ SELECT 1", "first", true},
	{"leading whitespace", "\n\t /* conn_tag:x */ SELECT 1", "x", true},
	{"untagged", "SELECT SLEEP(0.1)", "", false},
	{"begin", "BEGIN", "", false},
	{"stripped by client", " SELECT SLEEP(1)", "", false},
	{"in the middle", "SELECT 1 /* conn_tag:late */ FROM t WHERE a=1", "", false},
	{"trailing", "SET @x = 1 /* conn_tag:checkout_completion */", "checkout_completion", true},
	{"trailing no spaces", "SELECT 1/*conn_tag:a.b-c:d*/", "a.b-c:d", true},
	{"trailing before semicolon", "SELECT 1 /* conn_tag:semi */;", "semi", true},
	{"trailing then semicolon and space", "SELECT 1 /* conn_tag:semi */ ;\n", "semi", true},
	{"trailing key value pairs", "UPDATE t SET a=1 /* conn_tag:reserve route:api */", "reserve", true},
	{"trailing after proxysql annotation", "/* hostgroup=2 */ SELECT 1 /* conn_tag:report */", "report", true},
	{"trailing after newline", "SELECT 1 -- why\n/* conn_tag:after_line_comment */", "after_line_comment", true},
	{"trailing before another comment", "SELECT 1 /* conn_tag:inner */ /* app note */", "inner", true},
	{"trailing last wins", "SELECT 1 /* conn_tag:first */ /* conn_tag:last */", "last", true},
	{"trailing bad name", "SELECT 1 /* conn_tag:a@b */", "", false},
	{"trailing bad then good", "SELECT 1 /* conn_tag:ok */ /* conn_tag:a/b */", "ok", true},
	{"trailing unterminated", "SELECT 1 /* conn_tag:x", "", false},
	{"trailing only end", "SELECT 1 conn_tag:x */", "", false},
	{"trailing long name cut", "SELECT 1 /* conn_tag:" + strings.Repeat("b", 80) + " */", strings.Repeat("b", 64), true},
	{"trailing prepared", "SELECT SLEEP(?) AS s FROM inventory WHERE qty >= ? /* conn_tag:admin_report */", "admin_report", true},
	{"leading wins over trailing", "/* conn_tag:lead */ SELECT 1 /* conn_tag:tail */", "lead", true},
	{"empty name", "/* conn_tag: */ SELECT 1", "", false},
	{"bad byte in name", "/* conn_tag:a@b */ SELECT 1", "", false},
	{"bad name then good", "/* conn_tag:a/b */ /* conn_tag:ok */ SELECT 1", "ok", true},
	{"unterminated", "/* conn_tag:x SELECT 1", "", false},
	{"long name cut", "/* conn_tag:" + strings.Repeat("a", 80) + " */ SELECT 1", strings.Repeat("a", 64), true},
	{"optimizer hint first", "/*+ MAX_EXECUTION_TIME(1000) */ /* conn_tag:hinted */ SELECT 1", "hinted", true},
	{"sqlcommenter", "SELECT 1 /*conn_tag='storefront_browse',route='%2Fcart'*/", "storefront_browse", true},
	{"sqlcommenter later key", "SELECT 1 /*action='x',conn_tag='browse',route='%2Fa'*/;", "browse", true},
	{"sqlcommenter encoded", "SELECT 1 /*conn_tag='checkout%3Atax'*/", "checkout:tax", true},
	{"sqlcommenter sanitised", "SELECT 1 /*conn_tag='a%20b%40c'*/", "a_b_c", true},
	{"sqlcommenter utf8 one underscore", "SELECT 1 /*conn_tag='caf%C3%A9'*/", "caf_", true},
	{"sqlcommenter no tag", "SELECT 1 /*route='%2Fcart'*/", "", false},
	{"sqlcommenter empty", "SELECT 1 /*conn_tag=''*/", "", false},
	{"sqlcommenter unterminated", "SELECT 1 /*conn_tag='abc*/", "", false},
	{"leading wins", "/* conn_tag:lead */ SELECT 1 /*conn_tag='tail'*/", "lead", true},
	{"empty", "", "", false},
	{"only comment start", "/*", "", false},
	{"prepared", "/* conn_tag:admin_report */ SELECT SLEEP(?) AS s FROM inventory WHERE qty >= ?", "admin_report", true},
}

func TestParseTag(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			tag, ok := ParseTag(tt.query)
			if tag != tt.tag || ok != tt.ok {
				t.Errorf("ParseTag(%q) = %q, %v; want %q, %v", tt.query, tag, ok, tt.tag, tt.ok)
			}
		})
	}
}

func TestAppendTagAllocs(t *testing.T) {
	q := []byte("/* hostgroup=2 */ /* conn_tag:checkout_completion k:v */ SELECT * FROM t")
	tail := []byte("SELECT 1 /*action='x',conn_tag='checkout%3Atax'*/")
	trailing := []byte("/* hostgroup=2 */ SELECT * FROM t /* conn_tag:checkout_completion k:v */;")
	buf := make([]byte, 0, MaxTagLen)
	allocs := testing.AllocsPerRun(100, func() {
		buf, _ = AppendTag(buf[:0], q)
		buf, _ = AppendTag(buf[:0], tail)
		buf, _ = AppendTag(buf[:0], trailing)
	})
	if allocs != 0 {
		t.Errorf("AppendTag allocates %v times per call; want 0", allocs)
	}
}

func FuzzParseTag(f *testing.F) {
	for _, tt := range parseTests {
		f.Add(tt.query)
	}
	f.Fuzz(func(t *testing.T, query string) {
		tag, ok := ParseTag(query)
		if ok != (tag != "") {
			t.Fatalf("ParseTag(%q) = %q, %v: ok must mean a non-empty tag", query, tag, ok)
		}
		if len(tag) > MaxTagLen {
			t.Fatalf("ParseTag(%q) = %q: longer than %d bytes", query, tag, MaxTagLen)
		}
		for i := 0; i < len(tag); i++ {
			if !tagAllowed(tag[i]) {
				t.Fatalf("ParseTag(%q) = %q: byte %q outside the tag grammar", query, tag, tag[i])
			}
		}
		// A tag written in conntag's leading form in front of any statement
		// is found; so is one in the trailing form after a statement that
		// ends outside a comment (conntag starts a new line after a line
		// comment, and never tags a statement that ends inside one).
		if ok {
			again, ok2 := ParseTag("/* conn_tag:" + tag + " */ " + query)
			if !ok2 || again != tag {
				t.Fatalf("re-tagging %q with %q gave %q, %v", query, tag, again, ok2)
			}
			if _, lead := appendLeadingTag(nil, []byte(query)); !lead {
				again, ok2 = ParseTag(query + "\n/* conn_tag:" + tag + " */")
				if !ok2 || again != tag {
					t.Fatalf("tagging %q at its end with %q gave %q, %v", query, tag, again, ok2)
				}
			}
		}
	})
}

// TestValidTagAcceptsWhatSanitizeTagWrites: every sanitised tag is valid,
// and a tag outside the grammar is not.
func TestValidTagAcceptsWhatSanitizeTagWrites(t *testing.T) {
	for _, tc := range sanitizeCases {
		if !ValidTag(tc.want) {
			t.Errorf("ValidTag(%q) = false for SanitizeTag(%q)", tc.want, tc.in)
		}
	}
	for _, bad := range []string{"", "a b", "end*/", "user@host", "caf\u00e9", strings.Repeat("x", MaxTagLen+1)} {
		if ValidTag(bad) {
			t.Errorf("ValidTag(%q) = true", bad)
		}
	}
}
