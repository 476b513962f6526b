package collector

import (
	"context"
	"database/sql"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/testenv"
)

// TestLiveDrillDown runs a hog through a real ProxySQL: tag
// drill_hog holds four transactions open about 300 ms each on one
// connection, tag drill_short runs short statements. /api/v1/tag's longest
// holds of drill_hog must be its transactions: from the events log within
// 15 % of the longest the client measured, from the processlist's runs of
// samples within a sample gap and a half of it, both on target px and on
// the ProxySQL session the hog's connection had; drill_short's longest
// must stay short. Its statements must rank drill_mix's two digests by
// their time: the slow one first, though it ran half as often.
func TestLiveDrillDown(t *testing.T) {
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
	if _, err := d.Open(t).ExecContext(ctx, "INSERT INTO q VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	const gap = 100 * time.Millisecond
	c, err := New(Config{ProxySQL: []ProxySQLConfig{{Name: "px", DSN: px.AdminDSN(), EventsLog: px.EventsLog,
		ProcesslistInterval: gap, DigestInterval: 500 * time.Millisecond, TagGrace: 2 * time.Second}}})
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
	app.SetMaxOpenConns(1)
	if err := app.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", px.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	session, longest := runDrillHog(t, app, admin)
	runDrillShortAndMix(t, app)

	// Bounded: the tailer reads the log within a few polls; the sampled
	// runs close at the sample after their last.
	for i := 0; i < 50 && (len(longestHoldsFrom(c, "drill_hog", SourceProxySQLEvents)) < 4 || len(longestHoldsFrom(c, "drill_hog", SourceProxySQLProcesslist)) < 4 ||
		len(longestHoldsFrom(c, "drill_short", SourceProxySQLEvents)) == 0 || statementCount(c, "drill_mix") < 30); i++ {
		wait(t, "px", SourceProxySQLProcesslist, false)
	}
	ev, pl := longestHoldsFrom(c, "drill_hog", SourceProxySQLEvents), longestHoldsFrom(c, "drill_hog", SourceProxySQLProcesslist)
	t.Logf("client's longest %.3f s, session %d; events log %+v; sampled %+v", longest, session, ev, pl)
	if len(ev) != 4 {
		t.Fatalf("events log: %d of the hog's 4 holds", len(ev))
	}
	if h := ev[0]; math.Abs(pct(h.Seconds, longest)) > 15 || h.Target != "px" || h.SessionID != session || h.Statements < 2 {
		t.Errorf("events log's longest hold %+v, want %.3f s on px session %d, 2 statements or more", h, longest, session)
	}
	if len(pl) != 4 {
		t.Fatalf("processlist: %d runs, want one per transaction", len(pl))
	}
	if h := pl[0]; math.Abs(h.Seconds-longest) > 1.5*gap.Seconds() || h.Target != "px" || h.SessionID != session {
		t.Errorf("processlist's longest run %+v, want %.3f s ± %.2f on px session %d", h, longest, 1.5*gap.Seconds(), session)
	}
	checkMixRankedByTime(t, c)
	checkShortStaysShort(t, c)
}

// runDrillHog runs drill_hog's four transactions on app's one connection,
// each idle 300 ms after locking row 1 of q; it returns the ProxySQL
// session of the connection (read from admin during the first) and the
// longest transaction as the client timed it.
func runDrillHog(t *testing.T, app, admin *sql.DB) (session int64, longest float64) {
	t.Helper()
	ctx := context.Background()
	for i := range 4 {
		start := time.Now()
		tx, err := app.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "/* conn_tag:drill_hog */ SELECT n FROM q WHERE id = 1 FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			session = onlyProxySQLSession(t, admin)
		}
		time.Sleep(300 * time.Millisecond) // the workload: idle inside the transaction
		if _, err := tx.ExecContext(ctx, "/* conn_tag:drill_hog */ UPDATE q SET n = n + 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		longest = max(longest, time.Since(start).Seconds())
	}
	return session, longest
}

// onlyProxySQLSession is the app's only session, read while it holds its
// backend.
func onlyProxySQLSession(t *testing.T, admin *sql.DB) int64 {
	t.Helper()
	var ids []int64
	rows, err := admin.QueryContext(context.Background(), "SELECT SessionID FROM stats_mysql_processlist")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	if len(ids) != 1 {
		t.Fatalf("ProxySQL lists sessions %v, want the app's one", ids)
	}
	return ids[0]
}

// The two statements of drill_mix: the slow one (10 × 40 ms) has more
// time than the frequent one (20 × 10 ms).
const drillSlow, drillFrequent = "/* conn_tag:drill_mix */ SELECT SLEEP(0.04) FROM q WHERE id = 1", "/* conn_tag:drill_mix */ SELECT SLEEP(0.01)"

// runDrillShortAndMix runs drill_short's 20 short statements, then
// drill_mix's two statements, the slow one every third.
func runDrillShortAndMix(t *testing.T, app *sql.DB) {
	t.Helper()
	ctx := context.Background()
	for range 20 {
		if _, err := app.ExecContext(ctx, "/* conn_tag:drill_short */ SELECT SLEEP(0.01)"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		q := drillFrequent
		if i%3 == 0 {
			q = drillSlow
		}
		if _, err := app.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// statementCount is how many statements of tag c's detail counts.
func statementCount(c *Collector, tag string) float64 {
	var n float64
	for _, s := range c.TagDetail(tag).Statements {
		n += s.Count
	}
	return n
}

// longestHoldsFrom is tag's longest holds from source src.
func longestHoldsFrom(c *Collector, tag string, src Source) []DetailHold {
	var out []DetailHold
	for _, h := range c.TagDetail(tag).LongestHolds {
		if h.Source == src {
			out = append(out, h)
		}
	}
	return out
}

// checkMixRankedByTime: drill_mix's slow statement ranks before its
// frequent one.
func checkMixRankedByTime(t *testing.T, c *Collector) {
	t.Helper()
	mix := c.TagDetail("drill_mix").Statements
	t.Logf("drill_mix's statements %+v", mix)
	if len(mix) != 2 || mix[0].Count != 10 || mix[1].Count != 20 || !strings.Contains(mix[0].Text, "FROM") ||
		mix[0].HoldSeconds < 0.35 || mix[0].HoldSeconds > 0.6 || mix[1].HoldSeconds < 0.18 || mix[1].HoldSeconds > 0.35 ||
		mix[0].Target != "px" || mix[0].Source != SourceProxySQLDigest || mix[0].Digest == "" || mix[0].Digest == mix[1].Digest {
		t.Errorf("drill_mix's statements: want the 10 slow ones (about 0.4 s) before the 20 frequent ones (about 0.2 s), two digests of px")
	}
}

// checkShortStaysShort: no hold of drill_short is as long as the hog's.
func checkShortStaysShort(t *testing.T, c *Collector) {
	t.Helper()
	for _, h := range c.TagDetail("drill_short").LongestHolds {
		if h.Seconds > 0.25 {
			t.Errorf("drill_short's hold %+v is the hog's", h)
		}
	}
}
