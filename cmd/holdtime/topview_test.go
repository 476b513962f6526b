package main

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/holdtime/holdtime/collector"
)

var ansi = regexp.MustCompile("\x1b\\[[0-9;?]*[A-Za-z]")

func stripANSI(s string) string { return ansi.ReplaceAllString(s, "") }

// layered builds a /api/v1/top answer as the collector gives it: rows with
// per-layer figures, the ranked layer's at the top level.
func layered(covered float64, rows ...collector.TopRow) collector.TopResponse {
	resp := collector.TopResponse{Window: "10s", Sort: "occupancy", Layer: collector.LayerMax, CoveredSeconds: covered,
		Layers: map[collector.Layer]*collector.LayerStatus{}}
	for i := range rows {
		r := &rows[i]
		for l, lf := range r.Layers {
			lf.CoveredSeconds = covered
			if lf.Occupancy == 0 {
				lf.Occupancy = lf.HoldSeconds / covered
			}
			lf.StatementsPerSecond = lf.Statements / covered
			resp.Layers[l] = &collector.LayerStatus{CoveredSeconds: covered}
		}
		// Ranked by the largest layer, as the collector does.
		for _, l := range collector.Layers {
			if lf := r.Layers[l]; lf != nil && (r.Layer == "" || lf.Occupancy > r.Layers[r.Layer].Occupancy) {
				r.Layer = l
			}
		}
		lf := r.Layers[r.Layer]
		r.Occupancy, r.IdleShare, r.HoldSeconds, r.Statements, r.StatementsPerSecond = lf.Occupancy, lf.IdleShare,
			lf.HoldSeconds, lf.Statements, lf.StatementsPerSecond
		r.Source, r.Sessions = lf.Source, lf.Sessions
	}
	resp.Rows = rows
	resp.Sources = []collector.SourceStatus{
		{Target: "app", Source: collector.SourceOTLP, Layer: collector.LayerApp, Headline: true, Up: true, State: collector.StateUp},
		{Target: "db", Source: collector.SourceMySQL, Layer: collector.LayerServer, Headline: true, Up: true, State: collector.StateUp},
	}
	return resp
}

func fig(hold, idleShare, stmts float64) *collector.LayerFigures {
	return &collector.LayerFigures{HoldSeconds: hold, IdleHoldSeconds: hold * idleShare, IdleShare: idleShare, Statements: stmts}
}

// theDemoAfterItsFix is what the demo showed after its fix: the claim step
// sits in a transaction between its statements, idle to the server, busy
// to the app; the fixed checkout holds little.
func theDemoAfterItsFix() collector.TopResponse {
	return layered(10,
		collector.TopRow{Tag: "inventory_claim", Layers: map[collector.Layer]*collector.LayerFigures{
			collector.LayerApp: fig(31.5, 0.01, 20000), collector.LayerServer: fig(16.4, 0.66, 20000)}},
		collector.TopRow{Tag: "checkout_tax_quote", Layers: map[collector.Layer]*collector.LayerFigures{
			collector.LayerApp: fig(1.2, 0.02, 870), collector.LayerServer: fig(0.9, 0.4, 870)}},
	)
}

// theHog holds its connection idle in the app outside a transaction: only
// the app sees it.
func theHog() collector.TopResponse {
	return layered(10,
		collector.TopRow{Tag: "report_export", Layers: map[collector.Layer]*collector.LayerFigures{
			collector.LayerApp: fig(10.2, 0.99, 10)}},
		collector.TopRow{Tag: "checkout_txn", Layers: map[collector.Layer]*collector.LayerFigures{
			collector.LayerApp: fig(8, 0.9, 40), collector.LayerServer: fig(7.6, 0.88, 40)}},
		collector.TopRow{Tag: "browse", Layers: map[collector.Layer]*collector.LayerFigures{
			collector.LayerApp: fig(1, 0.05, 3000), collector.LayerServer: fig(0.8, 0.3, 3000)}},
	)
}

