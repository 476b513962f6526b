package main

import (
	"errors"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/holdtime/holdtime/internal/termtext"
)

// isTerminal reports whether w is a terminal: colour, progress bars and
// in-place refreshes go only there, never into pipes and files.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}

// termWidth is the width of the terminal w is, 0 when w is not one (lines
// are then never cut).
func termWidth(w io.Writer) int {
	width, _ := termSize(w)
	return width
}

// termSize is the width and height of the terminal w is, zeros when w is
// not one.
func termSize(w io.Writer) (width, height int) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0
	}
	return int(ws.Col), int(ws.Row)
}

// rawMode puts the terminal f into a mode where each key arrives as it is
// typed, unechoed, and a read returns after at most 100 ms with or without
// one (so the reader can stop). Output processing is kept: "\n" still
// starts a line. The returned function restores the terminal as it was;
// call it on every way out.
func rawMode(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, err
	}
	raw := *old
	// No line editing, no echo, and Ctrl-C, Ctrl-\ and Ctrl-Z arrive as keys
	// rather than signals: top quits on them itself, restoring the terminal.
	raw.Lflag &^= unix.ICANON | unix.ECHO | unix.ISIG | unix.IEXTEN
	raw.Iflag &^= unix.IXON | unix.ICRNL
	raw.Cc[unix.VMIN] = 0
	raw.Cc[unix.VTIME] = 1
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, ioctlSetTermios, old) }, nil
}

// Keys that end a view: q, Q, Ctrl-C, Ctrl-D, Ctrl-\ (in raw mode the last
// three are plain bytes).
func isQuitKey(b byte) bool {
	return b == 'q' || b == 'Q' || b == 0x03 || b == 0x04 || b == 0x1c
}

// readQuitKey reads f (a terminal in rawMode) until a quit key arrives,
// then calls quit, or until stop is closed. A read returns within 100 ms
// (VTIME), so the reader notices stop.
func readQuitKey(f *os.File, stop <-chan struct{}, quit func()) {
	fd := int(f.Fd())
	buf := make([]byte, 32)
	for {
		select {
		case <-stop:
			return
		default:
		}
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			return
		}
		for _, b := range buf[:n] {
			if isQuitKey(b) {
				quit()
				return
			}
		}
	}
}

// cell is a table cell: its text and the SGR parameters it is drawn with
// ("1" bold, "31" red, "" plain). Styles never count toward widths. The
// text is drawn through termtext.Line: a tag, a server's message or a
// typed filter that holds control characters shows them escaped, on its
// one line, and widths are terminal cells (a CJK character takes two).
type cell struct {
	text  string
	style string
}

func plain(s string) cell { return cell{text: s} }

// table lays out rows of cells in columns two spaces apart, right-aligned
// except those in left, widths measured on the text alone (colour codes are
// added after), and every line cut at width columns (0: never cut). A row
// of one cell in a table of more columns is a heading drawn across it.
type table struct {
	left map[int]bool // columns aligned left
	rows [][]cell
}

func (t *table) add(cells ...cell) { t.rows = append(t.rows, cells) }

// write draws the table; without color no escape code is written.
func (t *table) write(w io.Writer, width int, color bool) error {
	var widths []int
	cols := 0
	for _, r := range t.rows {
		cols = max(cols, len(r))
	}
	for _, r := range t.rows {
		if len(r) == 1 && cols > 1 {
			continue // a heading or a note across the table: not a column
		}
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], termtext.Width(termtext.Line(c.text)))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		var l line
		if len(r) == 1 && cols > 1 {
			l.add(r[0])
			l.write(&b, width, color)
			continue
		}
		for i, c := range r {
			if i > 0 {
				l.add(plain("  "))
			}
			pad := strings.Repeat(" ", widths[i]-termtext.Width(termtext.Line(c.text)))
			if t.left[i] {
				l.add(c)
				if i < len(r)-1 {
					l.add(plain(pad))
				}
			} else {
				l.add(plain(pad))
				l.add(c)
			}
		}
		l.write(&b, width, color)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// line is one line of styled text.
type line []cell

func (l *line) add(c cell) { *l = append(*l, c) }

// write writes the line and a newline, cut to width visible columns (0:
// whole), each styled piece closed before the next so a cut never leaves a
// colour on.
func (l line) write(b *strings.Builder, width int, color bool) {
	left := width
	for _, c := range l {
		text := termtext.Line(c.text)
		if width > 0 {
			if left <= 0 {
				break
			}
			cut := termtext.Truncate(text, left)
			left -= termtext.Width(cut)
			if cut != text {
				left = 0 // a wide character that did not fit: nothing after it
			}
			text = cut
		}
		if color && c.style != "" && text != "" {
			b.WriteString("\x1b[" + c.style + "m" + text + "\x1b[0m")
		} else {
			b.WriteString(text)
		}
	}
	b.WriteByte('\n')
}

// printLine writes one line of styled pieces, cut at width.
func printLine(b *strings.Builder, width int, color bool, cells ...cell) {
	line(cells).write(b, width, color)
}
