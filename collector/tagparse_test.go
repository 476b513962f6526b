package collector

import (
	"strings"
	"testing"
)

var tagTests = []struct {
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
	{"not leading", "SELECT 1 /* conn_tag:late */ FROM t WHERE a=1", "", false},
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
	for _, tt := range tagTests {
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
	buf := make([]byte, 0, MaxTagLen)
	allocs := testing.AllocsPerRun(100, func() {
		buf, _ = AppendTag(buf[:0], q)
		buf, _ = AppendTag(buf[:0], tail)
	})
	if allocs != 0 {
		t.Errorf("AppendTag allocates %v times per call; want 0", allocs)
	}
}

func FuzzParseTag(f *testing.F) {
	for _, tt := range tagTests {
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
			if !tagByte(tag[i]) {
				t.Fatalf("ParseTag(%q) = %q: byte %q outside the tag grammar", query, tag, tag[i])
			}
		}
		// A tag written in conntag's form in front of any statement is found.
		if ok {
			again, ok2 := ParseTag("/* conn_tag:" + tag + " */ " + query)
			if !ok2 || again != tag {
				t.Fatalf("re-tagging %q with %q gave %q, %v", query, tag, again, ok2)
			}
		}
	})
}
