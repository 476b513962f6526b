package termtext

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"checkout_completion", "checkout_completion"},
		{"evil\x1b[2Jtag", `evil\x1b[2Jtag`},
		{"a\nb\r\tc", `a\nb\r\tc`},
		{"bell\x07del\x7f", `bell\x07del\x7f`},
		{"csi\u009b31m", `csi\u009b31m`},
		{"nel\u0085", `nel\u0085`},
		{"rlo\u202egnp.exe", `rlo\u202egnp.exe`},
		{"lri\u2066x\u2069", `lri\u2066x\u2069`},
		{"sep\u2028x", `sep\u2028x`},
		{"bad\xff\xfeutf8", `bad\xff\xfeutf8`},
		{"結帳_checkout", "結帳_checkout"},
		{"🛒👨‍👩‍👧", "🛒👨‍👩‍👧"}, // the zero-width joiner stays: it joins an emoji
		{"é", "é"},
	} {
		if got := Line(tc.in); got != tc.want {
			t.Errorf("Line(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !Safe(Line(tc.in)) {
			t.Errorf("Line(%q) is not Safe", tc.in)
		}
	}
	if got := Text("two\nlines\tand \x1b[31mred"); got != "two\nlines\tand \\x1b[31mred" {
		t.Errorf("Text kept or escaped the wrong things: %q", got)
	}
}

func TestWidth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0}, {"abc", 3}, {"結帳", 4}, {"🛒", 2}, {"👨‍👩‍👧", 2}, {"é", 1}, {"e\u0301", 1}, {"…", 1}, {"≥1.0", 4},
		{"ｱ", 1}, // halfwidth katakana
	} {
		if got := Width(tc.in); got != tc.want {
			t.Errorf("Width(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestTruncateAndPad(t *testing.T) {
	for _, tc := range []struct {
		in    string
		cells int
		want  string
	}{
		{"abcdef", 3, "abc"},
		{"結帳結帳", 3, "結"}, // the second wide character would straddle the limit
		{"結帳結帳", 4, "結帳"},
		{"e\u0301e\u0301x", 2, "e\u0301e\u0301"}, // never cut a combining mark from its letter
		{"👨‍👩‍👧x", 1, ""},
		{"abc", 0, ""},
		{"abc", 10, "abc"},
	} {
		got := Truncate(tc.in, tc.cells)
		if got != tc.want || Width(got) > tc.cells {
			t.Errorf("Truncate(%q, %d) = %q (%d cells), want %q", tc.in, tc.cells, got, Width(got), tc.want)
		}
	}
	if got := PadRight("結帳", 6); got != "結帳  " {
		t.Errorf("PadRight = %q", got)
	}
	if got := PadLeft("🛒", 4); got != "  🛒" {
		t.Errorf("PadLeft = %q", got)
	}
}

func TestWriterKeepsLinesAndJoinsSplitCharacters(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	in := "row 1\t結帳\x1b[2J\nrow 2 🛒\u009b\n"
	// Byte by byte: every multi-byte character is split across writes.
	for i := range len(in) {
		if n, err := w.Write([]byte{in[i]}); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if want := "row 1\t結帳\\x1b[2J\nrow 2 🛒\\u009b\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	out.Reset()
	_, _ = w.Write([]byte("cut \xe7\xb5")) // a character's first two bytes, and no more
	_ = w.Flush()
	if out.String() != `cut \xe7\xb5` {
		t.Errorf("an incomplete character at the end: %q", out.String())
	}
}

func FuzzLine(f *testing.F) {
	for _, s := range []string{"tag", "\x1b[2J", "a\nb", "\u202e", "結帳", "\xff", "👨‍👩‍👧", "\u009b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l := Line(s)
		if !Safe(l) || !utf8.ValidString(l) || strings.ContainsAny(l, "\n\r\x1b") {
			t.Fatalf("Line(%q) = %q still holds what a terminal acts on", s, l)
		}
		if Safe(s) && l != s {
			t.Fatalf("Line changed safe text %q to %q", s, l)
		}
		for cells := range 6 {
			if w := Width(Truncate(l, cells)); w > cells {
				t.Fatalf("Truncate(%q, %d) is %d cells", l, cells, w)
			}
		}
	})
}
