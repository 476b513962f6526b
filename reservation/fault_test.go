package reservation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/internal/faultproxy"
	"github.com/holdtime/holdtime/testenv"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// faultEnv is an engine whose pool goes through a fault proxy, and a pool
// straight to the server that reads the books (the independent view).
type faultEnv struct {
	e      *Engine
	proxy  *faultproxy.Proxy
	direct *sql.DB
	reader *sdkmetric.ManualReader
}

func faultSetup(t *testing.T, cfg Config) *faultEnv {
	t.Helper()
	d := testenv.NewDatabase(t)
	server := d.Config()
	p, err := faultproxy.Listen(server.Net, server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pc := d.Config()
	pc.Net, pc.Addr = "tcp", p.Addr()
	pc.InterpolateParams = true
	pc.Logger = &mysql.NopLogger{} // lost connections are the point
	connector, err := mysql.NewConnector(pc)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	reader := sdkmetric.NewManualReader()
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	e, err := New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &faultEnv{e: e, proxy: p, direct: d.Open(t), reader: reader}
}

var faultActions = []faultproxy.Action{faultproxy.LoseReply, faultproxy.DropBefore}

// arm breaks the next COMMIT and returns a check that it did.
func (f *faultEnv) arm(t *testing.T, a faultproxy.Action) func() {
	t.Helper()
	inj := f.proxy.Inject(faultproxy.Fault{Action: a})
	return func() {
		t.Helper()
		inj.Cancel()
		if inj.Fired() != 1 {
			t.Fatalf("the %v fault on COMMIT fired %d times, want 1: the test proves nothing", a, inj.Fired())
		}
	}
}

// counter sums the data points of an Int64 counter whose attributes include
// every pair of attrs.
func counter(t *testing.T, r *sdkmetric.ManualReader, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
		points:
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				for _, a := range attrs {
					if v, ok := dp.Attributes.Value(a.Key); !ok || v != a.Value {
						continue points
					}
				}
				n += dp.Value
			}
		}
	}
	return n
}

