package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"sync"
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
// Each sale says on errOut (when not nil) once its first buyer is served.
func redisLesson(ctx context.Context, out, errOut io.Writer, target *testenv.Target) error {
	if !testenv.RedisAvailable() {
		fmt.Fprintln(out, "\nlesson 2   skipped: redis-server is not installed (sudo apt-get install -y redis-server, or .ci/install-deps redis)")
		return nil
	}
	runs, cut, err := lessonRuns(ctx, target, errOut)
	if err != nil && ctx.Err() != nil {
		// A signal: the sales that ran to their end are still the lesson's,
		// and the one it cut short tells what it did, audited.
		fmt.Fprintf(out, "\nPARTIAL: lesson 2 interrupted after %d of its sales\n", len(runs))
		if len(runs) >= 2 {
			if err := writeLesson(out, runs); err != nil {
				return err
			}
		}
		if cut != nil {
			r := cut.r
			fmt.Fprintf(out, "\nPARTIAL sale, %s under %q: %d buyers came, %d reserves, %d paid", cut.design, cut.fault, r.Buyers, r.Reserves, r.Paid)
			if r.Audited {
				fmt.Fprintf(out, ", sold %d of %d units; %s\n", r.Sold, r.Stock, flashsaleBooks(r))
			} else {
				fmt.Fprintf(out, "; its books could not be audited (%v)\n", err)
			}
		}
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("lesson 2: %w", err)
	}
	return writeLesson(out, runs)
}

// lessonRuns runs the lesson's sales in order: the runs that ran to their
// end, and the one ctx's end cut short (nil if none did mid-sale), its
// report partial.
func lessonRuns(ctx context.Context, target *testenv.Target, errOut io.Writer) (runs []lessonRun, cut *lessonRun, err error) {
	database, err := target.CreateDatabase(ctx, "demo_redis")
	if err != nil {
		return nil, nil, err
	}
	// Redis stops while the database is dropped: a signal ends the demo
	// within a second, cleanup included.
	var closing sync.WaitGroup
	defer closing.Wait()
	defer dropDatabase(ctx, target, database)
	rs, err := testenv.StartRedis(ctx, testenv.RedisOptions{Persistence: testenv.PersistenceSnapshot})
	if err != nil {
		return nil, nil, err
	}
	defer closing.Go(func() { rs.Close() })
	mc := database.Config()
	// The lesson KILLs connections on purpose: the driver's log of each
	// one it finds dead would bury the table.
	mc.Logger = &mysql.NopLogger{}
	// A signal ends the demo within a second: an interrupted sale's audit
	// gets half.
	base := flashsale.Config{MySQL: mc, Buyers: 400, Concurrency: 16, Stock: 150, PaymentDelay: time.Millisecond,
		PartialAuditTimeout: 500 * time.Millisecond}
	db, err := flashsale.OpenDB(base)
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1, PoolSize: 32})
	defer rdb.Close()
	admin, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		return nil, nil, err
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
				return runs, nil, err
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
		if errOut != nil {
			var first sync.Once
			cfg.Progress = func(int, int) {
				first.Do(func() {
					fmt.Fprintf(errOut, "holdtime demo: lesson 2: %s, %s: first buyer served\n", design, spec.fault)
				})
			}
		}
		r, err := flashsale.Run(ctx, cfg)
		if err != nil {
			if r.Partial {
				cut = &lessonRun{fault: spec.fault, design: design, r: r}
			}
			return runs, cut, fmt.Errorf("%s, %s: %w", design, spec.fault, err)
		}
		runs = append(runs, lessonRun{fault: spec.fault, design: design, r: r})
	}
	return runs, nil, nil
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
