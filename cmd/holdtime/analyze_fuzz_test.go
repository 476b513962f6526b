package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode"

	"github.com/holdtime/holdtime/internal/termtext"
)

// FuzzAnalyzeTable: whatever two names the log holds, the profile table
// has one line per row, no control character, and its right-aligned
// column ends in the same terminal cell on every line.
func FuzzAnalyzeTable(f *testing.F) {
	for _, seed := range [][2]string{{"app", "結帳ユーザー"}, {"evil\x1b[2J\nuser", "x\u009b31m"}, {"\t\r", "👩‍👩‍👧"},
		{"a\u0301", "\x00"}, {"", "|"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		var out bytes.Buffer
		textTable(&out, "  ", []string{"USER", "HOLD s", "NOTE"}, []bool{false, true, false},
			[][]string{{a, "1.000", b}, {b, "22.000", a}})
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("%d lines for 3 rows:\n%q", len(lines), out.String())
		}
		for _, r := range out.String() {
			if r != '\n' && (unicode.IsControl(r) || r == '\u009b') {
				t.Fatalf("control character %U in %q", r, out.String())
			}
		}
		ends := map[int]bool{}
		for i, l := range lines {
			cell := []string{"HOLD s", "1.000", "22.000"}[i]
			// Past the first column's text, the first occurrence is the
			// second column (padding is blanks).
			skip := len("  ") + len(termtext.Line([]string{"USER", a, b}[i]))
			j := strings.Index(l[skip:], cell)
			if j < 0 {
				t.Fatalf("no %q in %q", cell, l)
			}
			j += skip
			ends[termtext.Width(l[:j])+len(cell)] = true
		}
		if len(ends) != 1 {
			t.Errorf("HOLD s ends in cells %v:\n%s", ends, out.String())
		}
	})
}
