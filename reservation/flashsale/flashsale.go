// Package flashsale runs a flash sale against the reservation engine: many
// buyers, few items, holds that are abandoned and expire, and reports
// throughput, latency and whether the books balance. The CLI and the
// benchmarks use it; it draws nothing itself (see ProgressBar).
//
// The same sale drives any Backend: the engine with each strategy
// (EngineBackend, the default), the Redis design it replaced
// (NewRedisBackend) and a migration between them (MigrationBackend). Faults
// are part of the sale: claims killed between their two halves and driven
// again (Config.KillClaims), restarts of the backend's store
// (Config.Restarts), and any Event at a share of the buyers, which also
// divides the report into phases. The audit compares each system's books
// with what the buyers were told (Report.Paid): oversold is units paid for
// beyond stock or missing from the ledger, undersold units the ledger counts
// sold that nobody paid for (and, for one shop, units never sold though
// demand exceeded stock).
package flashsale

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Config describes a sale. The zero value of every field but DB and MySQL
// is its documented default.
type Config struct {
	// DB is the pool to sell through. Open it with conntag so that every
	// statement carries its tag (inventory_reserve, ...) and hold time is
	// measured per tag. Leave it nil to have Run open its own from MySQL.
	DB *sql.DB
	// MySQL, used when DB is nil, is the database to sell in: Run opens a
	// pool on it through conntag (conntag.OpenDB with the default options
	// and MeterProvider when set), sized to Concurrency, with
	// InterpolateParams so that a statement is one round trip, and closes
	// it at the end.
	MySQL       *mysql.Config
	Strategy    reservation.Strategy // default skip_locked
	Buyers      int                  // checkouts attempted; default 1,000
	Concurrency int                  // buyers at once; default 16
	Items       int                  // distinct items on sale; default 1
	Locations   int                  // location groups per item, tried in order; default 1
	Stock       int64                // units per item and location; default 100
	CartSize    int                  // lines per cart, each 1 unit of a distinct item; default 1
	PoolSize    int                  // engine pool size; default the engine's
	// Duration, when positive, stops admitting buyers after this long; the
	// report then covers the buyers admitted. Default: every buyer.
	Duration time.Duration
	// PaymentDelay is the time between reserve and claim; default 0.
	PaymentDelay time.Duration
	// AbandonRate is the share of buyers that never pay: their holds expire
	// after AbandonTTL. Default 0.
	AbandonRate float64
	AbandonTTL  time.Duration // default 1 ms
	// TxWork is application work done inside the reserve transaction
	// (holding its locks); default 0.
	TxWork time.Duration
	// MeterProvider receives the engine's and conntag's metrics.
	MeterProvider metric.MeterProvider
	// TracerProvider, when set, receives conntag's spans (holds and
	// statements) of the pool Run opens from MySQL.
	TracerProvider trace.TracerProvider
	// PartialAuditTimeout bounds what an interrupted Run (ctx ended
	// mid-sale) spends reading the books for its partial report, on a
	// context of its own: ctx has ended by then. Default 5 s.
	PartialAuditTimeout time.Duration
	// HoldProfile, when set, records which code holds the connections of
	// the pool Run opens from MySQL (conntag.WithHoldProfile).
	HoldProfile *conntag.HoldProfile
	// Backend is the reservation system to sell through. Default: the
	// engine with Strategy, on DB.
	Backend Backend
	// KillClaims is the share of claims killed: the first attempt dies
	// between the claim's two halves (Backend.Claim), and the sale drives
	// the claim again, as a payment webhook redelivered after a crash
	// would. Default 0.
	KillClaims float64
	// Restarts is how many times Restart runs during the sale, spread
	// evenly over its buyers (after 1/(Restarts+1) of them, 2/(Restarts+1),
	// ...). Default 0.
	Restarts int
	// Restart restarts what the backend keeps its state in (a Redis crash,
	// or KILL of the MySQL connections); required when Restarts > 0.
	Restart func(ctx context.Context) error
	// AfterStock, when set, runs once the items are stocked, before the
	// first buyer (to take the snapshot a Redis restart comes back with).
	AfterStock func(ctx context.Context) error
	// Events run during the sale, each when a share of the buyers has
	// started (in a goroutine of their own: buyers do not wait). They
	// divide the report into phases. Restarts adds its own.
	Events []Event
	// ShopIDs are the shops selling, lowest volume first: the i-th of n
	// gets (i+1)/(n(n+1)/2) of the buyers, and each stocks every item.
	// Default: one shop of its own (a fresh id).
	ShopIDs []uint64
	// Outcome, when set, is called once per buyer whose reserve succeeded,
	// at the end of its checkout: paid is whether its claim succeeded.
	Outcome func(shopID uint64, reservationID string, lines []reservation.ReservedLine, paid bool)
	// Progress, when set, is called after each buyer with the count done.
	Progress func(done, total int)
}

