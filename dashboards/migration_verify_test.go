package dashboards_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"net/http/httptest"

	"github.com/holdtime/holdtime/dashboards"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/flashsale"
	"github.com/holdtime/holdtime/reservation/migration"
	"github.com/holdtime/holdtime/reservation/redisstock"
	"github.com/holdtime/holdtime/testenv"
)

// needsMigration tells the "Migration from Redis" row's queries, which need
// a migration running (and Redis).
func needsMigration(q dashboards.Query) bool {
	return strings.Contains(q.Expr, "holdtime_migration_") || strings.Contains(q.Expr, "holdtime_redis_")
}

// TestMigrationPanelsReturnData runs a sale through a migration router
// (shops in shadow and on MySQL, the shadow's budget so short that it times
// out: errors and mismatches happen) with a real Prometheus scraping the
// app, and evaluates every query of the migration row: each must return a
// series.
func TestMigrationPanelsReturnData(t *testing.T) {
	requireTool(t, testenv.PrometheusAvailable(), "prometheus is not on PATH: install it with `sudo apt-get install -y prometheus` (or .ci/install-deps prometheus)")
	requireTool(t, testenv.Available(), "no MySQL-compatible server: install mariadb-server or set "+testenv.DSNEnv)
	requireTool(t, testenv.RedisAvailable(), "redis-server is not on PATH: install it with `sudo apt-get install -y redis-server` (or .ci/install-deps redis)")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	appReg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(appReg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	appServer := httptest.NewServer(promhttp.HandlerFor(appReg, promhttp.HandlerOpts{}))
	t.Cleanup(appServer.Close)

	rs := testenv.NewRedis(t, testenv.RedisOptions{Persistence: testenv.PersistenceNone})
	db, err := flashsale.OpenDB(flashsale.Config{MySQL: testenv.NewDatabase(t).Config(), MeterProvider: mp, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	store, err := redisstock.New(redisstock.Config{Redis: rdb, DB: db, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := reservation.New(db, reservation.Config{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	shops := []uint64{1, 2, 3, 4}
	router, err := migration.New(migration.Config{Redis: store, Engine: engine, DB: db, ShopsByVolume: shops,
		Rollout:       migration.Rollout{Shadow: migration.Plan{Percent: 100}, MySQL: migration.Plan{Percent: 50}},
		ShadowTimeout: time.Microsecond, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	if err := router.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	prom, err := testenv.StartPrometheus(ctx, testenv.PrometheusOptions{Targets: []string{hostPort(t, appServer.URL)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prom.Close() })

	saleCtx, stopSale := context.WithCancel(ctx)
	saleDone := make(chan struct{})
	go func() {
		defer close(saleDone)
		flashsale.Run(saleCtx, flashsale.Config{DB: db, Backend: &flashsale.MigrationBackend{R: router, Redis: store, Engine: engine, DB: db},
			ShopIDs: shops, Buyers: 200_000, Concurrency: 4, Stock: 1 << 30, Duration: 2 * time.Minute})
	}()
	t.Cleanup(func() { stopSale(); <-saleDone })

	queries, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	n := 0
	for _, q := range queries {
		if !needsMigration(q) {
			continue
		}
		n++
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			if _, err := prom.WaitForSeries(qctx, dashboards.Substitute(q.Expr, "1m")); err != nil {
				t.Errorf("panel %q, query %s returns no data: %s\n\t%v", q.Panel, q.RefID, dashboards.Substitute(q.Expr, "1m"), err)
			}
		})
	}
	wg.Wait()
	if n < 8 {
		t.Fatalf("found %d migration queries, want the row's 8", n)
	}
}
