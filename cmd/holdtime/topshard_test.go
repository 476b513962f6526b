package main

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/internal/shard"
	"github.com/holdtime/holdtime/testenv"
)

// TestTopPrometheusOfShardsEqualsOneCollector: five real ProxySQLs split
// between two collectors by --shard's hash (MySQL exported by one, read
// join-only by the other, as collect --shard does), a real
// Prometheus scraping the two, and a third collector watching all five
// that Prometheus does not scrape. top --prometheus gives every tag's
// proxy and server figure equal, within sampling noise, to the third
// collector's own.
func TestTopPrometheusOfShardsEqualsOneCollector(t *testing.T) {
	testenv.RequireProxySQL(t)
	if !testenv.PrometheusAvailable() {
		t.Skip("prometheus is not installed: .ci/install-deps prometheus")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := testenv.NewDatabase(t)
	if _, err := d.Open(t).ExecContext(ctx, "CREATE TABLE carts (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	fleet := testenv.NewProxySQLFleet(t, testenv.FleetOptions{ProxySQL: testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name}, N: 5})
	server := collector.MySQLConfig{Name: "db", DSN: d.Target.Config("").FormatDSN(), Interval: 250 * time.Millisecond, LocksInterval: -1}
	whole := collector.Config{MySQL: []collector.MySQLConfig{server}}
	parts := make([]collector.Config, 2)
	joinOnly := server
	joinOnly.JoinOnly = true // as collect --shard gives a server to a shard that does not own it
	parts[0].MySQL = []collector.MySQLConfig{server}
	parts[1].MySQL = []collector.MySQLConfig{joinOnly}
	for i, px := range fleet {
		pc := collector.ProxySQLConfig{Name: fmt.Sprintf("px%d", i+1), DSN: px.AdminDSN(), EventsLog: px.EventsLog, DigestInterval: -1}
		whole.ProxySQL = append(whole.ProxySQL, pc)
		s := shard.Owner(pc.Name, len(parts))
		parts[s].ProxySQL = append(parts[s].ProxySQL, pc)
	}
	if len(parts[0].ProxySQL) == 0 || len(parts[1].ProxySQL) == 0 {
		t.Fatalf("the hash gives one shard all five ProxySQLs")
	}
	start := func(cfg collector.Config) (*collector.Client, string) {
		c, err := collector.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		srv := httptest.NewServer(c.Handler())
		t.Cleanup(srv.Close)
		cl, err := collector.NewClient(srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cl, strings.TrimPrefix(srv.URL, "http://")
	}
	one, _ := start(whole)
	var scraped []string
	for _, cfg := range parts {
		_, addr := start(cfg)
		scraped = append(scraped, addr)
	}
	prom, err := testenv.StartPrometheus(ctx, testenv.PrometheusOptions{Targets: scraped})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prom.Close() })

	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// A hog behind every ProxySQL, a lighter tag behind two of them.
	for i, px := range fleet {
		holdLoop(t, ctx, &wg, px.AppConfig(), "hog", 300*time.Millisecond)
		if i < 2 {
			holdLoop(t, ctx, &wg, px.AppConfig(), "quick", 20*time.Millisecond)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	defer wcancel()
	// Ten scrapes of every collector's hog series: the 10 s window is full.
	if _, err := prom.WaitForSeries(wctx, `count(count_over_time(holdtime_collector_layer_hold_seconds_total{conn_tag="hog",layer="proxy"}[11s]) >= 10) >= 5`); err != nil {
		t.Fatal(err)
	}
	p, err := newPromTop(prom.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := collector.TopQuery{Window: 10 * time.Second}
	// Sampling noise, as in TestTopPrometheusSumsCollectorsWithoutDoubleCounting:
	// 1 s buckets read now against rate() over the last 10 s of scrapes.
	const rel, abs = 0.2, 0.08
	fig := func(resp collector.TopResponse, tag string, l collector.Layer) float64 {
		for _, r := range resp.Rows {
			if r.Tag == tag && r.Layers[l] != nil {
				return r.Layers[l].Occupancy
			}
		}
		return 0
	}
	ok := false
	for attempt := 0; attempt < 3 && !ok; attempt++ {
		want, err := one.Top(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.top(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		ok = true
		for _, tag := range []string{"hog", "quick"} {
			for _, l := range []collector.Layer{collector.LayerProxy, collector.LayerServer} {
				w, g := fig(want, tag, l), fig(got, tag, l)
				t.Logf("attempt %d %s %s: one collector %.3f, top --prometheus over the shards %.3f", attempt, tag, l, w, g)
				if w == 0 || math.Abs(g-w) > rel*w+abs {
					ok = false
				}
			}
		}
	}
	if !ok {
		t.Errorf("three answers in a row off by more than %.0f%% + %.2f connections (logged above)", rel*100, abs)
	}
}
