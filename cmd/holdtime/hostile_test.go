package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/internal/termtext"
	"github.com/holdtime/holdtime/locks"
)

// hostileTags are tags as a hostile or careless sender could make them, if
// anything upstream let them through: a screen-clearing escape, a newline,
// a C1 CSI, a bidi override, and wide CJK and emoji characters.
var hostileTags = []string{
	"evil\x1b[2J\x1b[31mred",
	"two\nlines",
	"c1\u009b31mcsi",
	"rlo\u202egnp.exe",
	"結帳_checkout",
	"🛒cart👨‍👩‍👧",
	"plain_tag",
}

// controlFree fails t when out holds a byte or character a terminal would
// act on (newlines excepted: they end out's lines).
func controlFree(t *testing.T, what, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if !termtext.Safe(l) {
			t.Errorf("%s: a control character reaches the terminal: %q", what, l)
		}
	}
}

// sameWidths fails t unless every line has the same width in terminal
// cells: rows of a table whose last column is right-aligned.
func sameWidths(t *testing.T, what string, lines []string) {
	t.Helper()
	want := termtext.Width(lines[0])
	for _, l := range lines[1:] {
		if got := termtext.Width(l); got != want {
			t.Errorf("%s: a line of %d cells among lines of %d, columns misaligned:\n%s", what, got, want, strings.Join(lines, "\n"))
			return
		}
	}
}

func hostileResponse() collector.TopResponse {
	var rows []collector.TopRow
	for i, tag := range hostileTags {
		rows = append(rows, collector.TopRow{Tag: tag, Layers: map[collector.Layer]*collector.LayerFigures{
			collector.LayerApp: fig(float64(10-i), 0.5, 100)}})
	}
	return layered(10, rows...)
}