// Event is something done during a sale.
type Event struct {
	At   float64 // the share of buyers started when it runs, within (0, 1)
	Name string
	Do   func(ctx context.Context) error
}

// Phase is the part of a sale from one event to the next.
type Phase struct {
	Name       string // the event that began it; "start" for the first
	Buyers     int64
	Reserves   int64
	Elapsed    time.Duration
	Throughput float64 // reserves per second
	// Counters are the backend's counters (Counting) during the phase, such
	// as a migration's mismatches by kind.
	Counters map[string]int64
	// Checked is how many of the phase's reservations a TruthStater backend
	// was asked about after the sale, Wrong how many its source of truth
	// disagreed with the customer on: claimed but not paid, paid but not
	// claimed, or still held at rest.
	Checked, Wrong int64
}

// TruthStater is a Backend that can say what a reservation's source of
// truth says of it (its state), for the per-phase books.
type TruthStater interface {
	TruthState(ctx context.Context, shopID uint64, reservationID string) (reservation.State, error)
}

// Counting is a Backend that counts things worth a column per phase.
type Counting interface {
	Counters() map[string]int64
}

// Report is what a sale did.
type Report struct {
	Strategy   reservation.Strategy // the engine's strategy (empty for another Backend)
	Backend    string               // Backend.Name()
	Buyers     int64                // buyers admitted (fewer than Config.Buyers when Duration ran out)
	Elapsed    time.Duration
	Reserves   int64   // successful reserves
	Throughput float64 // successful reserves per second of Elapsed, sold-out path included
	ReserveP50 time.Duration
	ReserveP99 time.Duration
	// Reserving is the sale while stock lasted: ReservingElapsed runs from
	// the start to the end of the last successful reserve, and
	// ReservingThroughput is Reserves over it. This is the figure to
	// compare strategies by: it leaves out the sold-out path that follows.
	ReservingElapsed    time.Duration
	ReservingThroughput float64
	// The sold-out path, measured apart: SoldOutAfter is the buyers turned
	// away whose refusal ended after the last successful reserve,
	// SoldOutElapsed the time from that reserve to the last refusal, and
	// SoldOutRate SoldOutAfter over it (refusals per second).
	// SoldOutP50/P99 are the latencies of the refused reserve call of every
	// buyer turned away (SoldOut).
	SoldOutAfter           int64
	SoldOutElapsed         time.Duration
	SoldOutRate            float64
	SoldOutP50, SoldOutP99 time.Duration
	Sold                   int64 // units claimed per the ledger
	Paid                   int64 // units whose claim the buyer was told succeeded: the customers' truth
	Stock                  int64 // units stocked
	Oversold               int64 // units paid for beyond stock, or paid for and missing from the ledger
	Undersold              int64 // units the ledger counts sold that nobody paid for, plus units unsold although every buyer came and demand exceeded stock
	Leaked                 int64 // units held by reservations no longer held, or counted twice
	SoldOut                int64 // buyers turned away by the ledger
	Abandoned              int64
	Retries                int64
	Refills                int64 // inline refills run by short reserves, whether or not they added units
	ShortReads             int64
	FailedCalls            int64 // reserves and claims that returned an unexpected error
	// KilledClaims is how many claims died (Config.KillClaims) and were
	// driven again; Restarts how many restarts ran; LostHolds the paid
	// buyers whose hold the backend no longer knew (lost by a restart).
	KilledClaims, Restarts, LostHolds int64
	// Phases divide the sale at its events (one phase without events).
	Phases []Phase

	// Held is the units live holds kept when the books were read: in a
	// finished sale none (every buyer paid or let the hold expire); in an
	// interrupted one the holds of buyers the interruption cut off
	// between reserve and claim, which expire like any hold.
	Held int64
	// OnHand is the units the ledger still has (not claimed): with Sold it
	// makes Stock when the books balance.
	OnHand int64
	// Interrupted is the buyers whose checkout the end of ctx cut short
	// (counted apart from FailedCalls).
	Interrupted int64
	// Shops are the books per shop, in Config.ShopIDs order.
	Shops []ShopReport
	// Partial is set when ctx ended mid-sale: the report covers the buyers
	// admitted until then. Audited says whether its books (Sold, Paid,
	// Oversold, Undersold, Leaked, Held, OnHand, Shops) were read from the
	// backend after the buyers stopped; Run's error says why not when not.
	Partial, Audited bool
}

// ShopReport is one shop's books.
type ShopReport struct {
	ShopID                          uint64
	Stock, Sold, Paid, Held, OnHand int64
	Oversold, Leaked                int64
}

