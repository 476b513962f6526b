package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/testenv"
)

// TestDrillDownShowsLongestHoldsAndStatements: a hog holds three
// transactions open about 300 ms each through a real ProxySQL; top's
// drill-down into it, asking a live collector, shows its longest holds (on
// ProxySQL's session of the hog's connection, about 0.3 s) and its top
// statements (its two digests), and no longer says they are not known.
func TestDrillDownShowsLongestHoldsAndStatements(t *testing.T) {
	testenv.RequireProxySQL(t)
	d := testenv.NewDatabase(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE q (id INT PRIMARY KEY, n INT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Open(t).ExecContext(ctx, "INSERT INTO q VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	c := runTestCollector(t, collector.Config{ProxySQL: []collector.ProxySQLConfig{{Name: "px", DSN: px.AdminDSN(), EventsLog: px.EventsLog,
		ProcesslistInterval: 100 * time.Millisecond, DigestInterval: 500 * time.Millisecond, TagGrace: 2 * time.Second}}})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	cl, err := collector.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}

	app, err := sql.Open("mysql", px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	app.SetMaxOpenConns(1)
	if err := app.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	// The digest source counts from its first poll: a statement of its
	// own tag, seen in the tag's statements, says the hog's will be.
	for i := 0; ; i++ {
		if _, err := app.ExecContext(ctx, "/* conn_tag:warm */ SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if d, err := cl.TagDetail(ctx, "warm"); err != nil {
			t.Fatal(err)
		} else if len(d.Statements) > 0 {
			break
		}
		if i == 100 {
			t.Fatal("the digest source counted no statement of tag warm in 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 3 {
		tx, err := app.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "/* conn_tag:hog */ SELECT n FROM q WHERE id = 1 FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the workload: idle inside the transaction
		if _, err := tx.ExecContext(ctx, "/* conn_tag:hog */ UPDATE q SET n = n + 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}

	tc := &topCmd{window: "1m", layer: collector.LayerMax, sortKey: "occupancy", interval: 10 * time.Millisecond}
	m := newTopModel(ctx, tc, httpTop{cl}, "collector", false)
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 200})
	m.drill = "hog"
	// run does what the program would with a command: its messages go to
	// the model, and so do those of the commands the model answers with;
	// ticks are left out, the loop below is the clock.
	var run func(cmd tea.Cmd)
	run = func(cmd tea.Cmd) {
		if cmd == nil {
			return
		}
		switch msg := cmd().(type) {
		case tea.BatchMsg:
			for _, c := range msg {
				run(c)
			}
		case tickMsg:
		default:
			_, next := m.Update(msg)
			run(next)
		}
	}
	// Bounded: the events log is tailed and the digests polled within a
	// few hundred milliseconds; each round is a refresh.
	var d1 collector.TagDetail
	events := func(d collector.TagDetail) (n int) {
		for _, h := range d.LongestHolds {
			if h.Source == collector.SourceProxySQLEvents {
				n++
			}
		}
		return n
	}
	statements := func(d collector.TagDetail) (n float64) {
		for _, s := range d.Statements {
			n += s.Count
		}
		return n
	}
	for i := 0; i < 100; i++ {
		run(m.fetch())
		if m.detail != nil {
			d1 = *m.detail
			if events(d1) == 3 && statements(d1) == 6 {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := m.View()
	if events(d1) != 3 || len(d1.Statements) != 2 || statements(d1) != 6 {
		t.Fatalf("the hog's detail has %d of its 3 holds from the events log, %d digests of its 2, %.0f statements of its 6:\n%s",
			events(d1), len(d1.Statements), statements(d1), s)
	}
	h := d1.LongestHolds[0]
	want := []string{"longest holds in the last 5 m", "top statements in the last 5 m", "SELECT n FROM q WHERE id = ? FOR UPDATE",
		"UPDATE q SET n = n", fmt.Sprintf("%.3f", h.Seconds), string(h.Source)}
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("the drill-down lacks %q:\n%s", w, s)
		}
	}
	if h.Seconds < 0.25 || h.Seconds > 0.5 {
		t.Errorf("the hog's longest hold %+v, want about 0.3 s", h)
	}
	for _, no := range []string{"longest_holds:", "statements:"} {
		if strings.Contains(s, no) {
			t.Errorf("the drill-down still says %q is not known:\n%s", no, s)
		}
	}
	if t.Failed() {
		t.Logf("\n%s", s)
	}
}