func renderTop(t *testing.T, resp collector.TopResponse, width int, color bool) string {
	t.Helper()
	var b strings.Builder
	(&topCmd{window: resp.Window, sortKey: "occupancy", layer: collector.LayerMax}).render(&b, resp, width, color, false)
	return b.String()
}

// rowLine returns the line of tag in a rendered table.
func rowLine(t *testing.T, out, tag string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(stripANSI(l)); len(f) > 0 && f[0] == tag {
			return l
		}
	}
	t.Fatalf("no row for %s in\n%s", tag, out)
	return ""
}

// painted lists the cells of a line drawn in red.
func painted(line string) []string {
	var out []string
	for _, m := range regexp.MustCompile("\x1b\\[31m([^\x1b]*)\x1b\\[0m").FindAllStringSubmatch(line, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestTopShowsEveryLayer(t *testing.T) {
	out := renderTop(t, theHog(), 0, false)
	t.Log("\n" + out)
	lines := strings.Split(out, "\n")
	if h := strings.Fields(lines[2]); strings.Join(h, " ") != "TAG APP IDLE SERVER IDLE LAYER STMT/s SESSIONS PINS" {
		t.Errorf("header %q: want each layer's occupancy and idle share", lines[2])
	}
	// The hog is seen only by the app, and ranks first there.
	if f := strings.Fields(lines[3]); f[0] != "report_export" || f[1] != "1.02" || f[2] != "99%" || f[3] != "-" || f[5] != "app" ||
		f[7] != "-" || f[8] != "-" {
		t.Errorf("first row %q: want report_export, app 1.02 99%%, no server figure, ranked by app, whose sessions and pins no source tells", lines[3])
	}
	if f := strings.Fields(rowLine(t, out, "checkout_txn")); f[1] != "0.80" || f[3] != "0.76" || f[4] != "88%" {
		t.Errorf("checkout_txn %v: want app 0.80 and server 0.76 88%% side by side", f)
	}
}

func TestTopPaintsOnlyWasteTheAppConfirms(t *testing.T) {
	// After the demo's fix the server sees the claim step idle 66 % of its
	// hold (between statements of its transactions), the app 1 %: not
	// waste.
	out := renderTop(t, theDemoAfterItsFix(), 0, true)
	for _, tag := range []string{"inventory_claim", "checkout_tax_quote"} {
		if p := painted(rowLine(t, out, tag)); len(p) > 0 {
			t.Errorf("%s painted as waste (%v), though the app wastes none of its hold", tag, p)
		}
	}
	// A hog is painted where it holds idle and the app agrees.
	out = renderTop(t, theHog(), 0, true)
	if p := painted(rowLine(t, out, "report_export")); len(p) != 1 || p[0] != "99%" {
		t.Errorf("report_export painted %v: want its app idle share, 99%%", p)
	}
	if p := painted(rowLine(t, out, "checkout_txn")); len(p) != 2 {
		t.Errorf("checkout_txn painted %v: want its app and server idle shares", p)
	}
	if p := painted(rowLine(t, out, "browse")); len(p) != 0 {
		t.Errorf("browse painted %v", p)
	}
	// With no app figures at all, a layer's own idle share is all there is.
	resp := theDemoAfterItsFix()
	for i := range resp.Rows {
		delete(resp.Rows[i].Layers, collector.LayerApp)
	}
	delete(resp.Layers, collector.LayerApp)
	if p := painted(rowLine(t, renderTop(t, resp, 0, true), "inventory_claim")); len(p) != 1 || p[0] != "66%" {
		t.Errorf("server-only inventory_claim painted %v: want its server idle share", p)
	}
}

func TestTopColourNeverCountsTowardWidths(t *testing.T) {
	for _, resp := range []collector.TopResponse{theHog(), theDemoAfterItsFix()} {
		plainOut := renderTop(t, resp, 0, false)
		colourOut := renderTop(t, resp, 0, true)
		if !strings.Contains(colourOut, "\x1b[") {
			t.Fatal("no colour drawn")
		}
		if stripANSI(colourOut) != plainOut {
			t.Errorf("colour moves the columns:\n%s\nwithout colour:\n%s", stripANSI(colourOut), plainOut)
		}
		// Cut at the terminal's width, colour never left on.
		for _, width := range []int{20, 37, 50} {
			cut := renderTop(t, resp, width, true)
			plainCut := renderTop(t, resp, width, false)
			if stripANSI(cut) != plainCut {
				t.Errorf("width %d: colour changes the cut", width)
			}
			for _, l := range strings.Split(strings.TrimSuffix(plainCut, "\n"), "\n") {
				if n := utf8.RuneCountInString(l); n > width {
					t.Errorf("width %d: line of %d columns: %q", width, n, l)
				}
			}
			for _, l := range strings.Split(cut, "\n") {
				if strings.Count(l, "\x1b[0m") != strings.Count(l, "\x1b[")-strings.Count(l, "\x1b[0m") {
					t.Errorf("width %d: a colour left on: %q", width, l)
				}
			}
		}
	}
}

func TestTopRatesDivideByTheCoveredSpan(t *testing.T) {
	// Four seconds into a 1m window: 400 statements are 100 a second, and
	// 6 s of hold 1.5 connections.
	resp := layered(4, collector.TopRow{Tag: "browse", Layers: map[collector.Layer]*collector.LayerFigures{
		collector.LayerServer: fig(6, 0.1, 400)}})
	resp.Window = "1m"
	var b strings.Builder
	(&topCmd{window: "1m", sortKey: "occupancy", layer: collector.LayerMax}).render(&b, resp, 0, false, false)
	out := b.String()
	if !strings.Contains(strings.Split(out, "\n")[0], "window 1m, covered 4.0s") {
		t.Errorf("header does not say the span covered: %q", strings.Split(out, "\n")[0])
	}
	if f := strings.Fields(rowLine(t, out, "browse")); f[1] != "1.50" || f[4] != "100.0" {
		t.Errorf("browse %v: want occupancy 1.50 and 100.0 statements/s, both over the 4 s covered", f)
	}
}

func TestTopWarmsUpBeforeShowingRates(t *testing.T) {
	// 1 ms after the collector started, a 200 ms hold that began before it
	// would read as 200 connections.
	resp := layered(0.001, collector.TopRow{Tag: "hog", Layers: map[collector.Layer]*collector.LayerFigures{
		collector.LayerApp: fig(0.2, 0.9, 1)}})
	out := renderTop(t, resp, 0, true)
	f := strings.Fields(stripANSI(rowLine(t, out, "hog")))
	if f[1] != "warming" || f[4] != "warming" || strings.Contains(out, "200") {
		t.Errorf("row %v: want occupancy and rate shown as warming until 2 s are covered", f)
	}
	if len(painted(rowLine(t, out, "hog"))) != 0 {
		t.Error("a warming layer painted as waste")
	}
}

func TestTopSourceStates(t *testing.T) {
	resp := theHog()
	resp.Sources = []collector.SourceStatus{
		{Target: "app", Source: collector.SourceOTLP, Layer: collector.LayerApp, Headline: true, State: collector.StateWaiting, Reason: "no_spans_yet"},
		{Target: "db", Source: collector.SourceMySQL, Layer: collector.LayerServer, Headline: true, Up: true, State: collector.StateDegraded, Reason: "history_long_consumer_off"},
		{Target: "px", Source: collector.SourceProxySQLProcesslist, Layer: collector.LayerProxy, State: collector.StateDown, Reason: "refused"},
		{Target: "px", Source: collector.SourceProxySQLDigest, Layer: collector.LayerProxy, Up: true, State: collector.StateUp},
		{Target: "db2", Source: collector.SourceMySQL, Up: true, State: collector.StateUp, JoinOnly: true},
	}
	got := strings.Split(renderTop(t, resp, 0, false), "\n")[1]
	want := "sources: app/otlp waiting (no_spans_yet), db/mysql degraded (history_long_consumer_off), " +
		"px/proxysql_processlist DOWN (refused) (cross-check), px/proxysql_digest up (cross-check), db2/mysql up (join only)"
	if got != want {
		t.Errorf("sources line\n got %q\nwant %q", got, want)
	}
}

func TestTopHelpExplainsUnknownAndUntagged(t *testing.T) {
	code, out, errOut := runCLI(t, "top", "--help")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`"unknown" is hold whose owner cannot be known`, `"untagged" is hold of statements seen without a
conn_tag comment`, "--layer", "q quits", "warming", "retries"} {
		if !strings.Contains(out, want) {
			t.Errorf("top --help does not say %q", want)
		}
	}
}

// TestTopShowsProxyWait: with a proxy layer, WAIT is the statements
// waiting for a ProxySQL backend on average over the covered span.
func TestTopShowsProxyWait(t *testing.T) {
	proxy := fig(8, 0.1, 400)
	proxy.WaitSeconds = 3 // over 4 s: 0.75 statements waiting on average
	resp := layered(4, collector.TopRow{Tag: "inventory_reserve", Layers: map[collector.Layer]*collector.LayerFigures{
		collector.LayerApp: fig(9, 0.05, 400), collector.LayerProxy: proxy}})
	out := renderTop(t, resp, 0, false)
	lines := strings.Split(out, "\n")
	if h := strings.Join(strings.Fields(lines[2]), " "); h != "TAG APP IDLE PROXY IDLE WAIT LAYER STMT/s SESSIONS PINS" {
		t.Errorf("header %q: want WAIT after the proxy layer's columns", h)
	}
	if f := strings.Fields(rowLine(t, out, "inventory_reserve")); f[3] != "2.00" || f[5] != "0.75" {
		t.Errorf("row %v: want proxy occupancy 2.00 and 0.75 waiting", f)
	}
}

// FuzzTable: whatever the cells and the width, colour never moves a column
// nor survives a cut, and no line is wider than the terminal.
func FuzzTable(f *testing.F) {
	f.Add("checkout_tax_quote", "3.52", "97%", uint8(1), 40)
	f.Add("ünïcode_täg", "warming", "-", uint8(2), 7)
	f.Add("", "", "", uint8(0), 0)
	f.Fuzz(func(t *testing.T, a, b, c string, styleN uint8, width int) {
		if !utf8.ValidString(a+b+c) || strings.ContainsAny(a+b+c, "\x1b\n\r\t") {
			t.Skip()
		}
		style := []string{"", "1", "31", "33", "1;31"}[styleN%5] // the styles top draws
		width = max(width%200, 0)
		tb := &table{left: map[int]bool{0: true}}
		tb.add(plain("TAG"), plain("APP"), plain("IDLE"))
		tb.add(cell{a, style}, plain(b), cell{c, "31"})
		tb.add(cell{"a heading across the table", "1"})
		tb.add(plain(c), cell{a, style}, plain(b))
		var plainOut, colourOut strings.Builder
		tb.write(&plainOut, width, false)
		tb.write(&colourOut, width, true)
		if stripANSI(colourOut.String()) != plainOut.String() {
			t.Errorf("colour changes the layout:\n%q\n%q", stripANSI(colourOut.String()), plainOut.String())
		}
		for _, l := range strings.Split(strings.TrimSuffix(plainOut.String(), "\n"), "\n") {
			if n := utf8.RuneCountInString(l); width > 0 && n > width {
				t.Errorf("line of %d columns at width %d: %q", n, width, l)
			}
		}
		for _, l := range strings.Split(colourOut.String(), "\n") {
			if opened, closed := strings.Count(l, "\x1b[")-strings.Count(l, "\x1b[0m"), strings.Count(l, "\x1b[0m"); opened != closed {
				t.Errorf("a colour left on: %q", l)
			}
		}
	})
}