// Balanced reports whether the books add up: every unit stocked is sold or
// still on hand, none oversold, none leaked. Undersold units (claims the
// ledger has and no buyer heard of) are not an imbalance of the books.
func (r Report) Balanced() bool {
	return r.Oversold == 0 && r.Leaked == 0 && r.Sold+r.OnHand == r.Stock
}

func (c Config) withDefaults() (Config, error) {
	if c.DB == nil && c.MySQL == nil && c.Backend == nil {
		return c, errors.New("flashsale: Config.DB, Config.MySQL or Config.Backend is required")
	}
	c.Strategy = cmp.Or(c.Strategy, reservation.StrategySkipLocked)
	c.Buyers = cmp.Or(c.Buyers, 1000)
	c.Concurrency = cmp.Or(c.Concurrency, 16)
	c.Items = cmp.Or(c.Items, 1)
	c.Locations = cmp.Or(c.Locations, 1)
	c.Stock = cmp.Or(c.Stock, 100)
	c.CartSize = cmp.Or(c.CartSize, 1)
	c.AbandonTTL = cmp.Or(c.AbandonTTL, time.Millisecond)
	c.PartialAuditTimeout = cmp.Or(c.PartialAuditTimeout, 5*time.Second)
	if c.CartSize > c.Items {
		return c, fmt.Errorf("flashsale: CartSize %d exceeds Items %d (each line is a distinct item)", c.CartSize, c.Items)
	}
	if c.AbandonRate < 0 || c.AbandonRate > 1 {
		return c, fmt.Errorf("flashsale: AbandonRate %v must be within [0, 1]", c.AbandonRate)
	}
	if c.KillClaims < 0 || c.KillClaims > 1 {
		return c, fmt.Errorf("flashsale: KillClaims %v must be within [0, 1]", c.KillClaims)
	}
	if c.Restarts < 0 || (c.Restarts > 0 && c.Restart == nil) {
		return c, fmt.Errorf("flashsale: Restarts %d needs a Restart function (and cannot be negative)", c.Restarts)
	}
	for _, ev := range c.Events {
		if ev.At <= 0 || ev.At >= 1 || ev.Do == nil {
			return c, fmt.Errorf("flashsale: event %q needs At within (0, 1) and Do", ev.Name)
		}
	}
	c.Events = slices.Clone(c.Events)
	for k := 1; k <= c.Restarts; k++ {
		c.Events = append(c.Events, Event{At: float64(k) / float64(c.Restarts+1), Name: "restart", Do: c.Restart})
	}
	slices.SortStableFunc(c.Events, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	for name, n := range map[string]int64{"Buyers": int64(c.Buyers), "Concurrency": int64(c.Concurrency),
		"Items": int64(c.Items), "Locations": int64(c.Locations), "Stock": c.Stock, "CartSize": int64(c.CartSize)} {
		if n < 1 {
			return c, fmt.Errorf("flashsale: %s %d must be positive (0 means the default)", name, n)
		}
	}
	for name, d := range map[string]time.Duration{"PaymentDelay": c.PaymentDelay, "AbandonTTL": c.AbandonTTL,
		"TxWork": c.TxWork, "Duration": c.Duration, "PartialAuditTimeout": c.PartialAuditTimeout} {
		if d < 0 {
			return c, fmt.Errorf("flashsale: %s %v is negative", name, d)
		}
	}
	return c, nil
}

// OpenDB opens a pool the way Run opens its own from cfg.MySQL: through
// conntag (with cfg's MeterProvider and TracerProvider), InterpolateParams
// on, sized to cfg.Concurrency plus 4.
func OpenDB(cfg Config) (*sql.DB, error) {
	if cfg.MySQL == nil {
		return nil, errors.New("flashsale: Config.MySQL is required to open a pool")
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 16)
	return openDB(cfg)
}

// openDB opens the sale's own pool through conntag.
func openDB(cfg Config) (*sql.DB, error) {
	mc := cfg.MySQL.Clone()
	mc.InterpolateParams = true
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("flashsale: %w", err)
	}
	var opts []conntag.Option
	if cfg.MeterProvider != nil {
		opts = append(opts, conntag.WithMeterProvider(cfg.MeterProvider))
	}
	if cfg.TracerProvider != nil {
		opts = append(opts, conntag.WithTracerProvider(cfg.TracerProvider))
	}
	if cfg.HoldProfile != nil {
		opts = append(opts, conntag.WithHoldProfile(cfg.HoldProfile))
	}
	db := conntag.OpenDB(connector, opts...)
	// Every buyer holds a connection for a whole reserve; the engine's
	// background work and the audit need a few more.
	db.SetMaxOpenConns(cfg.Concurrency + 4)
	db.SetMaxIdleConns(cfg.Concurrency + 4)
	return db, nil
}