// states counts reservations by state, straight from the server.
func states(t *testing.T, db *sql.DB) map[State]int64 {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT state, COUNT(*) FROM inventory_reservations GROUP BY state`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[State]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[State(s)] = n
	}
	return out
}

// TestAdjustLostReply (issue 11, item 1): a negative Adjust whose COMMIT
// reply is lost (or whose COMMIT never reaches the server) is applied
// exactly once, and Adjust says so.
func TestAdjustLostReply(t *testing.T) {
	for _, a := range faultActions {
		t.Run(a.String(), func(t *testing.T) {
			f := faultSetup(t, Config{PoolSize: 10})
			key := ItemKey{1, 1, 1}
			receive(t, f.e, key, 100)
			if _, err := f.e.Refill(t.Context(), key); err != nil {
				t.Fatal(err)
			}
			fired := f.arm(t, a)
			if err := f.e.Adjust(t.Context(), StockParams{ItemKey: key, Quantity: -5}); err != nil {
				t.Fatalf("Adjust(-5) = %v", err)
			}
			fired()
			b := checkBooks(t, f.direct, StrategySkipLocked, key, 95, 0)
			if b.onHand != 95 {
				t.Fatalf("on hand %d after Adjust(-5) of 100, want 95: the adjustment was applied %d times",
					b.onHand, (100-b.onHand)/5)
			}
		})
	}
}

// TestExpireDueLostReply (issue 11, item 2): an expiry sweep whose COMMIT
// reply is lost reports the holds it expired, and so do its counters.
func TestExpireDueLostReply(t *testing.T) {
	for _, a := range faultActions {
		t.Run(a.String(), func(t *testing.T) {
			f := faultSetup(t, Config{PoolSize: 10})
			key := ItemKey{1, 1, 1}
			receive(t, f.e, key, 10)
			for _, id := range []string{"a", "b"} {
				p := cart(id, key, 2)
				p.TTL = time.Microsecond
				if _, err := f.e.Reserve(t.Context(), p); err != nil {
					t.Fatal(err)
				}
			}
			fired := f.arm(t, a)
			n, err := f.e.ExpireDue(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			fired()
			db := states(t, f.direct)[StateExpired]
			if n != 2 || db != 2 {
				t.Fatalf("ExpireDue = %d, the database expired %d: want 2 and 2", n, db)
			}
			if st, m := f.e.Stats().Expired, counter(t, f.reader, "holdtime.reservation.expiries"); st != 2 || m != 2 {
				t.Fatalf("Stats().Expired %d, expiries metric %d: want 2 (the database expired 2)", st, m)
			}
			checkBooks(t, f.direct, StrategySkipLocked, key, 10, 0)
		})
	}
}

// TestReserveLostReply (issue 11, item 2): a reserve whose COMMIT reply is
// lost, found by the retry, counts as one reserve in Stats and the metric.
func TestReserveLostReply(t *testing.T) {
	for _, a := range faultActions {
		t.Run(a.String(), func(t *testing.T) {
			f := faultSetup(t, Config{PoolSize: 10})
			key := ItemKey{1, 1, 1}
			receive(t, f.e, key, 10)
			if _, err := f.e.Refill(t.Context(), key); err != nil { // no inline refill: the next COMMIT is the reserve's
				t.Fatal(err)
			}
			fired := f.arm(t, a)
			res, err := f.e.Reserve(t.Context(), cart("r", key, 3))
			if err != nil {
				t.Fatal(err)
			}
			fired()
			if res.State != StateHeld || sumLines(res.Lines) != 3 {
				t.Fatalf("Reserve = %+v", res)
			}
			b := checkBooks(t, f.direct, StrategySkipLocked, key, 10, 0)
			if db := states(t, f.direct)[StateHeld]; db != 1 || b.held != 3 {
				t.Fatalf("the database holds %d reservations of %d units, want 1 of 3", db, b.held)
			}
			ok := counter(t, f.reader, "holdtime.reservation.operations",
				attribute.String("operation", "reserve"), attribute.String("outcome", "ok"))
			if st := f.e.Stats().Reserves; st != 1 || ok != 1 {
				t.Fatalf("Stats().Reserves %d, operations{reserve,ok} %d: want 1 (the database holds 1)", st, ok)
			}
			if d := f.e.poolDepth(); d != b.pooled {
				t.Errorf("pool depth gauge %d, the database pools %d", d, b.pooled)
			}
		})
	}
}

// pooled counts an item's pool rows straight from the server.
func pooled(t *testing.T, db *sql.DB, key ItemKey) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM inventory_reservation_units
		WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`, key.ShopID, key.ItemID, key.GroupID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPoolBound (issue 11, item 3): releases, expiries and claims that lose
// to expiry never take a pool above Config.PoolSize; the units that do not
// fit stay sellable in the ledger.
func TestPoolBound(t *testing.T) {
	const size = 10
	e, db := setup(t, Config{PoolSize: size})
	ctx := t.Context()
	key := ItemKey{1, 1, 1}
	receive(t, e, key, 100)
	end := map[string]func(id string) error{
		"release": func(id string) error { return e.Release(ctx, 1, id) },
		"expire": func(string) error {
			n, err := e.ExpireDue(ctx)
			if err == nil && n != 1 {
				err = fmt.Errorf("expired %d, want 1", n)
			}
			return err
		},
		"claim after expiry": func(id string) error {
			if err := e.Claim(ctx, 1, id); !errors.Is(err, ErrExpired) {
				return fmt.Errorf("claim of a due hold = %v, want ErrExpired", err)
			}
			return nil
		},
	}
	for _, how := range []string{"release", "expire", "claim after expiry"} {
		// Take 6 of a full pool, let the refiller top it up, end the hold.
		if _, err := e.Refill(ctx, key); err != nil {
			t.Fatal(err)
		}
		p := cart(how, key, 6)
		if how != "release" {
			p.TTL = time.Microsecond
		}
		if _, err := e.Reserve(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Refill(ctx, key); err != nil {
			t.Fatal(err)
		}
		if err := end[how](how); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if n := pooled(t, db, key); n > size {
			t.Errorf("after a %s the pool holds %d units, PoolSize is %d", how, n, size)
		}
		if b := checkBooks(t, db, StrategySkipLocked, key, 100, 0); b.held != 0 {
			t.Errorf("%s: %d units still held", how, b.held)
		}
	}
	// Concurrent releases into a half-full pool: they must not all see
	// room for their units.
	var ids []string
	for i := range 2 * size {
		id := fmt.Sprint("c", i)
		if _, err := e.Reserve(ctx, cart(id, key, 1)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := e.Refill(ctx, key); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if err := e.Release(ctx, 1, id); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := pooled(t, db, key); n > size {
		t.Errorf("after %d concurrent releases the pool holds %d units, PoolSize is %d", len(ids), n, size)
	}
	if b := checkBooks(t, db, StrategySkipLocked, key, 100, 0); b.held != 0 || b.pooled+b.ledgerOnly() != 100 {
		t.Errorf("books %+v: every unit must be pooled or in the ledger", b)
	}
	// What did not fit is sold all the same.
	for i := 0; ; i++ {
		id := fmt.Sprint("s", i)
		_, err := e.Reserve(ctx, cart(id, key, 7))
		if errors.Is(err, ErrInsufficientStock) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Claim(ctx, 1, id); err != nil {
			t.Fatal(err)
		}
		if i > 100 {
			t.Fatal("the sale never ended")
		}
	}
	if b := books(t, db, StrategySkipLocked, key); b.claimed != 98 {
		t.Errorf("sold %d of 100 in lines of 7, want 98", b.claimed)
	}
}

// TestClaimLostReply: a claim whose COMMIT reply is lost is one claim, in
// the ledger and in the counters.
func TestClaimLostReply(t *testing.T) {
	for _, a := range faultActions {
		t.Run(a.String(), func(t *testing.T) {
			f := faultSetup(t, Config{PoolSize: 10})
			key := ItemKey{1, 1, 1}
			receive(t, f.e, key, 10)
			if _, err := f.e.Reserve(t.Context(), cart("r", key, 3)); err != nil {
				t.Fatal(err)
			}
			fired := f.arm(t, a)
			if err := f.e.Claim(t.Context(), 1, "r"); err != nil {
				t.Fatal(err)
			}
			fired()
			checkBooks(t, f.direct, StrategySkipLocked, key, 10, 3)
			ok := counter(t, f.reader, "holdtime.reservation.operations",
				attribute.String("operation", "claim"), attribute.String("outcome", "ok"))
			if db, st := states(t, f.direct)[StateClaimed], f.e.Stats().Claims; db != 1 || st != 1 || ok != 1 {
				t.Fatalf("the database claimed %d, Stats().Claims %d, operations{claim,ok} %d: want 1, 1, 1", db, st, ok)
			}
		})
	}
}

// TestClaimExpiredLostReply: a claim that finds its hold due expires it
// itself; when that COMMIT's reply is lost the expiry still counts once.
func TestClaimExpiredLostReply(t *testing.T) {
	for _, a := range faultActions {
		t.Run(a.String(), func(t *testing.T) {
			f := faultSetup(t, Config{PoolSize: 10})
			key := ItemKey{1, 1, 1}
			receive(t, f.e, key, 10)
			p := cart("r", key, 3)
			p.TTL = time.Microsecond
			if _, err := f.e.Reserve(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			fired := f.arm(t, a)
			if err := f.e.Claim(t.Context(), 1, "r"); !errors.Is(err, ErrExpired) {
				t.Fatalf("claim of a due hold = %v, want ErrExpired", err)
			}
			fired()
			b := checkBooks(t, f.direct, StrategySkipLocked, key, 10, 0)
			db := states(t, f.direct)[StateExpired]
			st, m := f.e.Stats().Expired, counter(t, f.reader, "holdtime.reservation.expiries")
			if db != 1 || st != 1 || m != 1 || b.held != 0 {
				t.Fatalf("the database expired %d (held %d), Stats().Expired %d, expiries metric %d: want 1, 0, 1, 1", db, b.held, st, m)
			}
			if d := f.e.poolDepth(); d != b.pooled {
				t.Errorf("pool depth gauge %d, the database pools %d", d, b.pooled)
			}
		})
	}
}

// TestReleaseLostReply: a release whose COMMIT reply is lost is one release.
func TestReleaseLostReply(t *testing.T) {
	for _, a := range faultActions {
		t.Run(a.String(), func(t *testing.T) {
			f := faultSetup(t, Config{PoolSize: 10})
			key := ItemKey{1, 1, 1}
			receive(t, f.e, key, 10)
			if _, err := f.e.Reserve(t.Context(), cart("r", key, 3)); err != nil {
				t.Fatal(err)
			}
			fired := f.arm(t, a)
			if err := f.e.Release(t.Context(), 1, "r"); err != nil {
				t.Fatal(err)
			}
			fired()
			b := checkBooks(t, f.direct, StrategySkipLocked, key, 10, 0)
			if db, st := states(t, f.direct)[StateReleased], f.e.Stats().Releases; db != 1 || st != 1 || b.held != 0 {
				t.Fatalf("the database released %d (held %d), Stats().Releases %d: want 1, 0, 1", db, b.held, st)
			}
			if d := f.e.poolDepth(); d != b.pooled {
				t.Errorf("pool depth gauge %d, the database pools %d", d, b.pooled)
			}
		})
	}
}

// TestRefillLostReply: a refill whose COMMIT reply is lost reports and
// counts the units it pooled, once.
func TestRefillLostReply(t *testing.T) {
	for _, a := range faultActions {
		t.Run(a.String(), func(t *testing.T) {
			f := faultSetup(t, Config{PoolSize: 10})
			key := ItemKey{1, 1, 1}
			receive(t, f.e, key, 25)
			fired := f.arm(t, a)
			added, err := f.e.Refill(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			fired()
			db := pooled(t, f.direct, key)
			st, m := f.e.Stats().RefilledUnits, counter(t, f.reader, "holdtime.reservation.refill.units")
			if db != 10 || added != 10 || st != 10 || m != 10 {
				t.Fatalf("the database pooled %d, Refill added %d, Stats().RefilledUnits %d, refill.units metric %d: want 10 each",
					db, added, st, m)
			}
			if d := f.e.poolDepth(); d != db {
				t.Errorf("pool depth gauge %d, the database pools %d", d, db)
			}
		})
	}
}

// TestPruneLostReply: a pruning batch whose COMMIT reply is lost reports
// and counts the rows it deleted.
func TestPruneLostReply(t *testing.T) {
	for _, a := range faultActions {
		t.Run(a.String(), func(t *testing.T) {
			f := faultSetup(t, Config{PoolSize: 10})
			ctx := t.Context()
			key := ItemKey{1, 1, 1}
			receive(t, f.e, key, 10)
			for _, id := range []string{"a", "b", "c"} {
				if _, err := f.e.Reserve(ctx, cart(id, key, 1)); err != nil {
					t.Fatal(err)
				}
				if err := f.e.Claim(ctx, 1, id); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.direct.ExecContext(ctx, `UPDATE inventory_reservations
				SET expires_at = expires_at - INTERVAL 2 DAY, updated_at = updated_at - INTERVAL 2 DAY`); err != nil {
				t.Fatal(err)
			}
			fired := f.arm(t, a)
			n, err := f.e.PruneEnded(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fired()
			var left int64
			for _, c := range states(t, f.direct) {
				left += c
			}
			if m := counter(t, f.reader, "holdtime.reservation.pruned"); n != 3 || left != 0 || m != 3 {
				t.Fatalf("PruneEnded = %d, %d rows left, pruned metric %d: want 3, 0, 3", n, left, m)
			}
		})
	}
}

// TestReceiveLostReply: Receive, like Adjust, applies a change whose reply
// is lost exactly once, with or without an AdjustmentID, whether the reply
// lost is the COMMIT's or the ledger write's.
func TestReceiveLostReply(t *testing.T) {
	ledgerWrite := faultproxy.StatementPrefix("INSERT INTO inventory_ledger")
	for _, a := range faultActions {
		for _, at := range []string{"COMMIT", "ledger write"} {
			for _, id := range []string{"", "delivery"} {
				t.Run(fmt.Sprintf("%v/%s/id=%q", a, at, id), func(t *testing.T) {
					f := faultSetup(t, Config{PoolSize: 10})
					key := ItemKey{1, 1, 1}
					for _, n := range []int64{10, 5} { // a new ledger row, then an existing one
						fault := faultproxy.Fault{Action: a}
						if at != "COMMIT" {
							fault.Match = ledgerWrite
						}
						inj := f.proxy.Inject(fault)
						p := StockParams{ItemKey: key, Quantity: n}
						if id != "" {
							p.AdjustmentID = fmt.Sprint(id, "-", n)
						}
						if err := f.e.Receive(t.Context(), p); err != nil {
							t.Fatal(err)
						}
						if inj.Fired() != 1 {
							t.Fatalf("the %v fault on the %s fired %d times, want 1", a, at, inj.Fired())
						}
					}
					checkBooks(t, f.direct, StrategySkipLocked, key, 15, 0)
					var rows, sum int64
					if err := f.direct.QueryRowContext(t.Context(), `SELECT COUNT(*), COALESCE(SUM(quantity), 0) FROM inventory_adjustments`).
						Scan(&rows, &sum); err != nil {
						t.Fatal(err)
					}
					if rows != 2 || sum != 15 {
						t.Fatalf("%d stock changes recorded for %d units, want 2 for 15", rows, sum)
					}
				})
			}
		}
	}
}

// TestAdjustmentID: a stock change with an id is applied once however often
// it is called; the id with another change is a conflict that changes
// nothing; concurrent calls with one id apply it once.
func TestAdjustmentID(t *testing.T) {
	e, db := setup(t, Config{PoolSize: 10})
	ctx := t.Context()
	a, b := ItemKey{1, 1, 1}, ItemKey{1, 2, 1}
	for range 3 {
		if err := e.Receive(ctx, StockParams{ItemKey: a, Quantity: 20, AdjustmentID: "po-1"}); err != nil {
			t.Fatal(err)
		}
		if err := e.Adjust(ctx, StockParams{ItemKey: a, Quantity: -3, AdjustmentID: "count-1"}); err != nil {
			t.Fatal(err)
		}
	}
	// Adjust with a positive quantity is the same change as Receive.
	if err := e.Adjust(ctx, StockParams{ItemKey: a, Quantity: 20, AdjustmentID: "po-1"}); err != nil {
		t.Fatal(err)
	}
	checkBooks(t, db, StrategySkipLocked, a, 17, 0)
	for _, p := range []StockParams{
		{ItemKey: a, Quantity: 21, AdjustmentID: "po-1"},
		{ItemKey: b, Quantity: 20, AdjustmentID: "po-1"},
		{ItemKey: a, Quantity: -4, AdjustmentID: "count-1"},
	} {
		if err := e.Adjust(ctx, p); !errors.Is(err, ErrAdjustmentConflict) {
			t.Errorf("Adjust(%+v) = %v, want ErrAdjustmentConflict", p, err)
		}
	}
	for _, bad := range []string{string(make([]byte, 65)), "tab\there"} {
		if err := e.Receive(ctx, StockParams{ItemKey: a, Quantity: 1, AdjustmentID: bad}); err == nil {
			t.Errorf("AdjustmentID %q accepted", bad)
		}
	}
	checkBooks(t, db, StrategySkipLocked, a, 17, 0)
	if n := books(t, db, StrategySkipLocked, b).onHand; n != 0 {
		t.Fatalf("a conflicting change stocked %d units of b", n)
	}
	// Concurrent calls with one id, on new ledger rows of two items: one
	// wins, the other is a conflict, and neither is applied twice.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			key := ItemKey{1, uint64(10 + i%2), 1}
			errs[i] = e.Receive(ctx, StockParams{ItemKey: key, Quantity: 7, AdjustmentID: "race"})
		})
	}
	wg.Wait()
	var x, y int64 = books(t, db, StrategySkipLocked, ItemKey{1, 10, 1}).onHand, books(t, db, StrategySkipLocked, ItemKey{1, 11, 1}).onHand
	if x+y != 7 {
		t.Fatalf("one change with id %q stocked %d and %d units, want 7 in total", "race", x, y)
	}
	winner := uint64(10)
	if y == 7 {
		winner = 11
	}
	for i, err := range errs {
		if mine := uint64(10+i%2) == winner; mine && err != nil || !mine && !errors.Is(err, ErrAdjustmentConflict) {
			t.Errorf("call %d on item %d (winner %d): %v", i, 10+i%2, winner, err)
		}
	}
}

// TestOutcomeUnknown: when the reply to COMMIT is lost and the database
// stays unreachable through the retry budget, the caller learns that the
// outcome is unknown and whether a retry is safe; once the database is
// back, a retry with the same id gets the outcome and applies nothing twice.
func TestOutcomeUnknown(t *testing.T) {
	f := faultSetup(t, Config{PoolSize: 10, RetryBudget: 300 * time.Millisecond})
	ctx := t.Context()
	key := ItemKey{1, 1, 1}
	receive(t, f.e, key, 100)
	if _, err := f.e.Refill(ctx, key); err != nil {
		t.Fatal(err)
	}
	// The next COMMIT loses its reply, then every command is dropped until
	// the test disarms the outage.
	outage := func() (end func()) {
		lost := f.proxy.Inject(faultproxy.Fault{Action: faultproxy.LoseReply})
		down := f.proxy.Inject(faultproxy.Fault{Action: faultproxy.DropBefore, Times: -1, Match: func(faultproxy.Command) bool {
			select {
			case <-lost.Done():
				return true
			default:
				return false
			}
		}})
		return func() {
			t.Helper()
			down.Cancel()
			if lost.Fired() != 1 || down.Fired() == 0 {
				t.Fatalf("lost %d replies and dropped %d commands: the outage never happened", lost.Fired(), down.Fired())
			}
		}
	}
	type call struct {
		name      string
		do        func() error
		retryable bool
	}
	for _, c := range []call{
		{"adjust without id", func() error { return f.e.Adjust(ctx, StockParams{ItemKey: key, Quantity: -1}) }, false},
		{"adjust with id", func() error { return f.e.Adjust(ctx, StockParams{ItemKey: key, Quantity: -2, AdjustmentID: "a"}) }, true},
		{"reserve", func() error { _, err := f.e.Reserve(ctx, cart("r", key, 4)); return err }, true},
		{"claim", func() error { return f.e.Claim(ctx, 1, "r") }, true},
	} {
		end := outage()
		err := c.do()
		end()
		var unknown *OutcomeUnknownError
		if !errors.As(err, &unknown) || !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrRetryable) != c.retryable ||
			unknown.Retryable != c.retryable {
			t.Fatalf("%s through an outage = %v; want an *OutcomeUnknownError that matches ErrRetryable: %v", c.name, err, c.retryable)
		}
		if c.retryable {
			if err := c.do(); err != nil {
				t.Fatalf("%s retried once the database is back: %v", c.name, err)
			}
		}
	}
	// The lost changes were applied once each: 100 - 1 - 2 on hand, 4 claimed.
	checkBooks(t, f.direct, StrategySkipLocked, key, 97, 4)
	unknowns := counter(t, f.reader, "holdtime.reservation.operations", attribute.String("outcome", "unknown"))
	if unknowns != 2 { // the reserve and the claim
		t.Errorf("operations{outcome=unknown} = %d, want 2", unknowns)
	}
	// The retries found what the first calls did and counted it, once.
	if st := f.e.Stats(); st.Reserves != 1 || st.Claims != 1 {
		t.Errorf("Stats().Reserves %d, Claims %d after one reserve and one claim whose outcome was unknown: want 1, 1",
			st.Reserves, st.Claims)
	}
	if d, db := f.e.poolDepth(), pooled(t, f.direct, key); d != db {
		t.Errorf("pool depth gauge %d, the database pools %d", d, db)
	}
}

// chaosLedger is what the callers of one item/group saw succeed.
type chaosLedger struct {
	changes int64 // units received and adjusted, by calls that returned nil
	claimed int64 // units of reservations whose Claim returned nil
}

// TestLostRepliesChaos: buyers, stock clerks, the refiller and the sweeper
// work two items through a proxy that loses the reply to about one
// statement in twenty and drops about one in twenty before the server sees
// it: COMMITs, locking reads, inserts, BEGINs alike. Every call is repeated
// with the same id until it has an answer. Then the books are reconciled by
// SQL against what the callers were told: the ledger against the stock
// changes and claims that returned nil, every reservation row against a
// Reserve that returned it, every unit on hand pooled, held or ledger-only
// exactly once, pools within PoolSize, and the engine's counters against
// the rows.
func TestLostRepliesChaos(t *testing.T) {
	for _, s := range []Strategy{StrategySkipLocked, StrategyCounter} {
		t.Run(string(s), func(t *testing.T) { lostRepliesChaos(t, s) })
	}
}

func lostRepliesChaos(t *testing.T, strategy Strategy) {
	const poolSize = 8
	f := faultSetup(t, Config{Strategy: strategy, PoolSize: poolSize, RetryBudget: 30 * time.Second})
	ctx := t.Context()
	keys := []ItemKey{{1, 1, 1}, {1, 2, 1}}
	books := map[ItemKey]*chaosLedger{}
	for _, k := range keys {
		if err := f.e.Receive(ctx, StockParams{ItemKey: k, Quantity: 40, AdjustmentID: fmt.Sprint("init-", k.ItemID)}); err != nil {
			t.Fatal(err)
		}
		books[k] = &chaosLedger{changes: 40}
	}
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	oneIn := func(n int) func(faultproxy.Command) bool {
		return func(c faultproxy.Command) bool {
			rngMu.Lock()
			defer rngMu.Unlock()
			return c.Code == faultproxy.ComQuery && rng.IntN(n) == 0
		}
	}
	lose := f.proxy.Inject(faultproxy.Fault{Action: faultproxy.LoseReply, Match: oneIn(20), Times: -1})
	drop := f.proxy.Inject(faultproxy.Fault{Action: faultproxy.DropBefore, Match: oneIn(20), Times: -1})

	// answer repeats a call while its outcome is unknown: the same id makes
	// that safe, and the answer is what the caller acts on.
	answer := func(call func() error) error {
		for {
			err := call()
			if !errors.Is(err, ErrOutcomeUnknown) {
				return err
			}
		}
	}
	type held struct {
		id    string
		lines []ReservedLine
	}
	var mu sync.Mutex // guards books and the outcomes below
	reserved := map[string][]ReservedLine{}
	refused := map[string]bool{}  // Reserve said ErrInsufficientStock
	final := map[string]State{}   // the last state a Claim or Release reported
	adjusted, notAdjusted := 0, 0 // stock changes applied and refused
	var sweptByCalls int          // ExpireDue results
	addLines := func(lines []ReservedLine, to func(*chaosLedger, int64)) {
		for _, l := range lines {
			to(books[ItemKey{1, l.ItemID, l.GroupID}], l.Quantity)
		}
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			var mine []held
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 60 {
				key := keys[r.IntN(len(keys))]
				id := fmt.Sprintf("w%d-%d", w, i)
				switch op := r.IntN(20); {
				case op < 8: // reserve, a fifth of them abandoned
					p := cart(id, key, 1+r.Int64N(3))
					if r.IntN(5) == 0 {
						p.TTL = time.Microsecond
					}
					var res *Reservation
					err := answer(func() (err error) { res, err = f.e.Reserve(ctx, p); return err })
					mu.Lock()
					switch {
					case err == nil:
						reserved[id] = res.Lines
						mine = append(mine, held{id, res.Lines})
					case errors.Is(err, ErrInsufficientStock):
						refused[id] = true
					default:
						t.Errorf("reserve %s: %v", id, err)
					}
					mu.Unlock()
				case op < 13 && len(mine) > 0: // claim or release one of mine
					h := mine[0]
					mine = mine[1:]
					claim := op < 12
					err := answer(func() error {
						if claim {
							return f.e.Claim(ctx, 1, h.id)
						}
						return f.e.Release(ctx, 1, h.id)
					})
					mu.Lock()
					switch {
					case err == nil && claim:
						final[h.id] = StateClaimed
						addLines(h.lines, func(b *chaosLedger, n int64) { b.claimed += n })
					case err == nil:
						final[h.id] = StateReleased // or expired before: Release says nil to both
					case errors.Is(err, ErrExpired) && claim:
						final[h.id] = StateExpired
					default:
						t.Errorf("claim %v of %s: %v", claim, h.id, err)
					}
					mu.Unlock()
				case op < 16: // a stock change with an id
					p := StockParams{ItemKey: key, Quantity: r.Int64N(7) - 3, AdjustmentID: "adj-" + id}
					if p.Quantity == 0 {
						p.Quantity = 2
					}
					err := answer(func() error { return f.e.Adjust(ctx, p) })
					mu.Lock()
					switch {
					case err == nil:
						books[key].changes += p.Quantity
						adjusted++
					case errors.Is(err, ErrInsufficientStock):
						notAdjusted++
					default:
						t.Errorf("adjust %+v: %v", p, err)
					}
					mu.Unlock()
				case op < 18:
					n, err := f.e.ExpireDue(ctx)
					if err != nil {
						t.Errorf("expire: %v", err)
					}
					mu.Lock()
					sweptByCalls += n
					mu.Unlock()
				default:
					if _, err := f.e.Refill(ctx, key); err != nil {
						t.Errorf("refill: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	lose.Cancel()
	drop.Cancel()
	if lose.Fired() < 10 || drop.Fired() < 10 {
		t.Fatalf("only %d replies lost and %d statements dropped: the faults hardly fired", lose.Fired(), drop.Fired())
	}
	t.Logf("%d replies lost, %d statements dropped; %d reservations (%d refused), %d stock changes (%d refused), %d swept, retries %d",
		lose.Fired(), drop.Fired(), len(reserved), len(refused), adjusted, notAdjusted, sweptByCalls, f.e.Stats().Retries)

	// The ledger: what the callers were told, exactly once.
	for _, k := range keys {
		b := checkBooks(t, f.direct, strategy, k, books[k].changes, books[k].claimed)
		if b.pooled > poolSize {
			t.Errorf("item %d: %d units pooled, PoolSize %d", k.ItemID, b.pooled, poolSize)
		}
		var n, sum int64
		if err := f.direct.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(quantity), 0) FROM inventory_adjustments
			WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`, k.ShopID, k.ItemID, k.GroupID).Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		if sum != books[k].changes {
			t.Errorf("item %d: %d stock changes recorded for %d units; the callers applied %d units", k.ItemID, n, sum, books[k].changes)
		}
	}
	var changes int64
	if err := f.direct.QueryRowContext(ctx, `SELECT COUNT(*) FROM inventory_adjustments`).Scan(&changes); err != nil {
		t.Fatal(err)
	}
	if changes != int64(adjusted+len(keys)) {
		t.Errorf("%d stock changes recorded, %d calls applied one", changes, adjusted+len(keys))
	}
	// Every reservation row is one a Reserve returned, in the state its
	// last call reported.
	rows, err := f.direct.QueryContext(ctx, `SELECT reservation_id, state FROM inventory_reservations`)
	if err != nil {
		t.Fatal(err)
	}
	db := map[string]State{}
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			t.Fatal(err)
		}
		db[id] = State(state)
	}
	rows.Close()
	count := map[State]int64{}
	for id, state := range db {
		count[state]++
		if _, ok := reserved[id]; !ok {
			t.Errorf("reservation %s (%s) exists, but its Reserve returned %v", id, state,
				map[bool]string{true: "ErrInsufficientStock", false: "nothing"}[refused[id]])
		}
		switch want := final[id]; {
		case want == StateClaimed && state != StateClaimed, want == StateExpired && state != StateExpired:
			t.Errorf("reservation %s is %s, its Claim said %s", id, state, want)
		case want == StateReleased && state != StateReleased && state != StateExpired:
			t.Errorf("reservation %s is %s, its Release said it ended", id, state)
		case want == "" && state != StateHeld && state != StateExpired:
			t.Errorf("reservation %s is %s, nobody claimed or released it", id, state)
		}
	}
	if len(db) != len(reserved) {
		t.Errorf("%d reservation rows, %d Reserve calls returned one", len(db), len(reserved))
	}
	// The counters count the rows.
	st := f.e.Stats()
	ok := func(op string) int64 {
		return counter(t, f.reader, "holdtime.reservation.operations",
			attribute.String("operation", op), attribute.String("outcome", "ok"))
	}
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"Stats().Reserves", st.Reserves, int64(len(db))},
		{"operations{reserve,ok}", ok("reserve"), int64(len(db))},
		{"Stats().Claims", st.Claims, count[StateClaimed]},
		{"Stats().Releases", st.Releases, count[StateReleased]},
		{"Stats().Expired", st.Expired, count[StateExpired]},
		{"expiries metric", counter(t, f.reader, "holdtime.reservation.expiries"), count[StateExpired]},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, the database says %d", c.name, c.got, c.want)
		}
	}
}
