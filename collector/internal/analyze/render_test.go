package analyze

import (
	"bytes"
	"strings"
	"testing"
	"unicode"

	"github.com/holdtime/holdtime/internal/termtext"
)

// TestRenderersEscapeAndAlign: a tag or user holding a newline, an escape
// sequence or a pipe cannot break a line, a Markdown cell or the terminal,
// and CJK tags keep the table aligned in terminal cells.
func TestRenderersEscapeAndAlign(t *testing.T) {
	rep := &Report{TotalHoldSeconds: 3, Tags: []TagReport{
		{Tag: "結帳", HoldSeconds: 2, Share: 2.0 / 3},
		{Tag: "evil\x1b[2J\nx|y", HoldSeconds: 1, Share: 1.0 / 3},
		{Tag: "app", HoldSeconds: 0.5},
	}, Longest: []HoldReport{{Tag: "evil\x1b[2J\nx|y", User: "u\x07\r", Client: "\u009b31m", Seconds: 1}},
		Notes: []string{"note\x1b]0;title\x07"}}
	for _, format := range []string{"table", "markdown"} {
		var out bytes.Buffer
		write := rep.WriteTable
		if format == "markdown" {
			write = rep.WriteMarkdown
		}
		if err := write(&out); err != nil {
			t.Fatal(err)
		}
		for _, r := range out.String() {
			if r != '\n' && (unicode.IsControl(r) || r == '\u009b') {
				t.Fatalf("%s: control character %U reached the output:\n%q", format, r, out.String())
			}
		}
		if !strings.Contains(out.String(), `evil\x1b[2J\nx`) {
			t.Errorf("%s: the tag is not shown escaped:\n%s", format, out.String())
		}
		lines := strings.Split(out.String(), "\n")
		if format == "markdown" {
			for _, l := range lines {
				if strings.HasPrefix(l, "| ") && strings.Count(l, " | ")-strings.Count(l, `\| `) != 9 {
					t.Errorf("markdown row with other than 10 cells: %q", l)
				}
			}
			continue
		}
		// Header and three rows, right-aligned: every line ends in the
		// same terminal cell.
		width := termtext.Width(lines[2])
		for _, l := range lines[3:6] {
			if termtext.Width(l) != width {
				t.Errorf("row %q is %d cells wide, the header %d", l, termtext.Width(l), width)
			}
		}
		if lines[6] != "" {
			t.Errorf("more than three rows (a tag broke a line?):\n%s", out.String())
		}
	}
}