// Run runs a sale in a shop of its own (a fresh shop id), so runs against
// one database do not interfere.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	b := cfg.Backend
	if b == nil {
		if cfg.DB == nil {
			if cfg.DB, err = openDB(cfg); err != nil {
				return Report{}, err
			}
			defer cfg.DB.Close()
		}
		e, err := reservation.New(cfg.DB, reservation.Config{Strategy: cfg.Strategy, PoolSize: cfg.PoolSize,
			MeterProvider: cfg.MeterProvider, ExpiryInterval: 10 * time.Millisecond})
		if err != nil {
			return Report{}, err
		}
		if err := e.Migrate(ctx); err != nil {
			return Report{}, err
		}
		b = EngineBackend(e, cfg.DB)
	}
	shops := cfg.ShopIDs
	if len(shops) == 0 {
		shops = []uint64{uint64(time.Now().UnixNano())}
	}
	var keys []reservation.ItemKey
	for _, shop := range shops {
		for item := range cfg.Items {
			for loc := range cfg.Locations {
				k := reservation.ItemKey{ShopID: shop, ItemID: uint64(item + 1), GroupID: uint64(loc + 1)}
				keys = append(keys, k)
				if err := b.Receive(ctx, k, cfg.Stock); err != nil {
					return Report{}, err
				}
			}
		}
	}
	if cfg.AfterStock != nil {
		if err := cfg.AfterStock(ctx); err != nil {
			return Report{}, fmt.Errorf("flashsale: after stocking: %w", err)
		}
	}
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- b.Run(runCtx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopRun()
			<-runDone
		}
	}
	defer stop()

	s := &sale{cfg: cfg, b: b, shops: shops, latencies: make([]time.Duration, cfg.Buyers), paid: map[reservation.ItemKey]int64{},
		reservedAt: make([]time.Duration, cfg.Buyers), refused: make([]time.Duration, cfg.Buyers), refusedAt: make([]time.Duration, cfg.Buyers),
		phaseOf: make([]int, cfg.Buyers), shopOf: make([]uint64, cfg.Buyers), paidOf: make([]bool, cfg.Buyers), abandonedOf: make([]bool, cfg.Buyers), phaseStart: make([]time.Time, len(cfg.Events)+1),
		phaseCounters: make([]map[string]int64, len(cfg.Events)+1)}
	var events sync.WaitGroup
	defer events.Wait()
	eventAt := map[int][]int{} // buyer -> the events it starts
	for i, ev := range cfg.Events {
		at := min(cfg.Buyers-1, max(1, int(ev.At*float64(cfg.Buyers))))
		eventAt[at] = append(eventAt[at], i)
	}
	phase := 0
	for b := range cfg.Buyers {
		phase += len(eventAt[b])
		s.phaseOf[b] = phase
	}
	start := time.Now()
	s.start = start
	s.phaseStart[0] = start
	s.phaseCounters[0] = counters(b)
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = start.Add(cfg.Duration)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				if ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
					return
				}
				b := int(next.Add(1)) - 1
				if b >= cfg.Buyers {
					return
				}
				s.started.Add(1)
				for _, i := range eventAt[b] {
					// This buyer starts the phase that follows event i.
					s.phaseStart[i+1] = time.Now()
					s.phaseCounters[i+1] = counters(s.b)
					ev := cfg.Events[i]
					events.Go(func() {
						if err := ev.Do(ctx); err != nil {
							err = fmt.Errorf("%s: %w", ev.Name, err)
							s.eventErr.Store(&err)
							return
						}
						if ev.Name == "restart" {
							s.restarts.Add(1)
						}
					})
				}
				s.buy(ctx, b)
				if cfg.Progress != nil {
					cfg.Progress(int(s.done.Add(1)), cfg.Buyers)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	end := time.Now()
	endCounters := counters(b)
	events.Wait()
	// The audit reads the books at rest: Run's sweeper and refiller must not
	// move units under it.
	stop()
	if ctx.Err() != nil {
		// An event failing as ctx ended is the interruption, not its cause.
		return s.partial(ctx, keys, elapsed, end, endCounters)
	}
	if p := s.eventErr.Load(); p != nil {
		return Report{}, fmt.Errorf("flashsale: event %w", *p)
	}
	// The audit counts a hold still held as leaked: the last buyers'
	// abandoned holds must be due before the final expiry (a buyer who
	// abandoned within AbandonTTL of the end would otherwise be "leaked").
	if s.abandoned.Load() > 0 {
		sleep(ctx, s.cfg.AbandonTTL+time.Millisecond)
	}
	if _, err := b.ExpireDue(ctx); err != nil {
		return Report{}, err
	}
	r, err := s.report(ctx, keys, elapsed)
	r.Audited = err == nil
	r.Phases = s.phases(end, endCounters)
	if ts, ok := b.(TruthStater); ok && err == nil {
		err = s.checkPhases(ctx, ts, r.Phases)
	}
	return r, err
}

