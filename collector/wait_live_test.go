package collector

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdtime/holdtime/testenv"
)

// TestLiveProxySQLWhoWaits runs a real ProxySQL whose backend allows two
// connections: two hog clients hold transactions open, three victim
// clients run short statements and wait for a backend. The collector must
// report per tag the time statements waited for a backend within 20 % of
// what the clients measured (latency less the statement's own time), rank
// the victim first by wait and the hog first by hold, and show waiting
// sessions.
func TestLiveProxySQLWhoWaits(t *testing.T) {
	testenv.RequireProxySQL(t)
	d, px := twoBackendsBehindProxySQL(t)
	c, err := New(Config{
		ProxySQL: []ProxySQLConfig{{Name: "px", DSN: px.AdminDSN(), EventsLog: px.EventsLog,
			ProcesslistInterval: 50 * time.Millisecond, TagGrace: 2 * time.Second, DigestInterval: -1}},
		MySQL: []MySQLConfig{{Name: "db", DSN: d.Target.Config("").FormatDSN(), Interval: 250 * time.Millisecond}},
	})
	if err != nil {
		t.Fatal(err)
	}
	polls := countPolls(c)
	runUntilCleanup(t, c)
	polls.wait(t, "px", SourceProxySQLProcesslist, 2)

	// Bounded: a ProxySQL that stops answering fails the test, not CI.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conns := loggedInClients(t, ctx, px, 5)
	trip := roundTripWithAFreeBackend(t, ctx, conns[2])
	wait, hold := runHogsAndVictims(t, ctx, conns, trip)
	waitSettled(t, polls, func() string { return proxyWaitsAndHolds(c) })
	resp, err := c.TopReport(TopQuery{Window: 5 * time.Minute, Layer: string(LayerProxy), Sort: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	row := logRowsByTag(t, resp)
	t.Logf("clients: wait %v, hold %v", wait, hold)
	checkWaitsAsClientsMeasured(t, row, wait)
	if len(resp.Rows) == 0 || resp.Rows[0].Tag != "victim" {
		t.Errorf("sort=wait ranks %s first, want victim", firstTag(resp.Rows))
	}
	if resp, _ := c.TopReport(TopQuery{Window: 5 * time.Minute, Layer: string(LayerProxy), Sort: "hold"}); len(resp.Rows) == 0 || resp.Rows[0].Tag != "hog" {
		t.Errorf("sort=hold ranks %s first, want hog", firstTag(resp.Rows))
	}
	if w := row[UnknownTag].WaitSeconds; w > 0.1*wait["victim"] {
		t.Errorf("unknown waited %.2f s", w)
	}
	checkWaitMetrics(t, c, row)
}

// twoBackendsBehindProxySQL is a database with table q of two rows and a
// ProxySQL in front of it that opens at most two backend connections.
func twoBackendsBehindProxySQL(t *testing.T) (*testenv.Database, *testenv.ProxySQL) {
	t.Helper()
	d := testenv.NewDatabase(t)
	ctx := context.Background()
	px := proxySQLFor(t, d)
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE q (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	d.Open(t).ExecContext(ctx, "INSERT INTO q VALUES (1,0),(2,0)")
	admin, err := sql.Open("mysql", px.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, q := range []string{"UPDATE mysql_servers SET max_connections = 2", "LOAD MYSQL SERVERS TO RUNTIME"} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return d, px
}

// loggedInClients are n connections of an app through ProxySQL px, each
// logged in before the clock starts; the app is closed when the test
// ends.
func loggedInClients(t *testing.T, ctx context.Context, px *testenv.ProxySQL, n int) []*sql.Conn {
	t.Helper()
	app, err := sql.Open("mysql", px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	app.SetMaxOpenConns(n)
	app.SetMaxIdleConns(n)
	var conns []*sql.Conn
	for range n {
		cn, err := app.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cn.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	return conns
}

// roundTripWithAFreeBackend is the median of 20 round trips of a SELECT 1
// on cn, in seconds. A statement's latency is its wait plus its own time
// plus the client's round trip through ProxySQL; the round trip (the race
// detector and load make it several ms) is measured here, with free
// backends, and taken off each statement's latency.
func roundTripWithAFreeBackend(t *testing.T, ctx context.Context, cn *sql.Conn) float64 {
	t.Helper()
	var trips []time.Duration
	for range 20 {
		start := time.Now()
		if _, err := cn.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		trips = append(trips, time.Since(start))
	}
	slices.Sort(trips)
	trip := trips[len(trips)/2].Seconds()
	t.Logf("round trip with a free backend: %.1f ms (median of 20)", trip*1e3)
	return trip
}

// clientWaits is what the clients measured per tag: wait for a backend
// and hold of it, in seconds.
type clientWaits struct {
	mu         sync.Mutex
	wait, hold map[string]float64
}

func (w *clientWaits) add(tag string, wait, hold float64) {
	w.mu.Lock()
	w.wait[tag] += wait
	w.hold[tag] += hold
	w.mu.Unlock()
}

// runHogsAndVictims runs for 6 s the first two of conns as hogs and the
// others as victims (closing each at the end), and returns the wait and
// hold their clients measured per tag, less round trip trip.
func runHogsAndVictims(t *testing.T, ctx context.Context, conns []*sql.Conn, trip float64) (wait, hold map[string]float64) {
	t.Helper()
	w := &clientWaits{wait: map[string]float64{}, hold: map[string]float64{}}
	deadline := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	for i, cn := range conns {
		wg.Go(func() {
			defer cn.Close()
			for time.Now().Before(deadline) {
				if i < 2 {
					if !hogOnce(t, ctx, cn, i, trip, w) {
						return
					}
					continue
				}
				if !victimOnce(t, ctx, cn, trip, w) {
					return
				}
			}
		})
	}
	wg.Wait()
	return w.wait, w.hold
}

// hogOnce is one transaction of hog i: BEGIN waits for a backend (its
// latency is wait), then holds it 400 ms. False on an error.
func hogOnce(t *testing.T, ctx context.Context, cn *sql.Conn, i int, trip float64, cw *clientWaits) bool {
	start := time.Now()
	if _, err := cn.ExecContext(ctx, "/* conn_tag:hog */ BEGIN"); err != nil {
		t.Error(err)
		return false
	}
	w := time.Since(start)
	cn.ExecContext(ctx, fmt.Sprintf("/* conn_tag:hog */ SELECT n FROM q WHERE id = %d FOR UPDATE", i+1))
	time.Sleep(400 * time.Millisecond)
	cn.ExecContext(ctx, "COMMIT")
	cw.add("hog", max(w.Seconds()-trip, 0), time.Since(start).Seconds()-w.Seconds())
	time.Sleep(20 * time.Millisecond)
	return true
}

// victimOnce is one short statement of a victim. False on an error.
func victimOnce(t *testing.T, ctx context.Context, cn *sql.Conn, trip float64, cw *clientWaits) bool {
	start := time.Now()
	if _, err := cn.ExecContext(ctx, "/* conn_tag:victim */ SELECT SLEEP(0.05)"); err != nil {
		t.Error(err)
		return false
	}
	lat := time.Since(start).Seconds()
	cw.add("victim", max(lat-0.05-trip, 0), min(lat, 0.05))
	time.Sleep(30 * time.Millisecond)
	return true
}

// proxyWaitsAndHolds is every tag's wait and hold from c's two ProxySQL
// sources, as a string to compare.
func proxyWaitsAndHolds(c *Collector) string {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	var b strings.Builder
	for _, src := range []Source{SourceProxySQLEvents, SourceProxySQLProcesslist} {
		if sr := c.st.series[seriesKey{"px", src}]; sr != nil {
			for tag, e := range sr.tags {
				fmt.Fprintf(&b, "%s%s%v%v ", src, tag, e.total.Wait, e.total.Hold)
			}
		}
	}
	return b.String()
}

// logRowsByTag logs resp's rows, with the processlist's wait, and returns
// them by tag.
func logRowsByTag(t *testing.T, resp TopResponse) map[string]TopRow {
	t.Helper()
	row := map[string]TopRow{}
	for _, r := range resp.Rows {
		row[r.Tag] = r
		pl := r.Sources[SourceProxySQLProcesslist]
		t.Logf("%-8s wait %.2f s hold %.2f s (%s); processlist wait %.2f s", r.Tag, r.WaitSeconds, r.HoldSeconds, r.Source, func() float64 {
			if pl == nil {
				return 0
			}
			return pl.WaitSeconds
		}())
	}
	return row
}

// checkWaitsAsClientsMeasured: every tag that waited at least 1 s by
// the clients waited as long by the collector.
func checkWaitsAsClientsMeasured(t *testing.T, row map[string]TopRow, wait map[string]float64) {
	t.Helper()
	for tag, want := range wait {
		if want < 1 {
			continue
		}
		// 20 %, or half a second on a small figure: the clients' own
		// timing of each wait carries their scheduling delay, which under
		// -race beside other packages' tests reached 0.3 s of a 1.4 s wait
		// (CI: hog 1.40 s by the clients, 1.09 s from the events log; the
		// same test alone under -race passed).
		if got := row[tag].WaitSeconds; math.Abs(got-want) > max(0.2*want, 0.5) {
			t.Errorf("%s waited %.2f s by the clients, %.2f s by the collector (%+.1f%%)", tag, want, got, pct(got, want))
		}
	}
}

// checkWaitMetrics: /metrics has the waiting sessions and the victim's
// layer wait the API has.
func checkWaitMetrics(t *testing.T, c *Collector, row map[string]TopRow) {
	t.Helper()
	metrics, _ := gather(t, c)
	if _, ok := metrics[`holdtime_proxysql_waiting_sessions{target="px"}`]; !ok {
		t.Error("no holdtime_proxysql_waiting_sessions")
	}
	var layerWait float64
	for series, v := range metrics {
		if strings.HasPrefix(series, "holdtime_collector_layer_wait_seconds_total{") && strings.Contains(series, `conn_tag="victim"`) {
			layerWait += v
		}
	}
	if math.Abs(pct(layerWait, row["victim"].WaitSeconds)) > 1 {
		t.Errorf("holdtime_collector_layer_wait_seconds_total{victim} %.2f, the API %.2f", layerWait, row["victim"].WaitSeconds)
	}
}
