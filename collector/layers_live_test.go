package collector

import (
	"context"
	"database/sql"
	"math"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/testenv"
)

// TestLayersEndToEnd is the definition of done: a real MariaDB, the
// collector in-process, a conntag app sending its spans through conntag's
// OTLP exporter path (as the demo does). Tag report_export holds a db.Conn
// idle outside a transaction, checkout_txn holds a transaction open idle,
// browse runs short statements. report_export ranks first on the app layer
// and by default; each layer's figure per tag is within 15 % of what the
// client measured for that layer; no figure is counted twice in the API or
// in /metrics. Through ProxySQL the proxy layer is checked too.
func TestLayersEndToEnd(t *testing.T) {
	skipTimingUnderRace(t)
	t.Run("direct", func(t *testing.T) { layersEndToEnd(t, false) })
	t.Run("proxysql", func(t *testing.T) {
		testenv.RequireProxySQL(t)
		layersEndToEnd(t, true)
	})
}

// clientLayers is what the client measured per layer and tag.
type clientLayers map[Layer]map[string]float64

func (c clientLayers) add(l Layer, tag string, d time.Duration) {
	if c[l] == nil {
		c[l] = map[string]float64{}
	}
	c[l][tag] += d.Seconds()
}

func layersEndToEnd(t *testing.T, viaProxySQL bool) {
	d := testenv.NewDatabase(t)
	ctx := context.Background()
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE carts (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	d.Open(t).ExecContext(ctx, "INSERT INTO carts VALUES (1, 0)")
	c, polls, spansURL, appCfg := startLayersCollector(t, d, viaProxySQL)

	// The app, as the demo builds it.
	tp := spansTo(t, spansURL, appCfg.Addr, 500*time.Millisecond)
	db := openConntagDB(t, appCfg, tp)
	db.SetMaxOpenConns(10)
	db.SetMaxIdleConns(10)
	client, browseStatements := runLayersWorkload(t, db)
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if !viaProxySQL {
		delete(client, LayerProxy)
	}

	resp := waitLayersSettled(t, c, polls, viaProxySQL)
	row := logLayerRows(t, resp)
	checkLayerRankings(t, c, resp)
	checkLayersAsClientMeasured(t, c, row, client)
	// Every statement of browse counted once at the server and in the app.
	for _, l := range []Layer{LayerApp, LayerServer} {
		if lf := row["browse"].Layers[l]; lf == nil || lf.Statements != float64(browseStatements) {
			t.Errorf("browse %s statements %+v; the client ran %d", l, lf, browseStatements)
		}
	}
	for _, tag := range []string{UnknownTag, UntaggedTag} {
		if r, ok := row[tag]; ok {
			t.Logf("%s: %+v", tag, r.Layers)
		}
	}
}

// startLayersCollector runs, until the test ends, a collector of d's
// server every 250 ms and of spans over OTLP (target app), and with
// viaProxySQL of a ProxySQL in front of d (warmed); it returns once each
// source has polled, with the URL to send spans to and the config the
// app connects with (to ProxySQL or d).
func startLayersCollector(t *testing.T, d *testenv.Database, viaProxySQL bool) (*Collector, *pollCount, string, *mysql.Config) {
	t.Helper()
	cfg := Config{
		MySQL: []MySQLConfig{{Name: "db", DSN: d.Target.Config("").FormatDSN(), Interval: 250 * time.Millisecond}},
		OTLP:  OTLPConfig{Enabled: true, Target: "app"},
	}
	appCfg := d.Config()
	if viaProxySQL {
		px := proxySQLFor(t, d)
		appCfg = px.AppConfig()
		warmProxySQL(t, px)
		cfg.ProxySQL = []ProxySQLConfig{{Name: "px", DSN: px.AdminDSN(), EventsLog: px.EventsLog, ClientAddress: px.AppAddr,
			ProcesslistInterval: 100 * time.Millisecond, TagGrace: 2 * time.Second}}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	polls := countPolls(c)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	runUntilCleanup(t, c)
	polls.wait(t, "db", SourceMySQL, 1)
	if viaProxySQL {
		polls.wait(t, "px", SourceProxySQLProcesslist, 1)
	}
	return c, polls, srv.URL + "/v1/traces", appCfg
}

// layersClientLog is what the layers workload's clients measured.
type layersClientLog struct {
	mu         sync.Mutex
	client     clientLayers
	statements map[string]int
}

// record adds d to tag's figure of each of layers.
func (r *layersClientLog) record(tag string, d time.Duration, layers ...Layer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range layers {
		r.client.add(l, tag, d)
	}
}

// runLayersWorkload runs report_export, checkout_txn and browse through
// db and returns what their clients measured per layer, and how many
// statements browse ran.
func runLayersWorkload(t *testing.T, db *sql.DB) (clientLayers, int) {
	t.Helper()
	r := &layersClientLog{client: clientLayers{}, statements: map[string]int{}}
	clients := &taggedClients{t: t}
	xDone := make(chan struct{})
	clients.run("report_export", func(ctx context.Context) error {
		defer close(xDone)
		return exportReports(ctx, db, r)
	})
	clients.run("checkout_txn", func(ctx context.Context) error { return checkoutTransactions(ctx, db, r) })
	clients.run("browse", func(ctx context.Context) error { return browseUntil(ctx, db, r, xDone) })
	clients.wait()
	return r.client, r.statements["browse"]
}

// exportReports is report_export: it borrows a connection, runs one
// statement, keeps the connection 1.5 s doing nothing, outside any
// transaction, three times. Only the app pays: ProxySQL multiplexes, the
// server sees an idle session.
func exportReports(ctx context.Context, db *sql.DB, r *layersClientLog) error {
	for range 3 {
		start := time.Now()
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		stmt := time.Now()
		if _, err := conn.ExecContext(ctx, "SELECT SLEEP(0.2)"); err != nil {
			return err
		}
		r.record("report_export", time.Since(stmt), LayerProxy, LayerServer)
		time.Sleep(1500 * time.Millisecond) // the workload: a slow export, the connection kept
		conn.Close()
		r.record("report_export", time.Since(start), LayerApp)
	}
	return nil
}

// checkoutTransactions is checkout_txn: three transactions held open 1 s
// between their statements: every layer holds them from BEGIN to COMMIT.
func checkoutTransactions(ctx context.Context, db *sql.DB, r *layersClientLog) error {
	for range 3 {
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "SELECT n FROM carts WHERE id = 1 FOR UPDATE"); err != nil {
			return err
		}
		time.Sleep(time.Second) // the workload: waiting on a payment provider inside the transaction
		if _, err := tx.ExecContext(ctx, "UPDATE carts SET n = n + 1 WHERE id = 1"); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		r.record("checkout_txn", time.Since(start), LayerApp, LayerProxy, LayerServer)
	}
	return nil
}

// browseUntil is browse until done closes: short statements, a
// connection borrowed for each. (Long enough that the client's round
// trip through ProxySQL, a few ms, is small next to the time the server
// works.)
func browseUntil(ctx context.Context, db *sql.DB, r *layersClientLog, done <-chan struct{}) error {
	for {
		select {
		case <-done:
			return nil
		default:
		}
		start := time.Now()
		if _, err := db.ExecContext(ctx, "SELECT SLEEP(0.2)"); err != nil {
			return err
		}
		r.record("browse", time.Since(start), LayerApp, LayerProxy, LayerServer)
		r.mu.Lock()
		r.statements["browse"]++
		r.mu.Unlock()
		time.Sleep(200 * time.Millisecond) // the workload: between page views
	}
}

// waitLayersSettled waits until the collector has caught up: two MySQL
// polls after the workload, and figures that no longer change; it
// returns the last top report.
func waitLayersSettled(t *testing.T, c *Collector, polls *pollCount, viaProxySQL bool) TopResponse {
	t.Helper()
	polls.wait(t, "db", SourceMySQL, 2)
	var resp TopResponse
	var err error
	prev := ""
	for i := 0; i < 40; i++ {
		if resp, err = c.TopReport(TopQuery{Window: 5 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, r := range resp.Rows {
			for _, l := range Layers {
				if lf := r.Layers[l]; lf != nil {
					b.WriteString(r.Tag + string(l) + ":" + time.Duration(lf.HoldSeconds*1e9).String() + " ")
				}
			}
		}
		if b.String() == prev {
			break
		}
		prev = b.String()
		polls.wait(t, "db", SourceMySQL, 1)
		if viaProxySQL {
			polls.wait(t, "px", SourceProxySQLProcesslist, 5)
		}
	}
	return resp
}

// logLayerRows logs each row's layer figures and returns the rows by tag.
func logLayerRows(t *testing.T, resp TopResponse) map[string]TopRow {
	t.Helper()
	row := map[string]TopRow{}
	for _, r := range resp.Rows {
		row[r.Tag] = r
		var parts []string
		for _, l := range Layers {
			if lf := r.Layers[l]; lf != nil {
				parts = append(parts, string(l)+" "+strings.TrimSpace(time.Duration(lf.HoldSeconds*1e9).Round(time.Millisecond).String())+
					" ("+string(lf.Source)+")")
			}
		}
		t.Logf("%-14s %s", r.Tag, strings.Join(parts, ", "))
	}
	return row
}

// checkLayerRankings: report_export ranks first by default (by its app
// layer) and on the app layer; checkout_txn first on the server layer.
func checkLayerRankings(t *testing.T, c *Collector, resp TopResponse) {
	t.Helper()
	if len(resp.Rows) == 0 || resp.Rows[0].Tag != "report_export" || resp.Rows[0].Layer != LayerApp {
		t.Errorf("default ranking starts with %+v; want report_export by its app layer", firstTag(resp.Rows))
	}
	appRank, _ := c.TopReport(TopQuery{Window: 5 * time.Minute, Layer: string(LayerApp)})
	if len(appRank.Rows) == 0 || appRank.Rows[0].Tag != "report_export" {
		t.Errorf("app ranking starts with %s; want report_export", firstTag(appRank.Rows))
	}
	serverRank, _ := c.TopReport(TopQuery{Window: 5 * time.Minute, Layer: string(LayerServer)})
	if len(serverRank.Rows) == 0 || serverRank.Rows[0].Tag != "checkout_txn" {
		t.Errorf("server ranking starts with %s; want checkout_txn (report_export's connection is idle at the server)", firstTag(serverRank.Rows))
	}
}

// checkLayersAsClientMeasured: each layer's figure per tag, in the API
// and in /metrics, is within 15 % of what the client measured, and is its
// headline source's.
func checkLayersAsClientMeasured(t *testing.T, c *Collector, row map[string]TopRow, client clientLayers) {
	t.Helper()
	metrics, _ := gather(t, c)
	for _, l := range Layers {
		for tag, want := range client[l] {
			lf := row[tag].Layers[l]
			if lf == nil {
				t.Errorf("%s: no %s layer figure; the client measured %.3f s", tag, l, want)
				continue
			}
			t.Logf("%-14s %-6s client %.3f s  collector %.3f s (%+.1f%%) from %s", tag, l, want, lf.HoldSeconds, pct(lf.HoldSeconds, want), lf.Source)
			if math.Abs(pct(lf.HoldSeconds, want)) > 15 {
				t.Errorf("%s %s layer: %.3f s, the client measured %.3f s: more than 15%% off", tag, l, lf.HoldSeconds, want)
			}
			// Counted once: the layer is its headline source's figure, in
			// the API and in /metrics, whatever the other sources say.
			if sf := row[tag].Sources[lf.Source]; sf == nil || sf.HoldSeconds != lf.HoldSeconds {
				t.Errorf("%s %s layer %.3f s is not its headline source's %+v", tag, l, lf.HoldSeconds, sf)
			}
			var fromMetrics float64
			for series, v := range metrics {
				if strings.HasPrefix(series, "holdtime_collector_layer_hold_seconds_total{") &&
					strings.Contains(series, `conn_tag="`+tag+`"`) && strings.Contains(series, `layer="`+string(l)+`"`) {
					fromMetrics += v
				}
			}
			if math.Abs(pct(fromMetrics, want)) > 15 {
				t.Errorf("%s %s: holdtime_collector_layer_hold_seconds_total says %.3f s, the client %.3f s", tag, l, fromMetrics, want)
			}
		}
	}
}

// warmProxySQL makes ProxySQL open the backend connections the workload
// will use, so that no statement of it waits for one: a client's round
// trip is then close to the time the server works.
func warmProxySQL(t *testing.T, px *testenv.ProxySQL) {
	t.Helper()
	warmBackends(t, px, 6, "SELECT SLEEP(0.1)")
}

// pollCount counts the successful polls of every source.
type pollCount struct {
	mu     sync.Mutex
	n      map[seriesKey]int
	at     map[seriesKey][]time.Time // when each successful poll ended
	change chan struct{}             // closed and replaced at every poll
}

func countPolls(c *Collector) *pollCount {
	p := &pollCount{n: map[seriesKey]int{}, at: map[seriesKey][]time.Time{}, change: make(chan struct{})}
	c.onPoll = func(target string, src Source, err error) {
		if err != nil {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.n[seriesKey{target, src}]++
		p.at[seriesKey{target, src}] = append(p.at[seriesKey{target, src}], time.Now())
		close(p.change)
		p.change = make(chan struct{})
	}
	return p
}

// count is the number of successful polls of (target, src) so far.
func (p *pollCount) count(target string, src Source) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[seriesKey{target, src}]
}

// gaps are the times between the successful polls of (target, src) from
// the from-th on (a count): the real sample intervals.
func (p *pollCount) gaps(target string, src Source, from int) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.at[seriesKey{target, src}]
	var out []time.Duration
	for i := max(from, 1); i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]))
	}
	return out
}

// wait waits for n more successful polls of (target, src) than have
// finished now. The first of them may have been in flight at the call and
// have read before it: to see what happened before the call, wait for one
// more than the reads needed.
func (p *pollCount) wait(t *testing.T, target string, src Source, n int) {
	t.Helper()
	p.mu.Lock()
	want := p.n[seriesKey{target, src}] + n
	p.mu.Unlock()
	timeout := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		got, change := p.n[seriesKey{target, src}], p.change
		p.mu.Unlock()
		if got >= want {
			return
		}
		select {
		case <-change:
		case <-timeout:
			t.Fatalf("no %d polls of %s/%s within 30 s", n, target, src)
		}
	}
}

func firstTag(rows []TopRow) string {
	if len(rows) == 0 {
		return "(no row)"
	}
	return rows[0].Tag + " by " + string(rows[0].Layer)
}
