package collector

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/testenv"
)

// TestLiveJoinOnlyTarget: beside a ProxySQL target, a join-only MySQL
// target gives the proxy↔server join what a full one does (an
// idle-in-transaction session's tag, named exactly) and exports nothing
// of the server: no series of its target in /metrics but its health, no
// server layer in /api/v1/top, and its status says join_only. A full
// target watching the same server at the same time, in another collector,
// shows what the join-only one leaves out.
func TestLiveJoinOnlyTarget(t *testing.T) {
	testenv.RequireProxySQL(t)
	d := testenv.NewDatabase(t)
	px := proxySQLFor(t, d)
	warmProxySQL(t, px)
	runs := joinOnlyAndFull(t, d, px)

	// Idle in a transaction for 1.5 s after its one tagged statement: the
	// ProxySQL sampler sees the session idle, with no statement; only the
	// join names its tag.
	const idle = 1500 * time.Millisecond
	holdIdleTransaction(t, px, idle)
	for i, r := range runs {
		checkIdleTrxNamedExactly(t, map[int]string{0: "join-only", 1: "full"}[i], r, idle)
	}

	// What each collector exports of target db.
	if got := serverSeries(t, runs[0].c); len(got) > 0 {
		t.Errorf("join-only target: /metrics exports %d server series, e.g. %s", len(got), got[0])
	}
	if got := serverSeries(t, runs[1].c); len(got) == 0 {
		t.Errorf("full target: /metrics exports no server series: the check above could not fail")
	}
	resp := getTop(t, runs[0].c.Handler(), "window=1m")
	if hasServerFigures(resp) {
		t.Errorf("join-only target: /api/v1/top has server figures: %+v", resp)
	}
	if !hasServerFigures(getTop(t, runs[1].c.Handler(), "window=1m")) {
		t.Errorf("full target: /api/v1/top has no server figures: the check above could not fail")
	}
	checkJoinOnlyStatus(t, resp)
}

// polledCollector is a running collector and its poll count.
type polledCollector struct {
	c     *Collector
	polls *pollCount
}

// joinOnlyAndFull runs two collectors until the test ends, each watching
// ProxySQL px and d's server, the first as a join-only target, the second
// as a full one; it returns once each source of each has polled twice.
func joinOnlyAndFull(t *testing.T, d *testenv.Database, px *testenv.ProxySQL) []polledCollector {
	t.Helper()
	proxy := ProxySQLConfig{Name: "px", DSN: px.AdminDSN(), ProcesslistInterval: 50 * time.Millisecond,
		TagGrace: 2 * time.Second, DigestInterval: time.Second}
	server := MySQLConfig{Name: "db", DSN: d.Target.Config("").FormatDSN(), Interval: 250 * time.Millisecond}
	joinOnly := server
	joinOnly.JoinOnly = true
	var runs []polledCollector
	for _, m := range []MySQLConfig{joinOnly, server} {
		c, err := New(Config{ProxySQL: []ProxySQLConfig{proxy}, MySQL: []MySQLConfig{m}})
		if err != nil {
			t.Fatal(err)
		}
		r := polledCollector{c, countPolls(c)}
		runUntilCleanup(t, c)
		runs = append(runs, r)
	}
	for _, r := range runs {
		r.polls.wait(t, "db", SourceMySQL, 2)
		r.polls.wait(t, "px", SourceProxySQLProcesslist, 2)
	}
	return runs
}

