package dashboards_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/internal/shard"
	"github.com/holdtime/holdtime/testenv"
)

// TestShardedCollectorsAddUpToOne: two collectors splitting five real
// ProxySQLs with --shard's hash (the MySQL server in the first only), a
// real Prometheus scraping both, and a third collector watching all five
// (not scraped). Every dashboard query of a layer's hold per tag, summed by
// Prometheus over the shards, equals the third collector's own figure: no
// shard counted twice, none lost.
func TestShardedCollectorsAddUpToOne(t *testing.T) {
	requireTool(t, testenv.PrometheusAvailable(), "prometheus is not on PATH: install it with `sudo apt-get install -y prometheus` (or .ci/install-deps prometheus)")
	requireTool(t, testenv.Available(), "no MySQL-compatible server: install mariadb-server or set "+testenv.DSNEnv)
	if !testenv.ProxySQLAvailable() {
		if os.Getenv(testenv.RequireProxyEnv) == "1" {
			t.Fatal("proxysql is not on PATH and " + testenv.RequireProxyEnv + "=1")
		}
		t.Skip("proxysql is not on PATH: install ProxySQL 2.7 (https://proxysql.com/documentation/installing-proxysql/) to split a fleet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	database := testenv.NewDatabase(t)
	fleet := testenv.NewProxySQLFleet(t, testenv.FleetOptions{ProxySQL: testenv.ProxySQLOptions{Backend: database.Target, Schema: database.Name}, N: 5})

	const shards = 2
	server := collector.MySQLConfig{Name: "mariadb", DSN: database.Target.Config("").FormatDSN(), Interval: 200 * time.Millisecond}
	all := collector.Config{MySQL: []collector.MySQLConfig{server}}
	parts := make([]collector.Config, shards)
	joinOnly := server
	joinOnly.JoinOnly = true // as collect --shard gives a server to a shard that does not own it
	parts[0].MySQL = []collector.MySQLConfig{server}
	parts[1].MySQL = []collector.MySQLConfig{joinOnly}
	owned := make([]int, shards)
	for i, px := range fleet {
		pc := collector.ProxySQLConfig{Name: fmt.Sprintf("px%d", i+1), DSN: px.AdminDSN(), EventsLog: px.EventsLog,
			ProcesslistInterval: 100 * time.Millisecond, DigestInterval: -1, PoolInterval: time.Second, TagGrace: time.Second}
		all.ProxySQL = append(all.ProxySQL, pc)
		for s := range shards {
			if (shard.Shard{Index: s, Count: shards}).Owns(pc.Name) {
				parts[s].ProxySQL = append(parts[s].ProxySQL, pc)
				owned[s]++
			}
		}
	}
	if owned[0] == 0 || owned[1] == 0 || owned[0]+owned[1] != len(fleet) {
		t.Fatalf("the shards own %v of %d ProxySQLs; want a split with something in each", owned, len(fleet))
	}
	run := func(cfg collector.Config) (*collector.Collector, string) {
		col, err := collector.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- col.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
		srv := httptest.NewServer(col.Handler())
		t.Cleanup(srv.Close)
		return col, srv.URL
	}
	whole, _ := run(all)
	var scraped []string
	for _, cfg := range parts {
		_, u := run(cfg)
		scraped = append(scraped, hostPort(t, u))
	}
	prom, err := testenv.StartPrometheus(ctx, testenv.PrometheusOptions{Targets: scraped})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prom.Close() })

	// Through every ProxySQL: a hog idle in its transaction, short
	// autocommit reads and short transactions, each under its own tag.
	var wg sync.WaitGroup
	errs := make(chan error, 3*len(fleet))
	deadline := time.Now().Add(12 * time.Second)
	for i, px := range fleet {
		cfg := px.AppConfig()
		cfg.DBName = database.Name
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db := conntag.OpenDB(connector)
		t.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(4)
		for _, job := range []struct {
			tag string
			do  func(ctx context.Context) error
		}{
			{fmt.Sprintf("hog_px%d", i+1), func(ctx context.Context) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
					return err
				}
				time.Sleep(150 * time.Millisecond) // the hold being measured: idle in a transaction
				return tx.Commit()
			}},
			{"browse", func(ctx context.Context) error {
				_, err := db.ExecContext(ctx, "SELECT SLEEP(0.005)")
				return err
			}},
			{"checkout", func(ctx context.Context) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				for range 3 {
					if _, err := tx.ExecContext(ctx, "SELECT SLEEP(0.002)"); err != nil {
						return err
					}
				}
				return tx.Commit()
			}},
		} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				jctx := conntag.WithTag(ctx, job.tag)
				for time.Now().Before(deadline) {
					if err := job.do(jctx); err != nil {
						errs <- fmt.Errorf("%s: %w", job.tag, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkLayerTotals(ctx, t, whole, prom, true)
}
