package reservation

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// benchDB opens a migrated database through conntag with one round trip
// per statement, as in production.
func benchDB(b *testing.B, conns int) *sql.DB {
	cfg := testenv.NewDatabase(b).Config()
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	db := conntag.OpenDB(connector)
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	e, err := New(db, Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	return db
}

// variant is one contender of an interleaved benchmark.
type variant struct {
	name    string
	prefix  string // of its reservation ids: unique in the database
	reserve func(ctx context.Context, id string) error
	e       *Engine // nil for the minimal loop
	elapsed time.Duration
	done    int
	rates   []float64 // reserves/s per round
}

func (v *variant) rate() float64 { return float64(v.done) / v.elapsed.Seconds() }

// interleave runs b.N reserves of every variant in rounds: each round runs
// a slice of every variant in turn (the order rotating), conc at a time,
// so that all of them see the same machine. On a shared 2-core machine a
// variant run after another would see other load, and the ratio would
// measure the neighbours.
func interleave(b *testing.B, vs []*variant, conc, rounds int) {
	ctx := b.Context()
	chunk := max(b.N/rounds, 1)
	b.ResetTimer()
	for r := 0; r < rounds && !b.Failed(); r++ {
		for k := range vs {
			v := vs[(r+k)%len(vs)]
			n := min(chunk, b.N-v.done)
			if r == rounds-1 {
				n = b.N - v.done
			}
			if n <= 0 {
				continue
			}
			first := v.done
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range conc {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(n); i = next.Add(1) {
						if err := v.reserve(ctx, fmt.Sprintf("%s-%d", v.prefix, first+int(i))); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			d := time.Since(start)
			v.elapsed += d
			v.done += n
			v.rates = append(v.rates, float64(n)/d.Seconds())
		}
	}
	b.StopTimer()
}

// ratios reports a/b over the whole run and its lowest and highest value
// over the rounds.
func ratios(b *testing.B, a, base *variant, name string) {
	b.ReportMetric(a.rate()/base.rate(), name)
	var per []float64
	for i := range min(len(a.rates), len(base.rates)) {
		per = append(per, a.rates[i]/base.rates[i])
	}
	if len(per) > 0 {
		b.ReportMetric(slices.Min(per), name+"_min")
		b.ReportMetric(slices.Max(per), name+"_max")
	}
}

// engineStats reports what an engine variant did per reserve: the
// contention counters that would explain a dip.
func engineStats(b *testing.B, v *variant) {
	st := v.e.Stats()
	n := float64(v.done)
	b.ReportMetric(float64(st.Retries)/n, v.name+"_retries/op")
	b.ReportMetric(float64(st.ShortReads)/n, v.name+"_short_reads/op")
	b.ReportMetric(float64(st.InlineRefills)/n, v.name+"_inline_refills/op")
	b.ReportMetric(float64(st.RefillWait.Microseconds())/n, v.name+"_refill_wait_us/op")
}

// engineVariant returns a variant reserving one unit per call from its own
// item through an engine of strategy, its pool refilled by Run as in
// production.
func engineVariant(b *testing.B, db *sql.DB, name string, cfg Config, key ItemKey, work time.Duration) *variant {
	ctx := b.Context()
	e, err := New(db, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Receive(ctx, StockParams{ItemKey: key, Quantity: int64(b.N) + 1000}); err != nil {
		b.Fatal(err)
	}
	if _, err := e.Refill(ctx, key); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	b.Cleanup(func() { stop(); <-done })
	return &variant{name: name, prefix: fmt.Sprint(name, key.ItemID), e: e, reserve: func(ctx context.Context, id string) error {
		p := cart(id, key, 1)
		if work > 0 {
			p.InTx = func(context.Context, *sql.Tx) error { time.Sleep(work); return nil }
		}
		_, err := e.Reserve(ctx, p)
		return err
	}}
}

// minimalVariant returns the minimal SKIP LOCKED loop (minimalReserve) on
// its own item, every unit pooled up front (it has no refill).
func minimalVariant(b *testing.B, db *sql.DB, name string, key ItemKey, work time.Duration) *variant {
	ctx := b.Context()
	e, err := New(db, Config{})
	if err != nil {
		b.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.addToPool(ctx, tx, key, int64(b.N)+100); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return &variant{name: name, prefix: fmt.Sprint(name, key.ItemID), reserve: func(ctx context.Context, id string) error {
		return minimalReserve(conntag.WithTag(ctx, "inventory_reserve"), db, key, id, work)
	}}
}

// BenchmarkEngineVsMinimal: one hot item, one unit per reserve, with and
// without 2 ms of application work inside the transaction (InTx), at 8,
// 32 and 64 concurrent buyers: the engine (SKIP LOCKED, pool refilled by
// Run), the counter and FOR UPDATE baselines, and the minimal SKIP LOCKED
// loop (minimalReserve: the engine's statements, none of its
// bookkeeping), twice: minimal_aa is the same loop again, so aa
// (minimal_aa/minimal) is the noise of the measurement itself. Every
// variant runs in the same interleaved rounds; each ratio is reported over
// the run and as its lowest and highest round.
//
//	go test -run '^$' -bench BenchmarkEngineVsMinimal -benchtime 1200x ./reservation/
func BenchmarkEngineVsMinimal(b *testing.B) {
	db := benchDB(b, 400)
	var item atomic.Uint64
	for _, c := range []struct {
		work time.Duration
		conc int
	}{{0, 8}, {0, 32}, {0, 64}, {2 * time.Millisecond, 8}, {2 * time.Millisecond, 32}, {2 * time.Millisecond, 64}} {
		b.Run(fmt.Sprintf("work=%v/conc=%d", c.work, c.conc), func(b *testing.B) {
			key := func() ItemKey { return ItemKey{1, item.Add(1), 1} }
			engine := engineVariant(b, db, "engine", Config{}, key(), c.work)
			counter := engineVariant(b, db, "counter", Config{Strategy: StrategyCounter}, key(), c.work)
			forUpdate := engineVariant(b, db, "for_update", Config{Strategy: StrategyForUpdate}, key(), c.work)
			minimal := minimalVariant(b, db, "minimal", key(), c.work)
			aa := minimalVariant(b, db, "minimal_aa", key(), c.work)
			vs := []*variant{engine, minimal, counter, aa, forUpdate}
			interleave(b, vs, c.conc, 6)
			for _, v := range vs {
				b.ReportMetric(v.rate(), v.name+"_reserves/s")
			}
			ratios(b, engine, minimal, "engine/minimal")
			ratios(b, aa, minimal, "aa")
			ratios(b, engine, counter, "engine/counter")
			ratios(b, engine, forUpdate, "engine/for_update")
			engineStats(b, engine)
		})
	}
}

// BenchmarkRefillConvoy: the engine's dip when its pool runs low. A small
// pool (200 units) on one hot item makes reserves find it short and refill
// inline. (A pool smaller than the concurrency would measure contention
// for the pooled units instead: reserves find them all locked by others.)
// convoy is the engine without its in-memory single flight (every
// short reserve opens a refill transaction that queues on the ledger row
// lock, a connection and a server thread held for the wait, and then finds
// the pool refilled); engine is the engine. The refill wait per reserve
// shows where the time went.
//
//	go test -run '^$' -bench BenchmarkRefillConvoy -benchtime 2000x ./reservation/
func BenchmarkRefillConvoy(b *testing.B) {
	db := benchDB(b, 200)
	var item atomic.Uint64
	for _, conc := range []int{32, 64} {
		b.Run(fmt.Sprintf("pool=200/conc=%d", conc), func(b *testing.B) {
			key := func() ItemKey { return ItemKey{2, item.Add(1), 1} }
			engine := engineVariant(b, db, "engine", Config{PoolSize: 200}, key(), 0)
			convoy := engineVariant(b, db, "convoy", Config{PoolSize: 200}, key(), 0)
			convoy.e.refillAlone = true
			minimal := minimalVariant(b, db, "minimal", key(), 0)
			vs := []*variant{engine, convoy, minimal}
			interleave(b, vs, conc, 6)
			for _, v := range vs {
				b.ReportMetric(v.rate(), v.name+"_reserves/s")
			}
			ratios(b, engine, convoy, "engine/convoy")
			ratios(b, engine, minimal, "engine/minimal")
			ratios(b, convoy, minimal, "convoy/minimal")
			engineStats(b, engine)
			engineStats(b, convoy)
		})
	}
}