// partial is the report of a sale ctx ended: the buyers admitted until
// then, and the books read on a context of their own, bounded by
// PartialAuditTimeout, once the buyers and the backend's background work
// stopped. Holds due (abandoned) are expired first, as at the end of a
// sale; the holds of buyers cut off before their claim stay held (Held).
// The error wraps ctx's cause, and the audit's error when it failed.
func (s *sale) partial(ctx context.Context, keys []reservation.ItemKey, elapsed time.Duration, end time.Time, endCounters map[string]int64) (Report, error) {
	cause := context.Cause(ctx)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.PartialAuditTimeout)
	defer cancel()
	_, err := s.b.ExpireDue(actx)
	var r Report
	if err == nil {
		r, err = s.report(actx, keys, elapsed)
	}
	r.Partial, r.Audited = true, err == nil
	r.Phases = s.phases(end, endCounters)
	if err != nil {
		// The buyers' figures only: nothing read from the books.
		r, _ = s.report(actx, nil, elapsed)
		r.Partial, r.Phases, r.Stock, r.Shops = true, s.phases(end, endCounters), s.cfg.Stock*int64(len(keys)), nil
		for _, paid := range s.paid {
			r.Paid += paid
		}
		return r, fmt.Errorf("flashsale: interrupted after %d of %d buyers (%w); its books could not be read within %v: %w",
			r.Buyers, s.cfg.Buyers, cause, s.cfg.PartialAuditTimeout, err)
	}
	return r, fmt.Errorf("flashsale: interrupted after %d of %d buyers: %w", r.Buyers, s.cfg.Buyers, cause)
}

// checkPhases asks the source of truth of every reservation of the sale
// whether it agrees with its customer, per phase.
func (s *sale) checkPhases(ctx context.Context, ts TruthStater, phases []Phase) error {
	for b := range min(len(s.phaseOf), int(s.started.Load())) {
		if s.latencies[b] == 0 {
			continue // never reserved
		}
		st, err := ts.TruthState(ctx, s.shopOf[b], fmt.Sprintf("buyer-%d", b))
		if err != nil {
			return fmt.Errorf("flashsale: books of buyer %d: %w", b, err)
		}
		ph := &phases[s.phaseOf[b]]
		ph.Checked++
		if (st == reservation.StateClaimed) != s.paidOf[b] || st == reservation.StateHeld {
			ph.Wrong++
		}
	}
	return nil
}

// counters reads a Counting backend's counters (nil otherwise).
func counters(b Backend) map[string]int64 {
	if c, ok := b.(Counting); ok {
		return c.Counters()
	}
	return nil
}

func (s *sale) phases(end time.Time, endCounters map[string]int64) []Phase {
	out := make([]Phase, len(s.phaseStart))
	for i := range out {
		out[i].Name = "start"
		if i > 0 {
			out[i].Name = s.cfg.Events[i-1].Name
		}
	}
	for b, ph := range s.phaseOf[:min(len(s.phaseOf), int(s.started.Load()))] {
		out[ph].Buyers++
		if s.latencies[b] > 0 {
			out[ph].Reserves++
		}
	}
	for i := range out {
		stop := end
		if i+1 < len(out) && !s.phaseStart[i+1].IsZero() {
			stop = s.phaseStart[i+1]
		}
		if s.phaseStart[i].IsZero() {
			continue // never reached (Duration ran out)
		}
		out[i].Elapsed = stop.Sub(s.phaseStart[i])
		if out[i].Elapsed > 0 {
			out[i].Throughput = float64(out[i].Reserves) / out[i].Elapsed.Seconds()
		}
		next := endCounters
		if i+1 < len(out) && s.phaseCounters[i+1] != nil {
			next = s.phaseCounters[i+1]
		}
		if next != nil {
			out[i].Counters = map[string]int64{}
			for k, v := range next {
				out[i].Counters[k] = v - s.phaseCounters[i][k]
			}
		}
	}
	return out
}

