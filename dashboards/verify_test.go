package dashboards_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/dashboards"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// requireTool skips a test without a binary, or fails it under CI=true.
func requireTool(t *testing.T, available bool, msg string) {
	t.Helper()
	if available {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// needsProxySQL reports whether a query can only return data with a ProxySQL
// in front of the server: every query of the ProxySQL dashboard, and the
// proxy layer's elsewhere.
func needsProxySQL(q dashboards.Query) bool {
	return q.Dashboard == "holdtime-proxysql" || strings.Contains(q.Expr, `layer="proxy"`)
}

// TestEveryPanelReturnsData runs a short workload through conntag and the
// reservation engine against the test server (through ProxySQL when one is
// installed), with the collector polling the server (and ProxySQL), has a
// real Prometheus scrape both, and evaluates every panel's every query with
// the variables at "All": each must return at least one series. It also
// lints every /metrics with promtool and loads the alert rules.
func TestEveryPanelReturnsData(t *testing.T) {
	requireTool(t, testenv.PrometheusAvailable(), "prometheus is not on PATH: install it with `sudo apt-get install -y prometheus` (or .ci/install-deps prometheus)")
	requireTool(t, testenv.Available(), "no MySQL-compatible server: install mariadb-server or set "+testenv.DSNEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	database := testenv.NewDatabase(t)
	target := database.Target
	appConfig := database.Config()
	var proxy *testenv.ProxySQL
	if testenv.ProxySQLAvailable() {
		var err error
		proxy, err = testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: target, Schema: database.Name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		appConfig = proxy.AppConfig()
		appConfig.DBName = database.Name
	} else {
		if os.Getenv(testenv.RequireProxyEnv) == "1" {
			t.Fatal("proxysql is not on PATH and " + testenv.RequireProxyEnv + "=1: the ProxySQL panels must be verified live")
		}
		t.Log("proxysql is not on PATH: the ProxySQL dashboard's panels are skipped; the app talks to the server directly")
	}

	// The collector, on a registry of its own, polling the server (and
	// ProxySQL) often so that a short test sees every figure.
	colReg := prometheus.NewRegistry()
	cfg := collector.Config{
		Registerer: colReg,
		MySQL:      []collector.MySQLConfig{{Name: "mariadb", DSN: target.Config("").FormatDSN(), Interval: 200 * time.Millisecond}},
	}
	if proxy != nil {
		cfg.ProxySQL = []collector.ProxySQLConfig{{
			Name: "proxysql", DSN: proxy.AdminDSN(), EventsLog: proxy.EventsLog,
			ProcesslistInterval: 100 * time.Millisecond, DigestInterval: time.Second, PoolInterval: 500 * time.Millisecond,
			TagGrace: time.Second,
		}}
	}
	col, err := collector.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	colCtx, stopCollector := context.WithCancel(ctx)
	colDone := make(chan error, 1)
	go func() { colDone <- col.Run(colCtx) }()
	t.Cleanup(func() { stopCollector(); <-colDone })
	colServer := httptest.NewServer(col.Handler())
	t.Cleanup(colServer.Close)

	// The app: conntag and the reservation engine exporting through the
	// OpenTelemetry Prometheus exporter on their own registry.
	appReg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(appReg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	appServer := httptest.NewServer(promhttp.HandlerFor(appReg, promhttp.HandlerOpts{}))
	t.Cleanup(appServer.Close)
	connector, err := mysql.NewConnector(appConfig)
	if err != nil {
		t.Fatal(err)
	}
	db := conntag.OpenDB(connector, conntag.WithMeterProvider(mp), conntag.WithPoolName("app"),
		conntag.WithLongHoldThreshold(20*time.Millisecond, nil))
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(6)

	rules, err := filepath.Abs("../deploy/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	prom, err := testenv.StartPrometheus(ctx, testenv.PrometheusOptions{
		Targets:   []string{hostPort(t, appServer.URL), hostPort(t, colServer.URL)},
		RuleFiles: []string{rules},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prom.Close() })

	stopWorkload := workload(ctx, t, db, mp)
	t.Cleanup(stopWorkload)

	queries, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	var skipped []string // panel titles
	type result struct {
		q   dashboards.Query
		err error
	}
	results := make(chan result)
	sem := make(chan struct{}, 6)
	var wg sync.WaitGroup
	for _, q := range queries {
		if needsMigration(q) {
			continue // verified with a migration running: TestMigrationPanelsReturnData
		}
		if needsLocks(q) {
			continue // verified on a server of its own: TestLockPanelsReturnData
		}
		if proxy == nil && needsProxySQL(q) {
			if len(skipped) == 0 || skipped[len(skipped)-1] != q.Panel {
				skipped = append(skipped, q.Panel)
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			qctx, cancel := context.WithTimeout(ctx, 45*time.Second)
			defer cancel()
			_, err := prom.WaitForSeries(qctx, dashboards.Substitute(q.Expr, "1m"))
			results <- result{q, err}
		}()
	}
	go func() { wg.Wait(); close(results) }()
	verified := 0
	for r := range results {
		if r.err != nil {
			t.Errorf("dashboard %s, panel %q, query %s returns no data: %s\n\t%v", r.q.Dashboard, r.q.Panel, r.q.RefID,
				dashboards.Substitute(r.q.Expr, "1m"), r.err)
			continue
		}
		verified++
	}
	t.Logf("%d queries returned data", verified)
	if len(skipped) > 0 {
		t.Logf("skipped without ProxySQL (proxysql not on PATH), %d panels: %s", len(skipped), strings.Join(skipped, "; "))
	}

	vars, err := dashboards.Variables()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		if proxy == nil && v.Dashboard == "holdtime-proxysql" {
			continue
		}
		selector, label, err := dashboards.VariableQuery(v.Query)
		if err != nil {
			t.Error(err)
			continue
		}
		promql := "count by (" + label + ") (" + dashboards.Substitute(selector, "1m") + ")"
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := prom.WaitForSeries(qctx, promql); err != nil {
			t.Errorf("dashboard %s: variable %s lists no values: %s: %v", v.Dashboard, v.Name, promql, err)
		}
		cancel()
	}

	// The alert rules load and evaluate in a real Prometheus.
	if _, err := prom.WaitForSeries(ctx, `count(ALERTS) or vector(0)`); err != nil {
		t.Error(err)
	}
	checkRulesLoaded(ctx, t, prom.URL)

	for name, u := range map[string]string{"app (conntag, reservation)": appServer.URL, "collector": colServer.URL + "/metrics"} {
		lintMetrics(t, name, u)
	}

	// The per-layer totals the dashboards compute equal the collector's
	// own, once the workload has stopped and both have caught up.
	stopWorkload()
	checkLayerTotals(ctx, t, col, prom, proxy != nil)
}

// layerTotal is a rate() of the layer hold a dashboard aggregates: the same
// aggregation of the counter itself gives the layer's total hold per tag.
var layerRate = regexp.MustCompile(`rate\((holdtime_collector_layer_hold_seconds_total\{[^}]*\})\[[^\]]*\]\)`)

// checkLayerTotals evaluates, in Prometheus, every dashboard query that
// aggregates the proxy or server layer's hold by tag, with the counter in
// place of its rate, and compares each tag's total with the collector's
// own figure for that layer (its /api/v1/top over the whole run): within
// 5 %. A query that added the sources of a layer would be twice as high or
// more.
func checkLayerTotals(ctx context.Context, t *testing.T, col *collector.Collector, prom *testenv.Prometheus, withProxy bool) {
	t.Helper()
	own := func() map[collector.Layer]map[string]float64 {
		r, err := col.TopReport(collector.TopQuery{Window: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		out := map[collector.Layer]map[string]float64{}
		for _, row := range r.Rows {
			for l, lf := range row.Layers {
				if out[l] == nil {
					out[l] = map[string]float64{}
				}
				out[l][row.Tag] = lf.HoldSeconds
			}
		}
		return out
	}
	// Quiet: the collector's figures stop moving (the MySQL source credits
	// what it saw at its next poll, the events log is read every 200 ms).
	prev := own()
	for range 20 {
		time.Sleep(time.Second) // the collector's polls: nothing to wait on from outside
		cur := own()
		if fmt.Sprint(cur) == fmt.Sprint(prev) {
			break
		}
		prev = cur
	}
	queries, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, q := range queries {
		var l collector.Layer
		switch {
		case strings.Contains(q.Expr, `layer="server"`):
			l = collector.LayerServer
		case strings.Contains(q.Expr, `layer="proxy"`) && withProxy:
			l = collector.LayerProxy
		default:
			continue
		}
		if !layerRate.MatchString(q.Expr) || !strings.Contains(q.Expr, "sum by (conn_tag)") || strings.Contains(q.Expr, " / ") {
			continue
		}
		promql := dashboards.Substitute(layerRate.ReplaceAllString(q.Expr, "$1"), "1m")
		want := prev[l]
		var got map[string]float64
		var off []string
		for range 30 { // Prometheus scrapes every second
			samples, err := prom.Query(ctx, promql)
			if err != nil {
				t.Fatal(err)
			}
			got = map[string]float64{}
			for _, s := range samples {
				got[s.Metric["conn_tag"]] = s.Value
			}
			off = off[:0]
			for tag, w := range want {
				if g := got[tag]; w > 0.05 && math.Abs(g-w) > 0.05*w {
					off = append(off, fmt.Sprintf("%s: dashboard %.3f s, collector %.3f s", tag, g, w))
				}
			}
			if len(off) == 0 {
				break
			}
			time.Sleep(time.Second) // the next scrape
		}
		if len(off) > 0 {
			t.Errorf("dashboard %s, panel %q: the %s layer's totals differ from the collector's by more than 5%%: %s\n\t%s",
				q.Dashboard, q.Panel, l, strings.Join(off, "; "), promql)
		}
		checked++
	}
	if checked < 2 {
		t.Errorf("%d dashboard queries of a layer's hold checked against the collector", checked)
	}
	t.Logf("%d dashboard layer queries equal the collector's per-layer totals (within 5%%): %v", checked, prev)
}

// checkRulesLoaded asks Prometheus for its rule groups: the deploy rules
// must be loaded and healthy (a rule that fails to evaluate is unhealthy).
func checkRulesLoaded(ctx context.Context, t *testing.T, base string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/rules", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	s := string(body)
	if !strings.Contains(s, "HoldtimeLongHolds") || !strings.Contains(s, "HoldtimeSourceDown") {
		t.Errorf("alert rules not loaded: %.500s", s)
	}
	if strings.Contains(s, `"health":"err"`) {
		t.Errorf("an alert rule fails to evaluate: %s", s)
	}
}

// lintMetrics runs `promtool check metrics` over what a /metrics serves.
func lintMetrics(t *testing.T, name, u string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		requireTool(t, false, "promtool is not on PATH: install it with `sudo apt-get install -y prometheus`")
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	// Findings accepted on purpose, with the reason.
	knownLint := map[string]string{
		`db_client_connection_count non-histogram and non-summary metrics should not have "_count" suffix`: "" +
			"the OpenTelemetry semantic-convention name db.client.connection.count as the OpenTelemetry Prometheus " +
			"exporter writes it; renaming it would break dashboards built on the convention",
	}
	var problems []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if why, ok := knownLint[strings.TrimSpace(line)]; ok {
			t.Logf("promtool check metrics on the %s /metrics: %s (accepted: %s)", name, line, why)
			continue
		}
		problems = append(problems, line)
	}
	if len(problems) > 0 || !errors.As(err, new(*exec.ExitError)) {
		t.Errorf("promtool check metrics on the %s /metrics: %v\n%s", name, err, strings.Join(problems, "\n"))
	}
}

func hostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// workload makes every figure the dashboards show happen at least once:
// reserves, claims, releases, expiries, ledger refusals, contention retries,
// inline and background refills, long holds, pool waits, a failed
// statement, and a transaction holding a row lock another session waits on.
// The lock stays until the returned function is called, so the gauges of
// open transactions and lock waits are there when the queries run; it also
// stops the engine's background work, so that the figures come to rest.
func workload(ctx context.Context, t *testing.T, db *sql.DB, mp *sdkmetric.MeterProvider) (stop func()) {
	t.Helper()
	engine, err := reservation.New(db, reservation.Config{
		// Generous: under load the buyers below contend with the hogs for a
		// pool of 6; only the "contended" reserve is meant to run out.
		MeterProvider: mp, RetryBudget: 2 * time.Second,
		RefillInterval: 100 * time.Millisecond, ExpiryInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { engine.Run(runCtx); close(runDone) }()
	stopEngine := sync.OnceFunc(func() { stopRun(); <-runDone })
	t.Cleanup(stopEngine)

	hot := reservation.ItemKey{ShopID: 1, ItemID: 1, GroupID: 1}
	scarce := reservation.ItemKey{ShopID: 1, ItemID: 2, GroupID: 1}
	locked := reservation.ItemKey{ShopID: 1, ItemID: 3, GroupID: 1}
	for _, s := range []reservation.StockParams{{ItemKey: hot, Quantity: 500}, {ItemKey: scarce, Quantity: 1}, {ItemKey: locked, Quantity: 2}} {
		if err := engine.Receive(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	line := func(k reservation.ItemKey, n int64) []reservation.Line {
		return []reservation.Line{{ItemID: k.ItemID, Quantity: n, GroupIDs: []uint64{k.GroupID}}}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Reserves, claims and releases from more buyers at once than the pool
	// has connections, next to a hog that holds its connection.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for b := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				id := fmt.Sprintf("b%d-%d", b, i)
				if _, err := engine.Reserve(ctx, reservation.ReserveParams{ShopID: 1, ReservationID: id, Lines: line(hot, 1)}); err != nil {
					errs <- err
					return
				}
				op := engine.Claim
				if i%3 == 0 {
					op = engine.Release
				}
				if err := op(ctx, 1, id); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hogCtx := conntag.WithTag(ctx, "checkout_tax_quote")
			conn, err := db.Conn(hogCtx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			if _, err := conn.ExecContext(hogCtx, "SELECT 1"); err != nil {
				errs <- err
				return
			}
			time.Sleep(60 * time.Millisecond) // the slow downstream call, connection held: a long hold
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// The ledger refuses what it does not have (oversell guard).
	_, err = engine.Reserve(ctx, reservation.ReserveParams{ShopID: 1, ReservationID: "too-many", Lines: line(scarce, 2)})
	if !errors.Is(err, reservation.ErrInsufficientStock) {
		t.Fatalf("reserve past stock: %v, want ErrInsufficientStock", err)
	}
	// A hold that expires before it is claimed; Run's sweeper expires it.
	_, err = engine.Reserve(ctx, reservation.ReserveParams{ShopID: 1, ReservationID: "abandoned", Lines: line(scarce, 1), TTL: time.Millisecond})
	must(err)
	// Contention: every pooled unit of an item locked by an in-flight
	// transaction and no ledger-only stock to refill from, so the reserve
	// retries until its budget runs out.
	_, err = engine.Refill(ctx, locked)
	must(err)
	auditCtx := conntag.WithTag(ctx, "inventory_audit")
	unitLocks, err := db.BeginTx(auditCtx, nil)
	must(err)
	_, err = unitLocks.ExecContext(auditCtx, "SELECT id FROM inventory_reservation_units WHERE shop_id = 1 AND inventory_item_id = 3 FOR UPDATE")
	must(err)
	_, err = engine.Reserve(ctx, reservation.ReserveParams{ShopID: 1, ReservationID: "contended", Lines: line(locked, 1)})
	if !errors.Is(err, reservation.ErrRetryable) {
		t.Fatalf("reserve of locked units: %v, want ErrRetryable", err)
	}
	must(unitLocks.Rollback())
	// A failed statement.
	if _, err := db.ExecContext(conntag.WithTag(ctx, "admin_report"), "SELECT * FROM no_such_table"); err == nil {
		t.Fatal("query of a missing table succeeded")
	}
	// A transaction that keeps a row lock, on a table of its own so the
	// engine's background work never queues behind it, and a session of
	// another tag waiting for that lock.
	_, err = db.ExecContext(ctx, "CREATE TABLE checkout_orders (id INT PRIMARY KEY, n INT NOT NULL)")
	must(err)
	_, err = db.ExecContext(ctx, "INSERT INTO checkout_orders VALUES (1, 0)")
	must(err)
	blockerCtx := conntag.WithTag(ctx, "checkout_completion")
	blocker, err := db.BeginTx(blockerCtx, nil)
	must(err)
	_, err = blocker.ExecContext(blockerCtx, "UPDATE checkout_orders SET n = n + 1 WHERE id = 1")
	must(err)
	waiterCtx := conntag.WithTag(ctx, "order_sync")
	waiter, err := db.Conn(waiterCtx)
	must(err)
	_, err = waiter.ExecContext(waiterCtx, "SET SESSION innodb_lock_wait_timeout = 300")
	must(err)
	waiting := make(chan struct{})
	go func() {
		defer close(waiting)
		waiter.ExecContext(waiterCtx, "UPDATE checkout_orders SET n = n + 1 WHERE id = 1")
	}()
	return sync.OnceFunc(func() {
		blocker.Rollback()
		<-waiting
		waiter.Close()
		stopEngine()
	})
}
