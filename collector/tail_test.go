package collector

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAnalyzeRejectsAbsurdTimes slips lines with absurd times into a real
// events log, first, in the middle (next to a transaction of the same
// session) and last: the report is the clean log's, and every absurd line is
// counted as malformed with a reason.
func TestAnalyzeRejectsAbsurdTimes(t *testing.T) {
	clean, err := os.ReadFile("testdata/states_eventslog_events.json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(clean), "\n"), "\n")
	bad := absurdLines(1796200038250235)
	year2099 := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	var dirty []string
	dirty = append(dirty, bad[3])                  // the first line is corrupt
	dirty = append(dirty, lines[:len(lines)/2]...) // real events
	dirty = append(dirty, bad[:3]...)
	dirty = append(dirty, lines[len(lines)/2:len(lines)-1]...)
	dirty = append(dirty, bad[4:]...)
	dirty = append(dirty, lines[len(lines)-1])
	dirty = append(dirty, eventLine(5, year2099, year2099+1, "/* conn_tag:evil */ SELECT 1")) // and the last
	dir := t.TempDir()
	cleanPath, dirtyPath := filepath.Join(dir, "clean.json"), filepath.Join(dir, "dirty.json")
	os.WriteFile(cleanPath, clean, 0o644)
	os.WriteFile(dirtyPath, []byte(strings.Join(dirty, "\n")+"\n"), 0o644)

	want, err := Analyze(context.Background(), AnalyzeConfig{EventsLogs: []string{cleanPath}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Analyze(context.Background(), AnalyzeConfig{EventsLogs: []string{dirtyPath}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Tag("evil") != nil {
		t.Errorf("the absurd lines made a tag: %+v", got.Tag("evil"))
	}
	if !got.From.Equal(want.From) || !got.To.Equal(want.To) {
		t.Errorf("window %v..%v, want the clean log's %v..%v", got.From, got.To, want.From, want.To)
	}
	if len(got.Tags) != len(want.Tags) {
		t.Errorf("%d tags, want %d", len(got.Tags), len(want.Tags))
	}
	for _, w := range want.Tags {
		g := got.Tag(w.Tag)
		if g == nil || g.HoldSeconds != w.HoldSeconds || g.Statements != w.Statements || g.Transactions != w.Transactions ||
			g.MaxSeconds != w.MaxSeconds || g.IdleSeconds != w.IdleSeconds {
			t.Errorf("tag %s: %+v\nwant %+v", w.Tag, g, w)
		}
	}
	st := got.EventsLog
	if st.Malformed != 7 || st.Events != want.EventsLog.Events {
		t.Errorf("%d malformed, %d events; want 7 malformed and the clean log's %d events", st.Malformed, st.Events, want.EventsLog.Events)
	}
	for _, ref := range st.MalformedLines {
		if ref.Reason == "" || ref.Line == 0 {
			t.Errorf("malformed line without its place or reason: %+v", ref)
		}
		t.Log(ref)
	}
	var out bytes.Buffer
	if err := got.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	figuresPart, _, _ := strings.Cut(out.String(), "sources:") // the sources part quotes the skipped lines
	if m := regexp.MustCompile(`.*(\s-[0-9]|2099-|294247).*`).FindString(figuresPart); m != "" {
		t.Errorf("report shows absurd figures: %s", m)
	}
}

// TestFollowedLogRejectsAbsurdTimes appends the absurd lines to a followed
// events log between real holds: no counter moves backwards, occupancy
// stays what the real holds give, and each absurd line is counted.
func TestFollowedLogRejectsAbsurdTimes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.log")
	os.WriteFile(path, nil, 0o644)
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ps := newProxySQLSessions("px", c.st, ProcesslistConfig{}, true, false, time.Second, nil)
	tl := &tailer{path: path, poll: time.Millisecond, sink: storeSink{c.st, "px", SourceProxySQLEvents}, log: c.cfg.Logger, target: "px", sessions: ps, buf: make([]byte, 4096)}
	defer tl.closeFile()
	appendLine := func(s string) {
		f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(s + "\n")
		f.Close()
	}
	if err := tl.step(true); err != nil {
		t.Fatal(err)
	}
	prev := map[string]figures{}
	check := func(when string) {
		t.Helper()
		if err := tl.step(false); err != nil {
			t.Fatal(err)
		}
		sr := c.st.series[seriesKey{"px", SourceProxySQLEvents}]
		if sr == nil {
			return
		}
		for tag, e := range sr.tags {
			f, p := e.total, prev[tag]
			for _, v := range [][2]float64{{f.Hold, p.Hold}, {f.Active, p.Active}, {f.Idle, p.Idle}, {f.Stmts, p.Stmts}} {
				if !(v[0] >= v[1]) || math.IsInf(v[0], 0) {
					t.Fatalf("%s: %s went from %+v to %+v", when, tag, p, f)
				}
			}
			prev[tag] = f
		}
		for _, row := range getTop(t, c.Handler(), "window=10s").Rows {
			if row.Occupancy > 5 || row.Tag == "evil" {
				t.Fatalf("%s: top shows %+v", when, row)
			}
		}
	}
	now := time.Now().UnixMicro()
	n := 0
	real := func() {
		n++
		s := now + int64(n)*1000
		appendLine(eventLine(1, s, s+100, "BEGIN"))
		appendLine(eventLine(1, s+200, s+300, "/* conn_tag:real */ SELECT 1"))
		appendLine(eventLine(1, s+400, s+500, "COMMIT"))
	}
	real()
	check("real holds")
	for i, line := range absurdLines(now) {
		appendLine(line)
		check(fmt.Sprintf("absurd line %d", i))
		real()
		check(fmt.Sprintf("real holds after absurd line %d", i))
	}
	sr := c.st.series[seriesKey{"px", SourceProxySQLEvents}]
	if sr.malformed != float64(len(absurdLines(now))) {
		t.Errorf("malformed %v, want %d", sr.malformed, len(absurdLines(now)))
	}
	if got := sr.tags["real"].total.Stmts; got != float64(n) {
		t.Errorf("real statements %v, want %d: a real line was lost", got, n)
	}
}

// TestTailerReportsRemovedLog removes the followed events log: the source is
// reported down with the reason, an older rotated file is not read again,
// and the log is followed again once it is back.
func TestTailerReportsRemovedLog(t *testing.T) {
	for _, numbered := range []bool{false, true} {
		t.Run(fmt.Sprintf("numbered=%v", numbered), func(t *testing.T) {
			dir := t.TempDir()
			prefix := filepath.Join(dir, "events.log")
			cur := prefix
			now := time.Now().UnixMicro()
			appendTo := func(name, tag string, i int) {
				f, err := os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				s := now + int64(i)*1000
				f.WriteString(eventLine(i, s, s+10, "/* conn_tag:"+tag+" */ SELECT 1") + "\n")
				f.Close()
			}
			if numbered {
				appendTo(prefix+".00000001", "old", 1) // rotated away before the tailer started
				cur = prefix + ".00000002"
			}
			appendTo(cur, "before_start", 2)
			c, err := New(Config{OTLP: OTLPConfig{Enabled: true}, MaxBackoff: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			wait := pollWaiter(c)
			ps := newProxySQLSessions("px", c.st, ProcesslistConfig{}, true, false, time.Second, nil)
			tl := &tailer{path: prefix, poll: 5 * time.Millisecond, sink: storeSink{c.st, "px", SourceProxySQLEvents}, log: c.cfg.Logger, target: "px", sessions: ps}
			c.st.register("px", SourceProxySQLEvents)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); c.runTailer(ctx, tl) }()
			defer func() { cancel(); <-done }()
			status := func() SourceStatus {
				for _, s := range c.Sources() {
					if s.Source == SourceProxySQLEvents {
						return s
					}
				}
				t.Fatal("no events log source")
				return SourceStatus{}
			}
			stmts := func(tag string) float64 {
				c.st.mu.Lock()
				defer c.st.mu.Unlock()
				if e := c.st.series[seriesKey{"px", SourceProxySQLEvents}].tags[tag]; e != nil {
					return e.total.Stmts
				}
				return 0
			}
			wait(t, "px", SourceProxySQLEvents, false)
			appendTo(cur, "live", 3)
			appendTo(cur, "live", 4)
			for stmts("live") < 2 {
				wait(t, "px", SourceProxySQLEvents, false)
			}
			if err := os.Remove(cur); err != nil {
				t.Fatal(err)
			}
			err = wait(t, "px", SourceProxySQLEvents, true)
			if s := status(); s.Up || !strings.Contains(s.LastError, "removed") || !strings.Contains(err.Error(), filepath.Base(cur)) {
				t.Errorf("after removal: %+v (%v); want down, saying the log was removed", s, err)
			}
			// A few more failed polls: it keeps saying why, and reads no
			// older file again.
			wait(t, "px", SourceProxySQLEvents, true)
			if s := status(); s.Up || !strings.Contains(s.LastError, "removed") {
				t.Errorf("while gone: %+v", s)
			}
			appendTo(cur, "back", 5)
			appendTo(cur, "back", 6)
			for stmts("back") < 2 {
				wait(t, "px", SourceProxySQLEvents, false)
			}
			if s := status(); !s.Up {
				t.Errorf("log back, source still down: %+v", s)
			}
			if stmts("old") != 0 || stmts("before_start") != 0 || stmts("live") != 2 {
				t.Errorf("old %v before_start %v live %v; want 0 0 2: a file was read twice", stmts("old"), stmts("before_start"), stmts("live"))
			}
		})
	}
}