type sale struct {
	cfg           Config
	b             Backend
	shops         []uint64
	done          atomic.Int64
	started       atomic.Int64
	reserves      atomic.Int64
	claimed       atomic.Int64
	soldOut       atomic.Int64
	abandoned     atomic.Int64
	failed        atomic.Int64
	interrupted   atomic.Int64    // checkouts cut short by the end of ctx
	latencies     []time.Duration // by buyer; 0 when the reserve failed
	start         time.Time       // the sale's start
	reservedAt    []time.Duration // by buyer: when its successful reserve ended, since start
	refused       []time.Duration // by buyer: its refused reserve call's latency when turned away sold out; else 0
	refusedAt     []time.Duration // by buyer: when it was turned away, since start
	killed        atomic.Int64
	lostHolds     atomic.Int64
	restarts      atomic.Int64
	eventErr      atomic.Pointer[error]
	phaseOf       []int       // by buyer
	shopOf        []uint64    // by buyer
	paidOf        []bool      // by buyer: its claim succeeded
	abandonedOf   []bool      // by buyer: never paid on purpose
	phaseStart    []time.Time // written by the buyer that starts the phase, read after the sale
	phaseCounters []map[string]int64
	mu            sync.Mutex
	paid          map[reservation.ItemKey]int64 // units per item/group whose claim succeeded
}

// attempts bounds how often a buyer retries a call that failed with an
// error other than a refusal: a backend restarting answers again soon.
const attempts = 50

func (s *sale) buy(ctx context.Context, b int) {
	cfg := s.cfg
	p := reservation.ReserveParams{ShopID: s.pickShop(), ReservationID: fmt.Sprintf("buyer-%d", b)}
	s.shopOf[b] = p.ShopID
	groups := make([]uint64, cfg.Locations)
	for i := range groups {
		groups[i] = uint64(i + 1)
	}
	for _, item := range rand.Perm(cfg.Items)[:1+rand.IntN(cfg.CartSize)] {
		p.Lines = append(p.Lines, reservation.Line{ItemID: uint64(item + 1), Quantity: 1, GroupIDs: groups})
	}
	var lines []reservation.ReservedLine
	abandon := rand.Float64() < cfg.AbandonRate
	if abandon {
		p.TTL = cfg.AbandonTTL
	}
	if cfg.TxWork > 0 {
		p.InTx = func(ctx context.Context, _ *sql.Tx) error { return sleep(ctx, cfg.TxWork) }
	}
	// A buyer turned away while others hold the last units comes back when
	// abandoned holds expire: bounded attempts, so a sale always ends.
	for attempt := 0; ; attempt++ {
		start := time.Now()
		res, err := s.b.Reserve(ctx, p)
		for try := 1; err != nil && !errors.Is(err, reservation.ErrInsufficientStock) && try < attempts && ctx.Err() == nil; try++ {
			sleep(ctx, time.Duration(try)*time.Millisecond)
			res, err = s.b.Reserve(ctx, p)
		}
		took := time.Since(start)
		if err == nil {
			s.latencies[b] = took
			s.reservedAt[b] = time.Since(s.start)
			s.reserves.Add(1)
			lines = res.Lines
			break
		}
		if !errors.Is(err, reservation.ErrInsufficientStock) {
			s.failedOrInterrupted(ctx)
			return
		}
		// Like a shopper, drop the lines sold for good and keep the rest;
		// wait for abandoned holds to expire when a line has only those.
		var waiting bool
		p.Lines, waiting = s.keepLines(ctx, p)
		if len(p.Lines) == 0 || attempt >= 20 {
			s.refused[b] = max(took, 1) // 0 means not refused
			s.refusedAt[b] = time.Since(s.start)
			s.soldOut.Add(1)
			return
		}
		if waiting {
			s.b.ExpireDue(ctx)
			sleep(ctx, cfg.AbandonTTL)
		}
	}
	paid := false
	if cfg.Outcome != nil {
		defer func() { cfg.Outcome(p.ShopID, p.ReservationID, lines, paid) }()
	}
	if abandon {
		s.abandoned.Add(1)
		s.abandonedOf[b] = true
		return
	}
	sleep(ctx, cfg.PaymentDelay)
	// The buyer has paid. The claim is driven until it answers: after a
	// killed attempt (the process died) or a backend that is restarting.
	claimCtx := ctx
	if cfg.KillClaims > 0 && rand.Float64() < cfg.KillClaims {
		claimCtx = withKill(ctx)
	}
	for try := 0; try < attempts && ctx.Err() == nil; try++ {
		err := s.b.Claim(claimCtx, p.ShopID, p.ReservationID)
		if err == nil {
			s.claimed.Add(int64(len(p.Lines)))
			s.mu.Lock()
			for _, l := range lines {
				s.paid[reservation.ItemKey{ShopID: p.ShopID, ItemID: l.ItemID, GroupID: l.GroupID}] += l.Quantity
			}
			s.mu.Unlock()
			paid = true
			s.paidOf[b] = true
			return
		}
		switch {
		case errors.Is(err, ErrKilled):
			s.killed.Add(1)
			claimCtx = ctx
			continue
		case errors.Is(err, reservation.ErrNotFound):
			s.lostHolds.Add(1)
			return
		case errors.Is(err, reservation.ErrExpired), errors.Is(err, reservation.ErrReleased):
			s.failed.Add(1)
			return
		}
		sleep(ctx, time.Duration(try+1)*time.Millisecond)
	}
	s.failedOrInterrupted(ctx)
}