// holdIdleTransaction runs, through ProxySQL px, a transaction idle for
// idle after its one statement, tagged idle_trx.
func holdIdleTransaction(t *testing.T, px *testenv.ProxySQL, idle time.Duration) {
	t.Helper()
	ctx := context.Background()
	connector, err := mysql.NewConnector(px.AppConfig())
	if err != nil {
		t.Fatal(err)
	}
	app := sql.OpenDB(connector)
	t.Cleanup(func() { app.Close() })
	conn, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // returned to the pool when the test ends, as before the split
	for _, q := range []string{"BEGIN", "/* conn_tag:idle_trx */ SELECT 1"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(idle)
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
}

// proxyHold is tag's hold from c's processlist source of ProxySQL px.
func proxyHold(c *Collector, tag string) float64 {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return holdOf(c.st, "px", SourceProxySQLProcesslist, tag)
}

// checkIdleTrxNamedExactly: collector r names the idle transaction's hold
// idle_trx, by the join, exactly.
func checkIdleTrxNamedExactly(t *testing.T, name string, r polledCollector, idle time.Duration) {
	t.Helper()
	// The hold is decided once the transaction ended, within TagGrace.
	deadline := time.Now().Add(10 * time.Second)
	for proxyHold(r.c, "idle_trx") < 0.8*idle.Seconds() && time.Now().Before(deadline) {
		r.polls.wait(t, "px", SourceProxySQLProcesslist, 1)
	}
	got, unknown := proxyHold(r.c, "idle_trx"), proxyHold(r.c, UnknownTag)
	exact := pxServerJoin(r.c)["exact"]
	t.Logf("%s: idle_trx %.3f s, unknown %.3f s, join exact %.3f s", name, got, unknown, exact)
	if got < 0.8*idle.Seconds() || unknown > 0.2 || exact < 0.8*idle.Seconds() {
		t.Errorf("%s MySQL target: idle_trx holds %.3f s (unknown %.3f s, join exact %.3f s) of a %v idle transaction: want it named exactly",
			name, got, unknown, exact, idle)
	}
}

// sourceHealthMetrics are the metrics of a source's health, which a
// join-only target exports too.
var sourceHealthMetrics = map[string]bool{"holdtime_source_up": true, "holdtime_source_state": true, "holdtime_source_degraded": true,
	"holdtime_source_last_success_timestamp_seconds": true, "holdtime_collector_tags_overflow_total": true,
	"holdtime_collector_malformed_rows_total": true, "holdtime_collector_poll_duration_seconds_bucket": true,
	"holdtime_collector_poll_duration_seconds_sum": true, "holdtime_collector_poll_duration_seconds_count": true,
	"holdtime_collector_polls_late_total": true, "holdtime_collector_poll_lag_seconds": true}

// serverSeries are c's /metrics series of target db other than its
// health, and of the server layer.
func serverSeries(t *testing.T, c *Collector) []string {
	t.Helper()
	var out []string
	for series := range scrape(t, c.Handler()) {
		name := series[:strings.IndexByte(series+"{", '{')]
		if (strings.Contains(series, `target="db"`) && !sourceHealthMetrics[name]) || strings.Contains(series, `layer="server"`) {
			out = append(out, series)
		}
	}
	return out
}

// hasServerFigures reports whether resp has a server layer headline or
// a row with a server layer or MySQL source figure.
func hasServerFigures(resp TopResponse) bool {
	if resp.Layers[LayerServer] != nil && len(resp.Layers[LayerServer].Headlines) > 0 {
		return true
	}
	for _, row := range resp.Rows {
		if row.Layers[LayerServer] != nil || row.Sources[SourceMySQL] != nil {
			return true
		}
	}
	return false
}

// checkJoinOnlyStatus: resp's status of target db says up, join_only, no
// layer.
func checkJoinOnlyStatus(t *testing.T, resp TopResponse) {
	t.Helper()
	var st *SourceStatus
	for i, s := range resp.Sources {
		if s.Target == "db" && s.Source == SourceMySQL {
			st = &resp.Sources[i]
		}
	}
	if st == nil || !st.JoinOnly || !st.Up || st.Layer != "" || st.Headline {
		t.Errorf("join-only target's status: %+v, want up, join_only, no layer", st)
	}
}

// TestJoinOnlyNeedsProxySQL: a join-only target without a ProxySQL target
// would read nothing: New says so.
func TestJoinOnlyNeedsProxySQL(t *testing.T) {
	_, err := New(Config{MySQL: []MySQLConfig{{Name: "db", DSN: "u:secret@tcp(127.0.0.1:3306)/", JoinOnly: true}}})
	if err == nil || !strings.Contains(err.Error(), "join-only") || strings.Contains(err.Error(), "secret") {
		t.Errorf("join-only without ProxySQL: %v", err)
	}
}
