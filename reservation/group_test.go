package reservation

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/holdtime/holdtime/internal/faultproxy"
	"go.opentelemetry.io/otel/attribute"
)

// holdGroups makes the first group of op wait until want more calls of op
// have queued behind it, so that the next group has them all: a test of
// grouping that does not depend on timing. It returns the sizes of the
// groups run, read after the calls returned.
func holdGroups(e *Engine, op string, want int) func() []int {
	var mu sync.Mutex
	var sizes []int
	queued := make(chan struct{}, want)
	e.groupQueued = func(o string) {
		if o == op {
			select {
			case queued <- struct{}{}:
			default:
			}
		}
	}
	e.groupLead = func(o string, n int) {
		if o != op {
			return
		}
		mu.Lock()
		first := len(sizes) == 0
		sizes = append(sizes, n)
		mu.Unlock()
		if first {
			for range want {
				<-queued
			}
		}
	}
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return sizes
	}
}

// TestClaimGroup: claims of one item that arrive while a group is in
// flight are claimed by the next group, in one transaction; every claim
// returns nil, the ledger counts each once, and a claim repeated with the
// same id in the same queue is not counted twice.
func TestClaimGroup(t *testing.T) {
	e, db := setup(t, Config{PoolSize: 100})
	key := ItemKey{1, 7, 1}
	receive(t, e, key, 100)
	const n = 30
	for i := range n {
		if _, err := e.Reserve(t.Context(), cart(fmt.Sprint("r", i), key, 2)); err != nil {
			t.Fatal(err)
		}
	}
	// n claims, and every id of the last five claimed twice at once.
	calls := make([]string, 0, n+5)
	for i := range n {
		calls = append(calls, fmt.Sprint("r", i))
	}
	for i := n - 5; i < n; i++ {
		calls = append(calls, fmt.Sprint("r", i))
	}
	sizes := holdGroups(e, opClaim, len(calls)-1)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for _, id := range calls {
		wg.Go(func() {
			if err := e.Claim(t.Context(), 1, id); err != nil {
				t.Errorf("claim %s: %v", id, err)
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	got := sizes()
	if len(got) < 2 || got[0] != 1 || got[1] < n-1 {
		t.Errorf("group sizes %v: want the first claim alone, then the %d other distinct ids in one group", got, n-1)
	}
	checkBooks(t, db, StrategySkipLocked, key, 100, 2*n)
	if st := states(t, db)[StateClaimed]; st != n {
		t.Errorf("%d reservations claimed, want %d", st, n)
	}
	if c := e.Stats().Claims; c != n {
		t.Errorf("Stats().Claims = %d, want %d (a repeated claim counts once)", c, n)
	}
}

// TestClaimGroupOutcomes: one group with a claim of every kind of
// reservation returns each its own answer, and claims the held one only.
func TestClaimGroupOutcomes(t *testing.T) {
	e, db := setup(t, Config{PoolSize: 100})
	ctx := t.Context()
	key := ItemKey{1, 8, 1}
	receive(t, e, key, 100)
	for _, id := range []string{"held", "claimed", "released", "due"} {
		p := cart(id, key, 1)
		if id == "due" {
			p.TTL = 1 // due at once
		}
		if _, err := e.Reserve(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Claim(ctx, 1, "claimed"); err != nil {
		t.Fatal(err)
	}
	if err := e.Release(ctx, 1, "released"); err != nil {
		t.Fatal(err)
	}
	want := map[string]error{"first": ErrNotFound, "held": nil, "claimed": nil, "released": ErrReleased, "due": ErrExpired, "missing": ErrNotFound}
	sizes := holdGroups(e, opClaim, len(want)-1)
	var wg sync.WaitGroup
	for _, id := range []string{"first", "held", "claimed", "released", "due", "missing"} {
		wg.Go(func() {
			if err := e.Claim(ctx, 1, id); !errors.Is(err, want[id]) || (want[id] == nil) != (err == nil) {
				t.Errorf("claim %s = %v, want %v", id, err, want[id])
			}
		})
	}
	wg.Wait()
	if got := sizes(); len(got) < 2 || got[1] != len(want)-1 {
		t.Errorf("group sizes %v: want the other %d claims in the second group", got, len(want)-1)
	}
	a := checkBooks(t, db, StrategySkipLocked, key, 100, 2)
	if a.held != 0 {
		t.Errorf("%d units still held", a.held)
	}
	if st := states(t, db); st[StateClaimed] != 2 || st[StateReleased] != 1 || st[StateExpired] != 1 {
		t.Errorf("states %v: want 2 claimed, 1 released, 1 expired", st)
	}
}

// TestGroupLostReply: a group whose COMMIT reply is lost (or that never
// reaches the server) is resolved by each member's retry through its own
// token: every claim or release takes effect once, and is counted once.
func TestGroupLostReply(t *testing.T) {
	for _, op := range []string{opClaim, opRelease} {
		for _, a := range faultActions {
			t.Run(op+"/"+a.String(), func(t *testing.T) {
				f := faultSetup(t, Config{PoolSize: 100})
				key := ItemKey{1, 1, 1}
				receive(t, f.e, key, 100)
				const n = 12
				for i := range n {
					if _, err := f.e.Reserve(t.Context(), cart(fmt.Sprint("r", i), key, 3)); err != nil {
						t.Fatal(err)
					}
				}
				sizes := holdGroups(f.e, op, n-1)
				var inj *faultproxy.Injection
				lead := f.e.groupLead
				f.e.groupLead = func(o string, m int) {
					lead(o, m)
					if inj == nil && m > 1 { // the group of many: break its COMMIT
						inj = f.proxy.Inject(faultproxy.Fault{Action: a})
					}
				}
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						id := fmt.Sprint("r", i)
						var err error
						if op == opClaim {
							err = f.e.Claim(t.Context(), 1, id)
						} else {
							err = f.e.Release(t.Context(), 1, id)
						}
						if err != nil {
							t.Errorf("%s %s: %v", op, id, err)
						}
					})
				}
				wg.Wait()
				if inj == nil || inj.Fired() != 1 {
					t.Fatalf("group sizes %v: the fault on the group's COMMIT did not fire once: the test proves nothing", sizes())
				}
				inj.Cancel()
				claimed, state, st := int64(0), StateReleased, f.e.Stats().Releases
				if op == opClaim {
					claimed, state, st = 3*n, StateClaimed, f.e.Stats().Claims
				}
				b := checkBooks(t, f.direct, StrategySkipLocked, key, 100, claimed)
				ok := counter(t, f.reader, "holdtime.reservation.operations",
					attribute.String("operation", op), attribute.String("outcome", "ok"))
				if db := states(t, f.direct)[state]; db != n || st != n || ok != n || b.held != 0 {
					t.Fatalf("the database %s %d (held %d), Stats %d, operations{%s,ok} %d: want %d, 0, %d, %d",
						state, db, b.held, st, op, ok, n, n, n)
				}
				if d := f.e.poolDepth(); op == opRelease && d != b.pooled {
					t.Errorf("pool depth gauge %d, the database pools %d", d, b.pooled)
				}
			})
		}
	}
}

// TestRefillSingleFlight: while a refill of an item runs, the engine's
// other refills of it wait for its result in memory instead of each
// opening a transaction queued on the ledger row lock. A caller takes the
// result of a refill that started before it asked only when that refill
// added units (and found enough sellable): otherwise its ledger read may
// be older than the call, so the late callers share one more refill.
func TestRefillSingleFlight(t *testing.T) {
	for _, c := range []struct {
		name     string
		prefill  bool // the pool is full before: the first refill adds nothing
		wantRuns int64
		wantAdd  int64
	}{{"adds", false, 1, 50}, {"adds_nothing", true, 2, 0}} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := setup(t, Config{PoolSize: 50})
			key := ItemKey{1, 9, 1}
			receive(t, e, key, 1000)
			if c.prefill {
				if _, err := e.Refill(t.Context(), key); err != nil {
					t.Fatal(err)
				}
			}
			const callers = 12
			waiting := make(chan struct{}, 4*callers)
			var runs atomic.Int64
			first := make(chan struct{}) // closed when the first refill is in flight
			e.flightWait = func(ItemKey) { waiting <- struct{}{} }
			e.flightRun = func(ItemKey) {
				if runs.Add(1) == 1 { // the first refill runs once every other caller waits for it
					close(first)
					for range callers - 1 {
						<-waiting
					}
				}
			}
			var wg sync.WaitGroup
			var added atomic.Int64
			for i := range callers {
				wg.Go(func() {
					if i > 0 {
						<-first
					}
					st, n, err := e.refill(t.Context(), key, 1)
					if err != nil || !st.found || st.pooled != 50 {
						t.Errorf("refill: %+v, %v; want the pool full (50)", st, err)
					}
					if i == 0 {
						added.Store(n)
					}
				})
			}
			wg.Wait()
			if n := runs.Load(); n != c.wantRuns {
				t.Errorf("%d refill transactions for %d concurrent callers, want %d", n, callers, c.wantRuns)
			}
			if added.Load() != c.wantAdd || e.Stats().RefilledUnits != 50 {
				t.Errorf("the first refill added %d, Stats().RefilledUnits %d: want %d, 50", added.Load(), e.Stats().RefilledUnits, c.wantAdd)
			}
		})
	}
}