// failedOrInterrupted counts a checkout that ended without its answer:
// interrupted when ctx ended, failed otherwise.
func (s *sale) failedOrInterrupted(ctx context.Context) {
	if ctx.Err() != nil {
		s.interrupted.Add(1)
		return
	}
	s.failed.Add(1)
}

// pickShop picks a buyer's shop: the i-th of n with weight i+1.
func (s *sale) pickShop() uint64 {
	n := len(s.shops)
	r := rand.IntN(n * (n + 1) / 2)
	for i := range n {
		if r < i+1 {
			return s.shops[i]
		}
		r -= i + 1
	}
	return s.shops[n-1]
}

// keepLines returns the lines of p that can still be sold: units sellable
// per the ledger, or held by others (they come back if abandoned); waiting
// reports that some kept line has nothing sellable right now.
func (s *sale) keepLines(ctx context.Context, p reservation.ReserveParams) ([]reservation.Line, bool) {
	ctx = conntag.WithTag(ctx, auditTag)
	var kept []reservation.Line
	waiting := false
	for _, l := range p.Lines {
		var sellable, held int64
		for _, g := range l.GroupIDs {
			k := reservation.ItemKey{ShopID: p.ShopID, ItemID: l.ItemID, GroupID: g}
			n, h, err := s.b.Sellable(ctx, k)
			if err != nil {
				return nil, false
			}
			sellable += n
			held += h
		}
		if sellable >= l.Quantity || held > 0 {
			kept = append(kept, l)
			waiting = waiting || sellable < l.Quantity
		}
	}
	return kept, waiting
}

func (s *sale) report(ctx context.Context, keys []reservation.ItemKey, elapsed time.Duration) (Report, error) {
	r := Report{Backend: s.b.Name(), Elapsed: elapsed, Reserves: s.reserves.Load(),
		Stock: s.cfg.Stock * int64(len(keys)), SoldOut: s.soldOut.Load(), Abandoned: s.abandoned.Load(),
		FailedCalls: s.failed.Load(), KilledClaims: s.killed.Load(), Restarts: s.restarts.Load(), LostHolds: s.lostHolds.Load(),
		Interrupted: s.interrupted.Load(), Buyers: s.started.Load()}
	if eb, ok := s.b.(*engineBackend); ok {
		st := eb.e.Stats()
		r.Strategy, r.Retries, r.Refills, r.ShortReads = eb.strategy, st.Retries, st.InlineRefills, st.ShortReads
	}
	r.Throughput = float64(r.Reserves) / elapsed.Seconds()
	// Only the buyers admitted have figures: an interrupted sale of
	// 2,000,000 buyers spent 0.5 s of a loaded machine's CPU going over
	// (and copying) every slot, from its 600 ms audit budget.
	n := min(int(r.Buyers), len(s.latencies))
	r.ReserveP50, r.ReserveP99 = percentiles(s.latencies[:n])
	r.SoldOutP50, r.SoldOutP99 = percentiles(s.refused[:n])
	// The reserving part ends with the last successful reserve; the
	// sold-out part is the refusals after it.
	for _, at := range s.reservedAt[:n] {
		r.ReservingElapsed = max(r.ReservingElapsed, at)
	}
	if r.ReservingElapsed > 0 {
		r.ReservingThroughput = float64(r.Reserves) / r.ReservingElapsed.Seconds()
	}
	var lastRefusal time.Duration
	for b, d := range s.refused[:n] {
		if d > 0 && s.refusedAt[b] > r.ReservingElapsed {
			r.SoldOutAfter++
			lastRefusal = max(lastRefusal, s.refusedAt[b])
		}
	}
	if r.SoldOutAfter > 0 {
		r.SoldOutElapsed = lastRefusal - r.ReservingElapsed
		r.SoldOutRate = float64(r.SoldOutAfter) / r.SoldOutElapsed.Seconds()
	}
	type shopBooks struct {
		ShopReport
		ledgerOnly, wanted int64
	}
	perShop := map[uint64]*shopBooks{}
	for _, shop := range s.shops {
		perShop[shop] = &shopBooks{ShopReport: ShopReport{ShopID: shop}}
	}
	for _, k := range keys {
		b, err := s.b.Audit(ctx, k)
		if err != nil {
			return r, err
		}
		s.mu.Lock()
		paid := s.paid[k]
		s.mu.Unlock()
		oversold := max(0, paid-s.cfg.Stock) + max(0, paid-b.Claimed)
		held := max(0, b.Held-b.OrphanHeld) // held by live reservations
		r.Sold += b.Claimed
		r.Paid += paid
		r.Oversold += oversold
		r.Undersold += max(0, b.Claimed-paid) // units the ledger counts sold that nobody paid for
		r.Leaked += b.Leaked()
		r.Held += held
		r.OnHand += b.OnHand
		sb := perShop[k.ShopID]
		sb.Stock += s.cfg.Stock
		sb.Sold += b.Claimed
		sb.Paid += paid
		sb.Held += held
		sb.OnHand += b.OnHand
		sb.Oversold += oversold
		sb.Leaked += b.Leaked()
		sb.ledgerOnly += max(0, b.Claimed-paid)
	}
	for _, shop := range s.shops {
		r.Shops = append(r.Shops, perShop[shop].ShopReport)
	}
	// A shop whose buyers (those who meant to pay) were as many as its
	// units, all of whom came, sells every unit: any left is undersold.
	// (One unit per buyer: known for one-line carts, and for one shop as
	// before, where every cart takes at least one unit.)
	for b := range min(int(r.Buyers), len(s.shopOf)) {
		if !s.abandonedOf[b] {
			perShop[s.shopOf[b]].wanted++
		}
	}
	if r.Buyers == int64(s.cfg.Buyers) && (s.cfg.CartSize == 1 || len(s.shops) == 1) {
		for _, sb := range perShop {
			if sb.wanted >= sb.Stock {
				r.Undersold += max(0, sb.Stock-sb.Paid-sb.ledgerOnly)
			}
		}
	}
	return r, nil
}

