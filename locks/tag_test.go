package locks

import (
	"strings"
	"testing"
)

// parseLeading reads only a leading tag: tagOf's choice among statements is
// tested apart from the grammar, which conntag's tests cover.
func parseLeading(q string) (string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(q), "/* conn_tag:")
	if !ok {
		return "", false
	}
	tag, _, ok := strings.Cut(rest, " */")
	return tag, ok
}

func TestTagOf(t *testing.T) {
	h := func(texts ...string) []histStmt {
		var out []histStmt
		for i, s := range texts {
			out = append(out, histStmt{event: int64(i + 1), text: s})
		}
		return out
	}
	for _, tc := range []struct {
		name, running string
		hist          []histStmt
		tag, stmt     string
	}{
		{"running tagged", "/* conn_tag:a */ SELECT 1", nil, "a", "SELECT ?"},
		{"idle, last tagged", "", h("SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "START TRANSACTION",
			"/* conn_tag:b */ UPDATE t SET v = 2"), "b", "UPDATE t SET v = ?"},
		{"driver statements after the tagged one", "", h("BEGIN", "/* conn_tag:c */ SELECT 1 FOR UPDATE",
			"SELECT CONNECTION_ID()"), "c", "SELECT ? FOR UPDATE"},
		{"an earlier transaction's tag does not carry over", "", h("/* conn_tag:old */ UPDATE t SET v = 1", "COMMIT",
			"BEGIN", "UPDATE t SET v = 3"), UntaggedTag, "UPDATE t SET v = ?"},
		{"only a boundary seen", "", h("/* conn_tag:old */ UPDATE t SET v = 1", "COMMIT", "BEGIN"), UnknownTag, ""},
		{"nothing seen", "", nil, UnknownTag, ""},
		{"running untagged, history tagged", "SELECT 2", h("BEGIN", "/* conn_tag:d */ SELECT 1"), "d", "SELECT ?"},
		{"conntag's untagged is no tag", "SELECT SLEEP(5) /* conn_tag:untagged */", h("BEGIN", "/* conn_tag:f */ UPDATE t SET v = 1"),
			"f", "SELECT SLEEP(...)"},
		{"a cut running statement is unknown", "UPDATE t SET v = 1 WHERE id IN (" + strings.Repeat("1, ", 400), nil, UnknownTag,
			Normalize("UPDATE t SET v = 1 WHERE id IN (" + strings.Repeat("1, ", 400))},
		{"ROLLBACK TO SAVEPOINT is no boundary", "", h("BEGIN", "/* conn_tag:e */ SELECT 1", "ROLLBACK TO SAVEPOINT s"),
			"e", "ROLLBACK TO SAVEPOINT s"},
	} {
		tag, _, stmt := tagOf(parseLeading, tc.running, tc.hist)
		if tag != tc.tag || stmt != tc.stmt {
			t.Errorf("%s: tag %q statement %q, want %q %q", tc.name, tag, stmt, tc.tag, tc.stmt)
		}
	}
}
