package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/holdtime/holdtime/reservation/flashsale"
	"github.com/holdtime/holdtime/reservation/redisstock"
	"github.com/holdtime/holdtime/testenv"
)

// lessonRun is one row of the demo's second lesson.
type lessonRun struct {
	fault, design string
	r             flashsale.Report
}

// redisLesson is the demo's second lesson: the design the engine replaced,
// one Redis counter per item and a claim across Redis and the MySQL ledger,
// under the faults a checkout meets, next to the engine under the same.
func redisLesson(ctx context.Context, out io.Writer, target *testenv.Target) error {
	if !testenv.RedisAvailable() {
		fmt.Fprintln(out, "\nlesson 2   skipped: redis-server is not installed (sudo apt-get install -y redis-server, or .ci/install-deps redis)")
		return nil
	}
	runs, err := lessonRuns(ctx, target)
	if err != nil && ctx.Err() != nil {
		// A signal: the sales that ran to their end are still the lesson's.
		fmt.Fprintf(out, "\nPARTIAL: lesson 2 interrupted after %d of its sales\n", len(runs))
		if len(runs) >= 2 {
			if err := writeLesson(out, runs); err != nil {
				return err
			}
		}
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("lesson 2: %w", err)
	}
	return writeLesson(out, runs)
}

func lessonRuns(ctx context.Context, target *testenv.Target) ([]lessonRun, error) {
	database, err := target.CreateDatabase(ctx, "demo_redis")
	if err != nil {
		return nil, err
	}
	defer database.Drop(context.WithoutCancel(ctx))
	rs, err := testenv.StartRedis(ctx, testenv.RedisOptions{Persistence: testenv.PersistenceSnapshot})
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	mc := database.Config()
	// The lesson KILLs connections on purpose: the driver's log of each
	// one it finds dead would bury the table.
	mc.Logger = &mysql.NopLogger{}
	base := flashsale.Config{MySQL: mc, Buyers: 400, Concurrency: 16, Stock: 150, PaymentDelay: time.Millisecond}
	db, err := flashsale.OpenDB(base)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1, PoolSize: 32})
	defer rdb.Close()
	admin, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	redisDesign := func(order redisstock.ClaimOrder) (flashsale.Backend, error) {
		b, err := flashsale.NewRedisBackend(redisstock.Config{Redis: rdb, DB: db, ClaimOrder: order, ExpiryInterval: 10 * time.Millisecond})
		if err != nil {
			return nil, err
		}
		return b, b.Migrate(ctx)
	}
	const kill = 0.2
	var runs []lessonRun
	for _, spec := range []struct {
		fault string
		order redisstock.ClaimOrder // "" is the engine
		kill  float64
		crash bool
	}{
		{"none", redisstock.ClaimLedgerFirst, 0, false},
		{"none", "", 0, false},
		{"20% of claims killed between the halves", redisstock.ClaimLedgerFirst, kill, false},
		{"20% of claims killed between the halves", redisstock.ClaimRedisFirst, kill, false},
		{"Redis crashes, back from its last snapshot", redisstock.ClaimLedgerFirst, 0, true},
		{"20% of claims killed, every connection KILLed", "", kill, true},
	} {
		cfg := base
		cfg.KillClaims = spec.kill
		design := "engine (skip_locked)"
		if spec.order != "" {
			if cfg.Backend, err = redisDesign(spec.order); err != nil {
				return nil, err
			}
			design = "redis (" + map[redisstock.ClaimOrder]string{redisstock.ClaimLedgerFirst: "ledger first",
				redisstock.ClaimRedisFirst: "Redis first"}[spec.order] + ")"
			if spec.crash {
				cfg.Restarts, cfg.Restart, cfg.AfterStock = 1, rs.Restart, rs.Save
			}
		} else {
			cfg.DB = db
			if spec.crash {
				cfg.Restarts = 1
				cfg.Restart = func(ctx context.Context) error { return flashsale.KillConnections(ctx, admin, database.Name) }
			}
		}
		r, err := flashsale.Run(ctx, cfg)
		if err != nil {
			return runs, fmt.Errorf("%s, %s: %w", design, spec.fault, err)
		}
		runs = append(runs, lessonRun{fault: spec.fault, design: design, r: r})
	}
	return runs, nil
}

func writeLesson(out io.Writer, runs []lessonRun) error {
	if len(runs) < 2 {
		return errors.New("lesson 2: no runs")
	}
	fmt.Fprintln(out, "\nlesson 2   the design the engine replaced: one Redis counter per item, holds in Redis, and a claim that must")
	fmt.Fprintln(out, "           update the MySQL ledger and Redis with no transaction spanning them; a killed claim is driven again")
	fmt.Fprintf(out, "           (a redelivered payment webhook). Each sale: %d buyers for %d units.\n\n", runs[0].r.Buyers, runs[0].r.Stock)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tdesign\tpaid\tledger sold\toversold\tundersold\tleaked\t")
	for _, run := range runs {
		r := run.r
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t\n", run.fault, run.design, r.Paid, r.Sold, r.Oversold, r.Undersold, r.Leaked)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	redis, engine := runs[0].r, runs[1].r
	if engine.Throughput > 0 {
		fmt.Fprintf(out, "\n           without faults the Redis design reserved %.1fx as fast as the engine in this run (%.0f vs %.0f reserves/s):\n",
			redis.Throughput/engine.Throughput, redis.Throughput, engine.Throughput)
	}
	fmt.Fprintln(out, "           a decrement in memory is cheap. What it cannot do is keep two systems in step: every unit oversold or")
	fmt.Fprintln(out, "           undersold above is a fault the engine, one database and one transaction, absorbs (last row).")
	fmt.Fprintln(out, "           Moving off it without stopping checkout: holdtime flashsale --migrate --shops 5")
	return nil
}