// percentiles returns the p50 and p99 of the non-zero durations of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	var lat []time.Duration
	for _, d := range ds {
		if d != 0 {
			lat = append(lat, d)
		}
	}
	slices.Sort(lat)
	if len(lat) == 0 {
		return 0, 0
	}
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
}

// auditTag is the conntag tag of the harness's own reads, so that they are
// not counted as the engine's.
const auditTag = "flashsale_audit"

// Books is the accounting of one item/group.
type Books struct {
	OnHand, Claimed, Pooled, Held int64
	// OrphanHeld is held quantity whose reservation is no longer held.
	OrphanHeld int64
	// separate: Pooled and Held are another system's counts than OnHand
	// (the Redis design), so they cannot be checked against each other.
	separate bool
}

// Leaked is the units counted twice or held by no live reservation.
func (b Books) Leaked() int64 {
	if b.separate {
		return b.OrphanHeld
	}
	return b.OrphanHeld + max(0, b.Pooled+b.Held-b.OnHand)
}

// Audit reads the books of one item/group in one statement, so that under
// READ COMMITTED every figure comes from one snapshot: a reserve, a release
// or an expiry committed between two reads would count units twice or hide
// them (and with them a leak). Stop the engine's Run first: the sweeper and
// the refiller move units while it runs.
func Audit(ctx context.Context, db *sql.DB, strategy reservation.Strategy, k reservation.ItemKey) (Books, error) {
	ctx = conntag.WithTag(ctx, auditTag)
	var b Books
	q := auditUnits
	if strategy == reservation.StrategyCounter {
		q = auditCounter
	}
	args := []any{k.ShopID, k.ItemID, k.GroupID}
	err := db.QueryRowContext(ctx, q, slices.Concat(args, args, args, args, args)...).
		Scan(&b.OnHand, &b.Claimed, &b.Pooled, &b.Held, &b.OrphanHeld)
	if err != nil {
		return b, fmt.Errorf("flashsale: audit %+v: %w", k, err)
	}
	return b, nil
}

// The books of one item/group: on hand, claimed, pooled, held, and held by
// reservations no longer held. Each takes shop, item and group.
const (
	auditLedger = `SELECT COALESCE((SELECT on_hand FROM inventory_ledger ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), 0), ` +
		`COALESCE((SELECT claimed FROM inventory_ledger ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), 0), `
	auditHeld = `COALESCE((SELECT SUM(quantity) FROM inventory_reserved_quantities ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), 0), ` +
		`COALESCE((SELECT SUM(q.quantity) FROM inventory_reserved_quantities q ` +
		`JOIN inventory_reservations r ON r.shop_id = q.shop_id AND r.reservation_id = q.reservation_id ` +
		`WHERE r.state <> 'held' AND q.shop_id = ? AND q.inventory_item_id = ? AND q.inventory_group_id = ?), 0)`
	auditUnits = auditLedger + `(SELECT COUNT(*) FROM inventory_reservation_units ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), ` + auditHeld
	auditCounter = auditLedger + `COALESCE((SELECT SUM(available) FROM inventory_pool_counters ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), 0), ` + auditHeld
)

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
