// Package termtext makes text that came from outside safe and measurable on
// a terminal.
//
// Tags, SQL text, user and host names, server messages and file contents
// reach holdtime's terminal views from sources nobody vouches for. Written
// raw, an ESC sequence clears the operator's screen or repaints it, a
// newline breaks a table, a bidi override reverses what follows, and a
// wide character shifts every column after it. Line and Text escape every
// such character visibly (ESC becomes `\x1b`, a newline `\n`, U+202E
// `\u202e`), so the operator sees what was sent and the terminal interprets
// none of it; Width measures text in terminal cells (a CJK character or an
// emoji takes two, a combining mark none), and Truncate and PadRight cut
// and fill by cells, never inside a character or a grapheme cluster.
//
// One-line adoption in a renderer:
//
//	fmt.Fprintf(w, "%s  %d\n", termtext.PadRight(termtext.Line(tag), 20), n)
//
// Widths follow Unicode's East Asian Width and grapheme cluster rules
// (github.com/rivo/uniseg), ambiguous characters counted narrow, as most
// terminals outside East Asian locales draw them.
package termtext