func TestTopRendersHostileTagsInert(t *testing.T) {
	out := renderTop(t, hostileResponse(), 0, false)
	controlFree(t, "top", out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// title, sources, then the header and one line per tag: a newline in a
	// tag never makes a line of its own.
	table := lines[2:]
	if len(table) != 1+len(hostileTags) {
		t.Fatalf("%d table lines for %d tags:\n%s", len(table), len(hostileTags), out)
	}
	sameWidths(t, "top", table)
	for _, want := range []string{`evil\x1b[2J\x1b[31mred`, `two\nlines`, `c1\u009b31mcsi`, `rlo\u202egnp.exe`, "結帳_checkout"} {
		if !strings.Contains(out, want) {
			t.Errorf("top does not show the tag as %q:\n%s", want, out)
		}
	}
	// Cut at the terminal's width in cells, never inside a wide character.
	for _, width := range []int{9, 10, 31, 32} {
		for _, l := range strings.Split(strings.TrimSuffix(renderTop(t, hostileResponse(), width, true), "\n"), "\n") {
			if !utf8.ValidString(l) || termtext.Width(stripANSI(l)) > width {
				t.Errorf("width %d: line of %d cells: %q", width, termtext.Width(stripANSI(l)), l)
			}
		}
	}
}

func TestTopConsoleRendersHostileTagsInert(t *testing.T) {
	tc := &topCmd{window: "10s", sortKey: "occupancy", layer: collector.LayerMax, interval: time.Second}
	m := newTopModel(context.Background(), tc, nil, "collector", false)
	m.width, m.height = 200, 40
	m.Update(answerMsg{resp: hostileResponse(), at: time.Now()})
	tc.filter = "\x1b]0;title\x07" // what the operator typed is drawn too
	out := m.View()
	controlFree(t, "console", out)
	lines := strings.Split(out, "\n")
	sameWidths(t, "console", lines[2:3+len(hostileTags)])

	m.Update(answerMsg{err: errors.New("collector said \x1b[2Jgone\nfor good"), at: time.Now()})
	controlFree(t, "console, collector down", m.View())

	m.drill = hostileTags[0]
	controlFree(t, "console, drill-down", m.View())
}

func TestLocksRendersHostileTextInert(t *testing.T) {
	snap := &locks.Snapshot{At: time.Now(), Server: locks.Server{Version: "10.11\x1b[2J"}, LockSource: locks.SourceDataLocks}
	for i, tag := range hostileTags {
		snap.Transactions = append(snap.Transactions, locks.Transaction{
			TrxID: "42", ThreadID: int64(i + 1), Tag: tag, User: "app\x1b[31m", Host: "10.0.0.1\n", DB: "shop",
			Statement: "SELECT *\n  FROM stock\x1b[2J WHERE 結帳 = ?", State: "RUNNING",
			Locks: []locks.Lock{{Table: tag, Index: "PRIMARY", Kind: "record", Mode: "X", Rows: 3}},
		})
		snap.RowLocksPerRow = append(snap.RowLocksPerRow, locks.RowLockRatio{Tag: tag, Table: "shop.stock", Rows: 1, Locks: 2, PerRow: 2})
	}
	snap.Hints = []locks.Hint{{Tag: hostileTags[0], Text: "hint about " + hostileTags[0]}}
	snap.Notes = []string{"note \x1b[2J"}
	var out strings.Builder
	l := &locksCmd{out: &out}
	if err := l.render(locksDoc{Target: "db", Snapshot: snap}); err != nil {
		t.Fatal(err)
	}
	controlFree(t, "locks", out.String())
	if !strings.Contains(out.String(), `running: SELECT * FROM stock\x1b[2J WHERE 結帳 = ?`) {
		t.Errorf("a statement is not one line with its escape shown:\n%s", out.String())
	}
	// The ROW LOCKS PER ROW table: columns aligned in cells whatever the
	// tags' widths (its BY INDEX column is empty: the lines end padded
	// alike up to it).
	var rowLocks []string
	in := false
	for _, line := range strings.Split(out.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "ROW LOCKS PER ROW"):
			in = true
		case in && line == "":
			in = false
		case in:
			rowLocks = append(rowLocks, strings.TrimRight(line, " "))
		}
	}
	if len(rowLocks) != 1+len(hostileTags) {
		t.Fatalf("row locks table of %d lines:\n%s", len(rowLocks), out.String())
	}
	col := func(line string) int { return termtext.Width(line[:strings.Index(line, "shop.stock")]) }
	for _, line := range rowLocks[1:] {
		if col(line) != termtext.Width(rowLocks[0][:strings.Index(rowLocks[0], "TABLE")]) {
			t.Errorf("TABLE column misaligned:\n%s", strings.Join(rowLocks, "\n"))
			break
		}
	}
}

func TestDoctorAndErrorsRenderServerTextInert(t *testing.T) {
	var out strings.Builder
	printDoctor(&out, []doctorTarget{{Flag: "mysql", Name: "db\x1b[2J", Addr: "h:3306", Found: "MariaDB 10.11\x1b]0;pwned\x07\nfake line",
		Problem: "refused: \u009b2J"}})
	controlFree(t, "doctor", out.String())
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("doctor: a server's text made lines of its own (%d lines):\n%s", n, out.String())
	}
	var stderr strings.Builder
	run(context.Background(), []string{"top", "--collector", "http://127.0.0.1:1/\x1b[2J", "--bogus"}, &out, &stderr)
	controlFree(t, "error", stderr.String())
}

// FuzzTopRender: whatever tags a collector answers, top's table holds no
// character a terminal acts on, keeps one line per tag, and aligns its
// columns in terminal cells.
func FuzzTopRender(f *testing.F) {
	for _, tag := range hostileTags {
		f.Add(tag, "x")
	}
	f.Add("\xff\xfe", "\u0301")
	f.Fuzz(func(t *testing.T, a, b string) {
		resp := layered(10,
			collector.TopRow{Tag: a, Layers: map[collector.Layer]*collector.LayerFigures{collector.LayerApp: fig(2, 0.5, 10)}},
			collector.TopRow{Tag: b, Layers: map[collector.Layer]*collector.LayerFigures{collector.LayerApp: fig(1, 0.5, 10)}})
		out := renderTop(t, resp, 0, false)
		controlFree(t, "top", out)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 5 {
			t.Fatalf("%d lines for 2 tags:\n%s", len(lines), out)
		}
		sameWidths(t, "top", lines[2:])
	})
}
