package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// holdLoop runs transactions of tag that hold their connection for hold
// between two statements, until ctx ends.
func holdLoop(t *testing.T, ctx context.Context, wg *sync.WaitGroup, cfg *mysql.Config, tag string, hold time.Duration) {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := conntag.OpenDB(connector, conntag.WithoutMetrics())
	t.Cleanup(func() { db.Close() })
	wg.Go(func() {
		tctx := conntag.WithTag(ctx, tag)
		for ctx.Err() == nil {
			if err := holdOnce(tctx, db, hold); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", tag, err)
				return
			}
		}
	})
}

func holdOnce(ctx context.Context, db *sql.DB, hold time.Duration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT COUNT(*) FROM carts"); err != nil {
		return err
	}
	select {
	case <-time.After(hold):
	case <-ctx.Done():
	}
	return tx.Commit()
}

// TestTopPrometheusSumsCollectorsWithoutDoubleCounting: two collectors,
// each owning one of two real ProxySQLs (a shard each) and both watching
// the same MySQL server (an overlap), scraped by a real Prometheus. top
// --prometheus gives each tag's proxy figure as the sum of the two
// collectors' (two shards), and its server figure as one collector's (the
// same server counted once), within sampling noise of /api/v1/top.
func TestTopPrometheusSumsCollectorsWithoutDoubleCounting(t *testing.T) {
	testenv.RequireProxySQL(t)
	if !testenv.PrometheusAvailable() {
		t.Skip("prometheus is not installed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := testenv.NewDatabase(t)
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE carts (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	var pxs [2]*testenv.ProxySQL
	pass := fmt.Sprintf("console%d", time.Now().UnixNano()) // one backend: both proxies share the app's password
	for i := range pxs {
		px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name, AppPass: pass})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		pxs[i] = px
	}
	var urls [2]string
	var cols [2]*collector.Client
	for i, name := range []string{"px1", "px2"} {
		c, err := collector.New(collector.Config{
			ProxySQL: []collector.ProxySQLConfig{{Name: name, DSN: pxs[i].AdminDSN(), DigestInterval: -1}},
			MySQL:    []collector.MySQLConfig{{Name: "db", DSN: d.Target.Config("").FormatDSN(), Interval: 250 * time.Millisecond, LocksInterval: -1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		srv := httptest.NewServer(c.Handler())
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
		if cols[i], err = collector.NewClient(srv.URL, nil); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// The hog holds through both proxies; quick through the first only.
	holdLoop(t, ctx, &wg, pxs[0].AppConfig(), "hog", 300*time.Millisecond)
	holdLoop(t, ctx, &wg, pxs[1].AppConfig(), "hog", 300*time.Millisecond)
	holdLoop(t, ctx, &wg, pxs[0].AppConfig(), "quick", 20*time.Millisecond)

	var targets []string
	for _, u := range urls {
		targets = append(targets, strings.TrimPrefix(u, "http://"))
	}
	prom, err := testenv.StartPrometheus(ctx, testenv.PrometheusOptions{Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prom.Close() })
	// Two collectors' worth of a full 10 s window.
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if _, err := prom.WaitForSeries(wctx, `count(holdtime_collector_layer_hold_seconds_total{conn_tag="hog"}) >= 4`); err != nil {
		t.Fatal(err)
	}
	// The 10 s rate window fills with scrapes: every collector's hog series
	// has been scraped over 10 s or more (Prometheus scrapes every second).
	if _, err := prom.WaitForSeries(wctx, `count(count_over_time(holdtime_collector_layer_hold_seconds_total{conn_tag="hog"}[11s]) >= 10) >= 4`); err != nil {
		t.Fatal(err)
	}

	p, err := newPromTop(prom.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := collector.TopQuery{Window: 10 * time.Second}
	// Sampling noise: the collectors' windows are 1 s buckets read now,
	// Prometheus's rate() is over the scrapes (every second) of the last
	// 10 s: a hold of 0.3 s may be in one and not the other at either end.
	const rel, abs = 0.2, 0.08
	ok := false
	for attempt := 0; attempt < 3 && !ok; attempt++ {
		a, err := cols[0].Top(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.top(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		b, err := cols[1].Top(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		ok = true
		fig := func(resp collector.TopResponse, tag string, l collector.Layer) float64 {
			for _, r := range resp.Rows {
				if r.Tag == tag && r.Layers[l] != nil {
					return r.Layers[l].Occupancy
				}
			}
			return 0
		}
		for _, tag := range []string{"hog", "quick"} {
			proxyWant := fig(a, tag, collector.LayerProxy) + fig(b, tag, collector.LayerProxy)
			serverWant := (fig(a, tag, collector.LayerServer) + fig(b, tag, collector.LayerServer)) / 2
			proxyGot, serverGot := fig(got, tag, collector.LayerProxy), fig(got, tag, collector.LayerServer)
			t.Logf("attempt %d %s: proxy px1 %.3f + px2 %.3f = %.3f, prometheus %.3f; server %.3f and %.3f, prometheus %.3f",
				attempt, tag, fig(a, tag, collector.LayerProxy), fig(b, tag, collector.LayerProxy), proxyWant, proxyGot,
				fig(a, tag, collector.LayerServer), fig(b, tag, collector.LayerServer), serverGot)
			if math.Abs(proxyGot-proxyWant) > rel*proxyWant+abs || math.Abs(serverGot-serverWant) > rel*serverWant+abs {
				ok = false
			}
		}
		if len(got.Rows) == 0 || got.Rows[0].Tag != "hog" {
			t.Errorf("top --prometheus ranks %s first", rowsLine(got.Rows))
		}
	}
	if !ok {
		t.Errorf("three answers in a row off by more than %.0f%% + %.2f (logged above)", rel*100, abs)
	}

	// The drill-down's detail from a collector of a ProxySQL: the hog's
	// sessions in the latest sample, idle in its transactions.
	var detail collector.TagDetail
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if detail, err = cols[1].TagDetail(ctx, "hog"); err != nil {
			t.Fatal(err)
		}
		if len(detail.Sessions) > 0 && detail.Sessions[0].State == "idle" {
			break
		}
	}
	if len(detail.Sessions) == 0 || detail.Sessions[0].Target != "px2" || detail.Sessions[0].State != "idle" || detail.Sessions[0].SessionID == 0 ||
		len(detail.Transactions) == 0 || detail.Transactions[0].Target != "db" || len(detail.Unknown) == 0 {
		t.Errorf("px2's collector details the hog as %+v; want its idle session on px2 and its transaction on db", detail)
	}
	t.Logf("detail of hog: %+v", detail)

	// The command as a person runs it.
	bin := buildHoldtime(t)
	out, err := exec.Command(bin, "top", "--prometheus", prom.URL, "--window", "10s", "--once", "--json").Output()
	if err != nil {
		t.Fatalf("top --prometheus --once --json: %v", err)
	}
	var doc collector.TopResponse
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.Rows) == 0 || doc.Rows[0].Tag != "hog" {
		t.Errorf("top --prometheus --once --json: %v, %s", err, out)
	}
	text, err := exec.Command(bin, "top", "--prometheus", prom.URL, "--window", "10s", "--once", "--color", "never").Output()
	if err != nil {
		t.Fatalf("top --prometheus --once: %v", err)
	}
	for _, want := range []string{"px1/proxysql_processlist up", "px2/proxysql_processlist up", "db/mysql up", "hog"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("top --prometheus --once lacks %q:\n%s", want, text)
		}
	}
	t.Logf("top --prometheus --once:\n%s", text)

	// A Prometheus with no holdtime series, one that is down, and an
	// address that is not Prometheus: each says so.
	empty, err := testenv.StartPrometheus(ctx, testenv.PrometheusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { empty.Close() })
	downURL := empty.URL
	for _, c := range []struct{ url, want string }{
		{empty.URL, "has no holdtime series"},
		{urls[0], "not Prometheus's query API"},
	} {
		_, stderr, _ := runCmd(t, bin, "top", "--prometheus", c.url, "--once")
		if !strings.Contains(stderr, c.want) {
			t.Errorf("top --prometheus %s: %q; want %q", c.url, stderr, c.want)
		}
	}
	empty.Close()
	if _, stderr, _ := runCmd(t, bin, "top", "--prometheus", downURL, "--once"); !strings.Contains(stderr, "cannot reach Prometheus") {
		t.Errorf("top --prometheus (down): %q", stderr)
	}
}

func runCmd(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut strings.Builder
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// TestPrometheusURLShownWithoutItsQuery: a Prometheus behind ?token= is
// named in messages by scheme, host and path only.
func TestPrometheusURLShownWithoutItsQuery(t *testing.T) {
	p, err := newPromTop("https://ops:pw@prom:9090/api?token=t0ken-s3cret", http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	if p.shown != "https://prom:9090/api" {
		t.Errorf("shown as %q", p.shown)
	}
	tc := &topCmd{window: "10s", layer: "max", sortKey: "occupancy", interval: time.Second, timeout: time.Second,
		color: "never", prometheus: "ftp://prom/?token=t0ken-s3cret"}
	if err := tc.validate(); err == nil || strings.Contains(err.Error(), "t0ken-s3cret") {
		t.Errorf("a bad --prometheus: %v", err)
	}
}
