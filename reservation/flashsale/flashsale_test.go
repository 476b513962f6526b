package flashsale

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestSaleBalances(t *testing.T) {
	for _, s := range []reservation.Strategy{reservation.StrategySkipLocked, reservation.StrategyCounter} {
		t.Run(string(s), func(t *testing.T) {
			r, err := Run(t.Context(), Config{MySQL: testenv.NewDatabase(t).Config(), Strategy: s, Buyers: 300,
				Concurrency: 8, Items: 3, Locations: 2, Stock: 40, CartSize: 2, PoolSize: 20, AbandonRate: 0.2,
				PaymentDelay: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", r)
			if r.Oversold != 0 || r.Leaked != 0 || r.Undersold != 0 || r.FailedCalls != 0 {
				t.Errorf("books do not balance: %+v", r)
			}
			if r.Sold == 0 || r.Reserves == 0 || r.Buyers != 300 {
				t.Errorf("nothing sold, or buyers missing: %+v", r)
			}
		})
	}
}

// TestSaleTagsStatements: the harness's pool goes through conntag, so the
// server sees the engine's tag on its statements.
func TestSaleTagsStatements(t *testing.T) {
	d := testenv.NewDatabase(t)
	if _, err := Run(t.Context(), Config{MySQL: d.Config(), Buyers: 20, Concurrency: 4, Stock: 30}); err != nil {
		t.Fatal(err)
	}
	var tagged int
	err := d.Target.Admin().QueryRowContext(t.Context(), `SELECT COUNT(*) FROM performance_schema.events_statements_history_long
		WHERE CURRENT_SCHEMA = ? AND SQL_TEXT LIKE '%conn_tag:inventory_reserve%' AND SQL_TEXT LIKE '%SKIP LOCKED%'`,
		d.Name).Scan(&tagged)
	if err != nil {
		t.Skipf("performance_schema is not readable on %s: %v", d.Target.Redacted(), err)
	}
	if tagged == 0 {
		t.Fatal("the server saw no unit fetch tagged conn_tag:inventory_reserve")
	}
}

func TestSaleStopsAfterDuration(t *testing.T) {
	r, err := Run(t.Context(), Config{MySQL: testenv.NewDatabase(t).Config(), Buyers: 1_000_000, Concurrency: 4,
		Stock: 1_000_000, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Buyers == 0 || r.Buyers >= 1_000_000 || r.Oversold != 0 || r.Leaked != 0 || r.Undersold != 0 {
		t.Fatalf("a sale cut short by Duration: %+v", r)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{},
		{MySQL: testenv.NewDatabase(t).Config(), CartSize: 2},
		{MySQL: testenv.NewDatabase(t).Config(), AbandonRate: 2},
		{MySQL: testenv.NewDatabase(t).Config(), Buyers: -1},
		{MySQL: testenv.NewDatabase(t).Config(), TxWork: -time.Second},
	} {
		if _, err := Run(t.Context(), c); err == nil || !strings.HasPrefix(err.Error(), "flashsale: ") {
			t.Errorf("Run(%+v) = %v, want a flashsale: error", c, err)
		}
	}
}

// TestAuditIsOneSnapshot audits an item while buyers reserve and release it:
// every audit must balance. Books read in several statements count a unit
// reserved between two of them twice (or miss one returned), and a leak
// could hide behind the same race.
func TestAuditIsOneSnapshot(t *testing.T) {
	db := testenv.NewDatabase(t).Open(t)
	ctx := t.Context()
	e, err := reservation.New(db, reservation.Config{PoolSize: 40})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	k := reservation.ItemKey{ShopID: 1, ItemID: 1, GroupID: 1}
	if err := e.Receive(ctx, reservation.StockParams{ItemKey: k, Quantity: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Refill(ctx, k); err != nil { // every unit pooled: no ledger-only slack hides a double count
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				p := reservation.ReserveParams{ShopID: 1, ReservationID: id,
					Lines: []reservation.Line{{ItemID: 1, Quantity: 2, GroupIDs: []uint64{1}}}}
				if _, err := e.Reserve(ctx, p); err != nil {
					t.Error(err)
					return
				}
				if err := e.Release(ctx, 1, id); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var bad []Books
	for range 300 {
		b, err := Audit(ctx, db, reservation.StrategySkipLocked, k)
		if err != nil {
			t.Error(err)
			break
		}
		if b.Leaked() != 0 || b.Pooled+b.Held != b.OnHand {
			bad = append(bad, b)
		}
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("%d of 300 audits did not balance, first %+v", len(bad), bad[0])
	}
}

// slowRefusals is the engine whose refusals take at least delay: a sold-out
// path made slow on purpose, to see that the reserving figures leave it out.
type slowRefusals struct {
	Backend
	delay time.Duration
}

func (b slowRefusals) Reserve(ctx context.Context, p reservation.ReserveParams) (*reservation.Reservation, error) {
	res, err := b.Backend.Reserve(ctx, p)
	if errors.Is(err, reservation.ErrInsufficientStock) {
		sleep(ctx, b.delay)
	}
	return res, err
}

// TestReservingApartFromSoldOut: more buyers than stock, and a sold-out
// path slowed to delay per refusal. The reserving figures end with the last
// successful reserve; the refusals after it are reported apart, with the
// latency of the refused calls.
func TestReservingApartFromSoldOut(t *testing.T) {
	db := testenv.NewDatabase(t).Open(t)
	e, err := reservation.New(db, reservation.Config{ExpiryInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	const delay, concurrency, stock, buyers = 40 * time.Millisecond, 4, 16, 48
	r, err := Run(t.Context(), Config{DB: db, Backend: slowRefusals{EngineBackend(e, db), delay},
		Buyers: buyers, Concurrency: concurrency, Stock: stock})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.Reserves != stock || r.SoldOut != buyers-stock || r.Oversold != 0 || r.Leaked != 0 {
		t.Fatalf("want %d reserves and %d turned away: %+v", stock, buyers-stock, r)
	}
	// A refusal can overlap the last reserve only while that reserve holds
	// the last unit: at most one per other buyer at once.
	if r.SoldOutAfter < r.SoldOut-(concurrency-1) || r.SoldOutAfter > r.SoldOut {
		t.Errorf("%d of %d refusals after the last reserve, want at least %d", r.SoldOutAfter, r.SoldOut, r.SoldOut-(concurrency-1))
	}
	// Each refusal takes at least delay, and at most concurrency run at once.
	if minSoldOut := time.Duration(r.SoldOutAfter/concurrency-1) * delay; r.SoldOutElapsed < minSoldOut {
		t.Errorf("sold-out path %v, want at least %v", r.SoldOutElapsed, minSoldOut)
	}
	if r.SoldOutP50 < delay || r.SoldOutP99 < r.SoldOutP50 || r.SoldOutRate <= 0 {
		t.Errorf("refusal latency p50 %v p99 %v, rate %.1f/s: want p50 at least %v", r.SoldOutP50, r.SoldOutP99, r.SoldOutRate, delay)
	}
	if r.ReservingElapsed <= 0 || r.ReservingElapsed+r.SoldOutElapsed > r.Elapsed {
		t.Errorf("reserving %v + sold out %v, more than the sale's %v", r.ReservingElapsed, r.SoldOutElapsed, r.Elapsed)
	}
	if want := float64(r.Reserves) / r.ReservingElapsed.Seconds(); r.ReservingThroughput != want || r.ReservingThroughput <= r.Throughput {
		t.Errorf("reserving throughput %.1f/s, want %.1f/s (reserves over the reserving part), above the whole sale's %.1f/s",
			r.ReservingThroughput, want, r.Throughput)
	}
}

// TestLastAbandonedHoldsAreNotLeaked: buyers who abandon right before the
// sale ends hold units whose TTL has not run out yet; the sale waits for
// them to be due before its final expiry, so at the audit no abandoned hold
// is still held (the migration backend's audit counts such a hold as
// leaked: TestMigrationDuringSale once failed on its last buyer's 20 ms hold).
func TestLastAbandonedHoldsAreNotLeaked(t *testing.T) {
	db := testenv.NewDatabase(t).Open(t)
	e, err := reservation.New(db, reservation.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	type made struct {
		shop uint64
		id   string
	}
	var mu sync.Mutex
	var all []made
	r, err := Run(t.Context(), Config{DB: db, Backend: EngineBackend(e, db), Buyers: 8, Concurrency: 8,
		Items: 1, Stock: 100, AbandonRate: 1, AbandonTTL: 300 * time.Millisecond,
		Outcome: func(shop uint64, id string, _ []reservation.ReservedLine, _ bool) {
			mu.Lock()
			all = append(all, made{shop, id})
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Abandoned != 8 || len(all) != 8 {
		t.Fatalf("want 8 abandoned holds: %+v, %d outcomes", r, len(all))
	}
	k := reservation.ItemKey{ShopID: all[0].shop, ItemID: 1, GroupID: 1}
	books, err := Audit(t.Context(), db, reservation.StrategySkipLocked, k)
	if err != nil {
		t.Fatal(err)
	}
	if books.Held != 0 || books.Leaked() != 0 {
		t.Errorf("after the sale %d units are still held (%+v): the abandoned holds were not yet due at the final expiry", books.Held, books)
	}
}

// TestInterruptedSaleReportsWhatItHas: a sale whose context ends midway
// (Ctrl-C) returns the report of the buyers admitted so far, its books read
// after they stopped: they balance, every unit the ledger sold is paid for
// or was claimed as its buyer was cut off, and the holds left are the cut
// off buyers'. Run returned an empty report before.
func TestInterruptedSaleReportsWhatItHas(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{{"audited", 0}, {"audit out of time", time.Nanosecond}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			shops := []uint64{uint64(time.Now().UnixNano()), uint64(time.Now().UnixNano()) + 1}
			r, err := Run(ctx, Config{MySQL: testenv.NewDatabase(t).Config(), Buyers: 100_000, Concurrency: 8,
				Stock: 100_000, ShopIDs: shops, PaymentDelay: time.Millisecond, AbandonRate: 0.1,
				PartialAuditTimeout: tc.timeout,
				Progress: func(done, _ int) {
					if done == 200 {
						cancel() // the signal, once 200 buyers were served
					}
				}})
			t.Logf("%v\n%+v", err, r)
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted after") {
				t.Fatalf("Run: %v, want an interruption wrapping context.Canceled", err)
			}
			if !r.Partial || r.Buyers < 200 || r.Buyers >= 100_000 || r.Reserves < 150 || r.Stock != 200_000 {
				t.Errorf("want a partial report of the buyers admitted: %+v", r)
			}
			if tc.timeout > 0 {
				if r.Audited || !strings.Contains(err.Error(), "could not be read within 1ns") ||
					!errors.Is(err, context.DeadlineExceeded) || r.Sold != 0 || r.Shops != nil || r.Paid == 0 {
					t.Errorf("an audit out of time must say so and report no books: %v, %+v", err, r)
				}
				return
			}
			if !r.Audited || !r.Balanced() || r.Sold == 0 || r.Sold != r.Paid+r.Undersold ||
				r.Held > r.Interrupted || r.FailedCalls != 0 {
				t.Errorf("the interrupted sale's books: %+v\nwant audited, balanced (sold+on hand = stock, 0 oversold, 0 leaked), "+
					"sold = paid + claimed as cut off, held only by cut-off buyers", r)
			}
			var sold, onHand int64
			for i, sr := range r.Shops {
				if sr.ShopID != shops[i] || sr.Stock != 100_000 || sr.Sold+sr.OnHand != sr.Stock {
					t.Errorf("shop %d: %+v", i, sr)
				}
				sold, onHand = sold+sr.Sold, onHand+sr.OnHand
			}
			if len(r.Shops) != 2 || sold != r.Sold || onHand != r.OnHand {
				t.Errorf("per shop %+v does not add up to sold %d, on hand %d", r.Shops, r.Sold, r.OnHand)
			}
		})
	}
}
