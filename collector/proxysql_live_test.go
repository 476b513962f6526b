package collector

import (
	"context"
	"database/sql"
	"math"
	"testing"
	"time"

	"github.com/holdtime/holdtime/testenv"
)

// TestLiveProxySQL runs a known workload through a real ProxySQL (when a
// proxysql binary is on PATH): tag px_hog holds transactions open 700 ms,
// tag px_short runs short statements. Per-tag backend hold from the events
// log, and from sampling with the events log, must be within 15% of what
// the clients measured.
func TestLiveProxySQL(t *testing.T) {
	testenv.RequireProxySQL(t)
	d := testenv.NewDatabase(t)
	ctx := context.Background()
	px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: testenv.Shared(t), Schema: d.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE q (id INT PRIMARY KEY, n INT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	d.Open(t).ExecContext(ctx, "INSERT INTO q VALUES (1, 0)")
	c, err := New(Config{ProxySQL: []ProxySQLConfig{{Name: "px", DSN: px.AdminDSN(), EventsLog: px.EventsLog,
		ProcesslistInterval: 100 * time.Millisecond, TagGrace: 2 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	wait := pollWaiter(c)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- c.Run(rctx) }()
	defer func() { cancel(); <-done }()
	wait(t, "px", SourceProxySQLProcesslist, false)

	app, err := sql.Open("mysql", px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	// One connection, logged in before the clock starts: the client's
	// figure is backend hold, not ProxySQL's login (which took 1.4 s on a
	// loaded CI machine and failed the comparison).
	app.SetMaxOpenConns(1)
	if err := app.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	client := map[string]float64{}
	for range 3 {
		start := time.Now()
		tx, err := app.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		tx.ExecContext(ctx, "/* conn_tag:px_hog */ SELECT n FROM q WHERE id = 1 FOR UPDATE")
		time.Sleep(700 * time.Millisecond) // the workload: idle inside the transaction
		tx.ExecContext(ctx, "/* conn_tag:px_hog */ UPDATE q SET n = n + 1 WHERE id = 1")
		tx.Commit()
		client["px_hog"] += time.Since(start).Seconds()
	}
	for range 40 {
		start := time.Now()
		app.ExecContext(ctx, "/* conn_tag:px_short */ SELECT SLEEP(0.03)")
		client["px_short"] += time.Since(start).Seconds()
	}
	hold := func(src Source, tag string) float64 {
		c.st.mu.Lock()
		defer c.st.mu.Unlock()
		return holdOf(c.st, "px", src, tag)
	}
	// Bounded: the tailer reads the log within a few of its polls.
	for i := 0; i < 50 && hold(SourceProxySQLEvents, "px_short") < 0.85*client["px_short"]; i++ {
		wait(t, "px", SourceProxySQLProcesslist, false)
	}
	for i := 0; i < 25; i++ { // let pending sampled hold resolve (TagGrace)
		wait(t, "px", SourceProxySQLProcesslist, false)
	}
	for tag, want := range client {
		ev, pl := hold(SourceProxySQLEvents, tag), hold(SourceProxySQLProcesslist, tag)
		t.Logf("%-9s client %.3f s  events %.3f (%+.1f%%)  sampled %.3f (%+.1f%%)", tag, want, ev, pct(ev, want), pl, pct(pl, want))
		if math.Abs(pct(ev, want)) > 15 {
			t.Errorf("%s: events log hold %.3f s vs client %.3f s", tag, ev, want)
		}
		if tag == "px_hog" && math.Abs(pct(pl, want)) > 15 {
			t.Errorf("%s: sampled hold %.3f s vs client %.3f s", tag, pl, want)
		}
	}
}
