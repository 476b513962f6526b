package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/flashsale"
	"github.com/holdtime/holdtime/reservation/migration"
	"github.com/holdtime/holdtime/reservation/redisstock"
	"github.com/holdtime/holdtime/testenv"
)

// flashsaleCmd runs the reservation engine's flash-sale harness.
type flashsaleCmd struct {
	out, errOut io.Writer

	dsn          string
	strategy     string
	compare      bool
	jsonOut      bool
	buyers       int
	concurrency  int
	items        int
	locations    int
	stock        int64
	stockSet     bool // --stock given: --compare keeps it
	cartSize     int
	poolSize     int
	paymentDelay time.Duration
	abandonRate  float64
	abandonTTL   time.Duration
	txWork       time.Duration
	duration     time.Duration
	metricsAddr  string
	mux          *http.ServeMux // the --metrics-listen server's
	otlpEndpoint string
	otlpMetrics  string // /v1/metrics URL
	timeout      time.Duration

	backend       string
	claimOrder    string
	killClaims    float64
	restarts      int
	redisAddr     string
	persistence   string
	shops         int
	migrate       bool
	shadowTimeout time.Duration
	quietPeriod   time.Duration
}

// flashsaleStrategies are the strategies --compare runs, the engine first.
var flashsaleStrategies = []reservation.Strategy{
	reservation.StrategySkipLocked, reservation.StrategyForUpdate, reservation.StrategyCounter,
}

func newFlashsaleCmd() *cobra.Command {
	f := &flashsaleCmd{}
	cmd := &cobra.Command{
		Use:   "flashsale",
		Short: "Run a flash sale through the reservation engine and check that the books balance",
		Long: `flashsale sells a few hot items to many concurrent buyers through the SKIP LOCKED
reservation engine (or a baseline strategy), every statement tagged with conntag,
and reports throughput, reserve latency p50/p99 and the books: sold, oversold,
undersold and leaked units, retries and inline refills.

--backend redis sells through the design the engine replaced: one Redis counter per
item and location, holds in Redis, claims that update the MySQL ledger and Redis with no
shared transaction (--claim-order). --kill-claims kills that share of claims between
their two halves (the claim is then driven again, like a redelivered payment webhook);
--restarts crashes Redis (or, for the engine, KILLs the sale's MySQL connections) during
the sale. The books then show what each design does with a fault: the Redis design
oversells or undersells, the engine does neither.

--backend shadow keeps Redis the source of truth and shadows every call into MySQL,
counting mismatches; --migrate moves --shops shops through the stages (redis, shadow,
mysql, lowest-volume shops first) during the sale, flips the kill switch on and off, and
prints per phase the throughput and the mismatches, then the books of every
reservation's source of truth. Without --stock it stocks 9/10 of --buyers evenly over
the shops: with one shop every stage sells and the sale sells out in the last ones, the
shop moved across both systems (with more shops the busiest sells out earlier). With --metrics-listen the kill switch is also at
/killswitch (holdtime killswitch).

--compare runs the engine (skip_locked) and the baselines (for_update, counter) with
the same knobs and compares their reserving: reserves per second from the start to the
last successful reserve, while stock lasts. Without --stock it stocks 9/10 of --buyers
(spread over the items and locations), so most buyers reserve and the rest measure the
sold-out path, which a second table reports apart: refusals after the last unit, per
second, and the latency of the refused reserve calls (the engine tries an inline refill
under the ledger lock before refusing).

A Redis is started for the sale (redis-server from PATH) unless --redis names one.

It starts a throwaway MySQL-compatible server unless --dsn names a database, in
which it creates the engine's tables (inventory_*) and sells in a shop of its own.`,
		Example: `  holdtime flashsale
  holdtime flashsale --concurrency 64 --tx-work 2ms --compare
  holdtime flashsale --backend redis --claim-order redis_first --kill-claims 0.2 --restarts 1
  holdtime flashsale --migrate --shops 5 --metrics-listen 127.0.0.1:9480   # then: holdtime killswitch on --url http://127.0.0.1:9480
  holdtime flashsale --dsn 'app:secret@tcp(db:3306)/shop' --buyers 5000 --abandon-rate 0.2 --json`,
		Args: noArgs("give the database with --dsn 'user:pass@tcp(host:3306)/dbname' (quoted: its parentheses are special to the shell)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.out, f.errOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
			f.stockSet = cmd.Flags().Changed("stock")
			if f.migrate && !cmd.Flags().Changed("redis-persistence") {
				// A migration's Redis keeps its writes: a crash that
				// loses them is lesson 2, not the migration's subject.
				f.persistence = string(testenv.PersistenceAOF)
			}
			return f.run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dsn, "dsn", "", "sell in this database (go-sql-driver/mysql DSN, user:pass@tcp(host:port)/dbname) instead of a throwaway server")
	fl.StringVar(&f.strategy, "strategy", string(reservation.StrategySkipLocked), "skip_locked, for_update or counter")
	fl.BoolVar(&f.compare, "compare", false, "run every strategy with the same knobs and print a comparison")
	fl.BoolVar(&f.jsonOut, "json", false, "print JSON")
	fl.IntVar(&f.buyers, "buyers", 1000, "checkouts to attempt")
	fl.IntVar(&f.concurrency, "concurrency", 16, "buyers checking out at once")
	fl.IntVar(&f.items, "items", 1, "distinct items on sale")
	fl.IntVar(&f.locations, "locations", 1, "location groups per item, tried in order")
	fl.Int64Var(&f.stock, "stock", 100, "units per item and location (--compare and --migrate without --stock: 9/10 of --buyers over the items, locations and shops)")
	fl.IntVar(&f.cartSize, "cart-size", 1, "at most this many lines per cart, each one unit of a distinct item")
	fl.IntVar(&f.poolSize, "pool-size", 0, "pooled units per item and location (0: the engine's default, 1000)")
	fl.DurationVar(&f.paymentDelay, "payment-delay", 0, "time between reserve and claim")
	fl.Float64Var(&f.abandonRate, "abandon-rate", 0, "share of buyers who never pay (their holds expire), 0 to 1")
	fl.DurationVar(&f.abandonTTL, "abandon-ttl", time.Millisecond, "hold time of abandoned carts before they expire")
	fl.DurationVar(&f.txWork, "tx-work", 0, "application work inside the reserve transaction, holding its locks")
	fl.DurationVar(&f.duration, "duration", 0, "stop admitting buyers after this long (0: until every buyer is done)")
	fl.StringVar(&f.metricsAddr, "metrics-listen", "", "serve the sale's app-side metrics (conntag, reservation engine) on this address at /metrics, and conntag's hold profile at /debug/holdtime/profile, while it runs, e.g. 127.0.0.1:9480")
	fl.StringVar(&f.otlpMetrics, "otlp-metrics-endpoint", "", "export conntag's per-tag counters every 10s over OTLP/HTTP to this URL, e.g. http://127.0.0.1:9479/v1/metrics (holdtime collect --otlp-metrics): the app layer's figures from counters, exact however spans are sampled")
	fl.StringVar(&f.otlpEndpoint, "otlp-endpoint", "", "send conntag's spans (hold and statement, with the session id) over OTLP/HTTP to this URL, e.g. http://127.0.0.1:9479/v1/traces (holdtime collect --otlp)")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for --dsn's server to accept a connection and log in")
	fl.StringVar(&f.backend, "backend", "mysql", "mysql (the engine), redis (the design it replaced) or shadow (Redis the truth, MySQL shadowed)")
	fl.StringVar(&f.claimOrder, "claim-order", string(redisstock.ClaimLedgerFirst), "--backend redis: ledger_first or redis_first")
	fl.Float64Var(&f.killClaims, "kill-claims", 0, "share of claims killed between their two halves and driven again, 0 to 1")
	fl.IntVar(&f.restarts, "restarts", 0, "restart Redis this many times during the sale (the engine: KILL the sale's MySQL connections)")
	fl.StringVar(&f.redisAddr, "redis", "", "use this Redis (host:port) instead of a throwaway redis-server (--restarts needs the throwaway one)")
	fl.StringVar(&f.persistence, "redis-persistence", string(testenv.PersistenceSnapshot), "the throwaway Redis's persistence: snapshot (Debian's default: RDB, taken after stocking), none or aof (the default with --migrate)")
	fl.IntVar(&f.shops, "shops", 1, "shops selling, each with every item; their volumes rise 1:2:…:n")
	fl.BoolVar(&f.migrate, "migrate", false, "move the shops from Redis to MySQL through every stage during the sale, flipping the kill switch")
	fl.DurationVar(&f.shadowTimeout, "shadow-timeout", 100*time.Millisecond, "--backend shadow, --migrate: the most a shadow call may add to a customer's call")
	fl.DurationVar(&f.quietPeriod, "quiet-period", 40*time.Millisecond, "--migrate: how long a shop stays in shadow without a mismatch before the gate promotes it (an app's default is 10m; a sale is short)")
	return cmd
}

// config validates the flags and turns them into the harness's config
// (without a database).
func (f *flashsaleCmd) config() (flashsale.Config, []reservation.Strategy, error) {
	cfg := flashsale.Config{Buyers: f.buyers, Concurrency: f.concurrency, Items: f.items, Locations: f.locations,
		Stock: f.stock, CartSize: f.cartSize, PoolSize: f.poolSize, PaymentDelay: f.paymentDelay,
		AbandonRate: f.abandonRate, AbandonTTL: f.abandonTTL, TxWork: f.txWork, Duration: f.duration}
	for name, n := range map[string]int64{"--buyers": int64(f.buyers), "--concurrency": int64(f.concurrency),
		"--items": int64(f.items), "--locations": int64(f.locations), "--stock": f.stock, "--cart-size": int64(f.cartSize)} {
		if n < 1 {
			return cfg, nil, fmt.Errorf("%s %d: give at least 1", name, n)
		}
	}
	if f.cartSize > f.items {
		return cfg, nil, fmt.Errorf("--cart-size %d is more than --items %d: each line is a distinct item", f.cartSize, f.items)
	}
	if f.poolSize < 0 {
		return cfg, nil, fmt.Errorf("--pool-size %d: give 0 for the default or a positive size", f.poolSize)
	}
	if f.abandonRate < 0 || f.abandonRate > 1 {
		return cfg, nil, fmt.Errorf("--abandon-rate %v: give a share from 0 to 1", f.abandonRate)
	}
	for name, d := range map[string]time.Duration{"--payment-delay": f.paymentDelay, "--abandon-ttl": f.abandonTTL,
		"--tx-work": f.txWork, "--duration": f.duration} {
		if d < 0 {
			return cfg, nil, fmt.Errorf("%s %v is negative", name, d)
		}
	}
	if f.otlpEndpoint != "" {
		u, err := otlpTracesURL(f.otlpEndpoint)
		if err != nil {
			return cfg, nil, err
		}
		f.otlpEndpoint = u
	}
	if f.otlpMetrics != "" {
		u, err := otlpURL("otlp-metrics-endpoint", f.otlpMetrics, "/v1/metrics")
		if err != nil {
			return cfg, nil, err
		}
		f.otlpMetrics = u
	}
	if f.timeout <= 0 {
		return cfg, nil, fmt.Errorf("--timeout %v: give how long to wait for the server, such as 10s", f.timeout)
	}
	if f.metricsAddr != "" {
		if err := checkListen("metrics-listen", f.metricsAddr); err != nil {
			return cfg, nil, err
		}
	}
	if f.migrate {
		f.backend = "shadow"
	}
	switch f.backend {
	case "mysql", "redis", "shadow":
	default:
		return cfg, nil, fmt.Errorf("unknown --backend %q: use mysql, redis or shadow", f.backend)
	}
	switch redisstock.ClaimOrder(f.claimOrder) {
	case redisstock.ClaimLedgerFirst, redisstock.ClaimRedisFirst:
	default:
		return cfg, nil, fmt.Errorf("unknown --claim-order %q: use ledger_first or redis_first", f.claimOrder)
	}
	switch testenv.Persistence(f.persistence) {
	case testenv.PersistenceSnapshot, testenv.PersistenceNone, testenv.PersistenceAOF:
	default:
		return cfg, nil, fmt.Errorf("unknown --redis-persistence %q: use snapshot, none or aof", f.persistence)
	}
	if f.killClaims < 0 || f.killClaims > 1 {
		return cfg, nil, fmt.Errorf("--kill-claims %v: give a share from 0 to 1", f.killClaims)
	}
	if f.restarts < 0 || f.shops < 1 || f.shadowTimeout <= 0 || f.quietPeriod <= 0 {
		return cfg, nil, errors.New("--restarts must not be negative, --shops at least 1, --shadow-timeout and --quiet-period positive")
	}
	if f.restarts > 0 && f.redisAddr != "" && f.backend != "mysql" {
		return cfg, nil, errors.New("--restarts crashes the throwaway Redis: leave out --redis")
	}
	if f.compare && f.backend != "mysql" {
		return cfg, nil, errors.New("--compare runs the engine's strategies: use it with --backend mysql")
	}
	cfg.KillClaims, cfg.Restarts = f.killClaims, f.restarts
	if f.compare && f.shops > 1 {
		return cfg, nil, errors.New("--compare sells in one shop per strategy: leave out --shops")
	}
	if f.shops > 1 || f.backend == "shadow" {
		// Fresh ids: sales against one database never share a shop.
		base := uint64(time.Now().UnixNano()/1000) * 100
		for i := range f.shops {
			cfg.ShopIDs = append(cfg.ShopIDs, base+uint64(i+1))
		}
	}
	if f.migrate && !f.stockSet {
		// With one shop every stage sells, and the sale sells out in the
		// last ones, the shop moved across Redis and MySQL: the case where
		// a unit could be sold twice. (Shops' volumes rise 1:2:…:n on equal
		// stock: with more, the busiest sells out earlier.) With 100 units
		// for 1,000 buyers it sold out in its first stage, still all
		// Redis, and the later stages had nothing to move.
		f.stock = max(1, int64(f.buyers)*9/10/int64(f.items*f.locations*f.shops))
		cfg.Stock = f.stock
	}
	if f.compare {
		if !f.stockSet {
			// Compare reserving, not the sold-out path: most buyers find
			// stock, the last tenth are turned away (reported apart).
			f.stock = max(1, int64(f.buyers)*9/10/int64(f.items*f.locations))
			cfg.Stock = f.stock
		}
		return cfg, flashsaleStrategies, nil
	}
	s := reservation.Strategy(f.strategy)
	switch s {
	case reservation.StrategySkipLocked, reservation.StrategyForUpdate, reservation.StrategyCounter:
	default:
		return cfg, nil, fmt.Errorf("unknown --strategy %q: use skip_locked, for_update or counter", f.strategy)
	}
	return cfg, []reservation.Strategy{s}, nil
}

func (f *flashsaleCmd) run(ctx context.Context) error {
	cfg, strategies, err := f.config()
	if err != nil {
		return err
	}
	mc, where, cleanup, err := f.database(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.MySQL = mc
	var readers []sdkmetric.Reader
	if f.otlpMetrics != "" {
		r, err := exportCounters(ctx, f.otlpMetrics)
		if err != nil {
			return err
		}
		readers = append(readers, r)
	}
	if f.metricsAddr != "" {
		mp, mux, stop, err := serveAppMetricsMux(ctx, f.metricsAddr, readers...)
		if err != nil {
			return err
		}
		defer stop()
		cfg.MeterProvider, f.mux = mp, mux
		cfg.HoldProfile = serveHoldProfile(mux, 0, nil, "") // holdprofile.go
	} else if len(readers) > 0 {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(readers[0]))
		// Shutdown exports the last counters: the sale's end is in them.
		defer mp.Shutdown(context.WithoutCancel(ctx))
		cfg.MeterProvider = mp
	}
	if f.otlpEndpoint != "" {
		db, stop, err := flashsaleSpanDB(ctx, f.otlpEndpoint, mc, cfg)
		if err != nil {
			return err
		}
		defer stop()
		cfg.DB = db
	}
	var killSwitch http.Handler
	if f.backend != "mysql" || f.restarts > 0 {
		var cleanup func()
		var err error
		cleanup, killSwitch, err = f.setupBackend(ctx, &cfg, mc)
		if err != nil {
			return err
		}
		defer cleanup()
	}
	if killSwitch != nil && f.metricsAddr != "" {
		f.mux.Handle("/killswitch", killSwitch)
	}
	if !f.jsonOut {
		fmt.Fprintf(f.out, "flash sale on %s: %d buyers, %d at once, %d shop(s) x %d item(s) x %d location(s) x %d units\n\n",
			where, f.buyers, f.concurrency, f.shops, f.items, f.locations, f.stock)
	}
	var reports []flashsale.Report
	for _, s := range strategies {
		cfg.Strategy = s
		var bar func(done, total int)
		if stderr, ok := f.errOut.(*os.File); ok {
			bar = flashsale.ProgressBar(stderr) // nil unless a terminal
		}
		// Buyers served so far: what an interrupted sale can still tell.
		var served atomic.Int64
		started := time.Now()
		var first sync.Once
		cfg.Progress = func(done, total int) {
			for {
				n := served.Load()
				if int64(done) <= n || served.CompareAndSwap(n, int64(done)) {
					break
				}
			}
			if !f.jsonOut {
				first.Do(func() {
					fmt.Fprintf(f.out, "selling with strategy %s: first buyer served after %v (Ctrl-C stops the sale and says how far it got)\n",
						cmp.Or(string(s), f.backend), time.Since(started).Round(time.Millisecond))
				})
			}
			if bar != nil {
				bar(done, total)
			}
		}
		stock := cfg.AfterStock
		cfg.AfterStock = func(ctx context.Context) error {
			started = time.Now() // the sale proper starts
			if stock != nil {
				return stock(ctx)
			}
			return nil
		}
		// A signal must end the command within a second: the interrupted
		// sale's audit gets most of it.
		cfg.PartialAuditTimeout = flashsalePartialAudit
		r, err := flashsale.Run(ctx, cfg)
		cfg.AfterStock, cfg.Progress = stock, nil
		if err != nil && ctx.Err() != nil {
			return f.interrupted(ctx, s, reports, r, err, served.Load(), time.Since(started))
		}
		if err != nil {
			return fmt.Errorf("flash sale with strategy %s: %w", s, err)
		}
		reports = append(reports, r)
	}
	switch {
	case f.jsonOut:
		err = writeFlashsaleJSON(f.out, where, reports)
	case len(reports) > 1:
		err = writeFlashsaleComparison(f.out, reports)
	default:
		err = writeFlashsaleReport(f.out, reports[0])
	}
	if err != nil {
		return err
	}
	for _, r := range reports {
		if r.Strategy == "" && r.Backend != "migration" {
			continue // the Redis design: its oversell is the lesson, not a bug
		}
		if r.Oversold > 0 || r.Leaked > 0 {
			return fmt.Errorf("%s: the books do not balance (%d oversold, %d leaked): this is a bug, please report it",
				r.Backend, r.Oversold, r.Leaked)
		}
	}
	return nil
}

// flashsalePartialAudit bounds the audit of a sale a signal stopped: the
// command exits within a second of the signal.
const flashsalePartialAudit = 600 * time.Millisecond

// interrupted reports a sale a signal stopped: the strategies that ran to
// their end, then the interrupted one's report, marked PARTIAL: the buyers
// admitted so far and its books, audited once they stopped (or why they
// could not be: runErr).
func (f *flashsaleCmd) interrupted(ctx context.Context, s reservation.Strategy, done []flashsale.Report, r flashsale.Report,
	runErr error, served int64, took time.Duration) error {
	fmt.Fprintln(f.errOut, "holdtime flashsale: interrupted: stopping (Ctrl-C again exits at once)")
	name := cmp.Or(string(s), f.backend)
	if f.jsonOut {
		part := flashsaleRunJSON(r)
		doc := map[string]any{"partial": true, "interrupted_strategy": name, "buyers": f.buyers,
			"buyers_served": served, "elapsed_seconds": took.Seconds(), "completed": done, "interrupted": part,
			"books_balance": r.Audited && r.Balanced()}
		if !r.Audited {
			doc["audit_error"] = runErr.Error()
		}
		if err := json.NewEncoder(f.out).Encode(doc); err != nil {
			return err
		}
		return ctx.Err()
	}
	for _, r := range done {
		if err := writeFlashsaleReport(f.out, r); err != nil {
			return err
		}
		fmt.Fprintln(f.out)
	}
	fmt.Fprintf(f.out, "PARTIAL: interrupted after %v: strategy %s served %d of %d buyers (%.1f buyers/s)",
		took.Round(time.Millisecond), name, served, f.buyers, float64(served)/max(took.Seconds(), 1e-3))
	if !r.Audited {
		fmt.Fprintf(f.out, "; its books could not be audited, so nothing is said of oversold, undersold or leaked units (%v)\n", runErr)
		return ctx.Err()
	}
	fmt.Fprintln(f.out, "; its books, audited after the buyers stopped:")
	if err := writeFlashsaleReport(f.out, r); err != nil {
		return err
	}
	fmt.Fprintln(f.out, flashsaleBooks(r))
	return ctx.Err()
}

func unitsWord(n int64) string {
	if n == 1 {
		return "unit"
	}
	return "units"
}

// flashsaleBooks says whether an interrupted sale's books balance, and if
// not, why not.
func flashsaleBooks(r flashsale.Report) string {
	var why []string
	if r.Sold+r.OnHand != r.Stock {
		why = append(why, fmt.Sprintf("%d sold + %d on hand is not the %d stocked", r.Sold, r.OnHand, r.Stock))
	}
	if r.Oversold > 0 {
		why = append(why, fmt.Sprintf("%d oversold", r.Oversold))
	}
	if r.Leaked > 0 {
		why = append(why, fmt.Sprintf("%d leaked", r.Leaked))
	}
	var notes []string
	if r.Held > 0 {
		notes = append(notes, fmt.Sprintf("%d %s still held by buyers the signal cut off before paying (they expire like any hold)", r.Held, unitsWord(r.Held)))
	}
	if r.Undersold > 0 {
		notes = append(notes, fmt.Sprintf("%d %s claimed as the signal cut their buyer off before the answer (undersold: sold, nobody told)", r.Undersold, unitsWord(r.Undersold)))
	}
	line := fmt.Sprintf("books balance: %d sold + %d on hand = %d stocked, 0 oversold, 0 leaked", r.Sold, r.OnHand, r.Stock)
	if len(why) > 0 {
		line = "books DO NOT balance: " + strings.Join(why, "; ")
	}
	if len(notes) > 0 {
		line += "; " + strings.Join(notes, "; ")
	}
	return line
}

// database returns the driver config to sell in, a description without
// credentials, and what to undo afterwards.
func (f *flashsaleCmd) database(ctx context.Context) (*mysql.Config, string, func(), error) {
	if f.dsn != "" {
		mc, err := mysql.ParseDSN(f.dsn)
		if err != nil {
			// The parse error can quote the DSN, password included.
			return nil, "", nil, errors.New("--dsn is not a go-sql-driver/mysql DSN: use user:pass@tcp(host:port)/dbname")
		}
		where := flashsaleRedact(mc)
		if mc.DBName == "" {
			return nil, "", nil, fmt.Errorf("--dsn %s names no database: add /dbname (the engine's tables are created there)", where)
		}
		// A server that accepts and never answers must not hang the sale:
		// connecting is bounded (the sale's statements are not: they may
		// wait on locks).
		mc.Timeout = cmp.Or(mc.Timeout, f.timeout)
		if err := flashsalePing(ctx, mc, f.timeout); err != nil {
			if ctx.Err() != nil {
				return nil, "", nil, ctx.Err()
			}
			msg := err.Error()
			if mc.Passwd != "" {
				msg = strings.ReplaceAll(msg, mc.Passwd, "xxx")
			}
			kind := collector.FailureOf(err)
			if kind == collector.FailureOther && errors.Is(err, mysql.ErrInvalidConn) {
				// The peer closed before its greeting ended: the driver's
				// log says EOF, its error only "invalid connection".
				kind = collector.FailureClosed
			}
			if errors.Is(err, context.DeadlineExceeded) {
				kind, msg = collector.FailureTimeout, ""
			}
			return nil, "", nil, fmt.Errorf("--dsn: %s", explainFailure(localTarget{kind: "flashsale", addr: mc.Addr, net: mc.Net}, kind, msg, f.timeout))
		}
		return mc, where, func() {}, nil
	}
	target, err := testenv.OpenTarget(ctx)
	if err != nil {
		return nil, "", nil, fmt.Errorf("start a throwaway server (or give --dsn): %w", err)
	}
	d, err := target.CreateDatabase(ctx, "flashsale")
	if err != nil {
		target.Close()
		return nil, "", nil, err
	}
	cleanup := func() {
		d.Drop(context.WithoutCancel(ctx))
		target.Close()
	}
	return d.Config(), fmt.Sprintf("%s %s at %s", target.Flavor, target.Version, target.Redacted()), cleanup, nil
}

// flashsaleRedact describes a DSN without its password.
func flashsaleRedact(mc *mysql.Config) string {
	return fmt.Sprintf("%s@%s(%s)/%s", mc.User, mc.Net, mc.Addr, mc.DBName)
}

// flashsalePing connects as the sale will and runs one statement in the
// DSN's database: ProxySQL accepts a login naming a database that does not
// exist and fails only the first statement (reservation's Migrate then
// blamed another Migrate holding its lock, issue 25). The statement's
// error is the server's own (1049 Unknown database), which explainFailure
// names.
func flashsalePing(ctx context.Context, mc *mysql.Config, timeout time.Duration) error {
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	db := sql.OpenDB(connector)
	defer db.Close()
	var name sql.NullString
	return db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name)
}

func writeFlashsaleReport(w io.Writer, r flashsale.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if r.Strategy != "" {
		fmt.Fprintf(tw, "strategy\t%s\n", r.Strategy)
	} else {
		fmt.Fprintf(tw, "backend\t%s\n", r.Backend)
	}
	fmt.Fprintf(tw, "throughput\t%.1f reserves/s (%d reserves in %v)\n", r.Throughput, r.Reserves, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(tw, "reserve latency\tp50 %v, p99 %v\n", r.ReserveP50.Round(time.Microsecond), r.ReserveP99.Round(time.Microsecond))
	fmt.Fprintf(tw, "reserving\t%.1f reserves/s until the last successful reserve (%v)\n", r.ReservingThroughput, r.ReservingElapsed.Round(time.Millisecond))
	if r.SoldOut > 0 {
		fmt.Fprintf(tw, "sold-out path\t%s; refused reserve call p50 %v, p99 %v\n", soldOutRate(r),
			r.SoldOutP50.Round(time.Microsecond), r.SoldOutP99.Round(time.Microsecond))
	}
	fmt.Fprintf(tw, "sold\t%d of %d units\n", r.Sold, r.Stock)
	fmt.Fprintf(tw, "oversold\t%d\n", r.Oversold)
	fmt.Fprintf(tw, "undersold\t%d\n", r.Undersold)
	fmt.Fprintf(tw, "leaked\t%d\n", r.Leaked)
	fmt.Fprintf(tw, "buyers\t%d came, %d turned away sold out, %d abandoned\n", r.Buyers, r.SoldOut, r.Abandoned)
	fmt.Fprintf(tw, "retries\t%d\n", r.Retries)
	fmt.Fprintf(tw, "refills\t%d inline (%d short reads)\n", r.Refills, r.ShortReads)
	if r.FailedCalls > 0 {
		fmt.Fprintf(tw, "failed calls\t%d\n", r.FailedCalls)
	}
	if r.KilledClaims > 0 || r.Restarts > 0 || r.LostHolds > 0 {
		fmt.Fprintf(tw, "faults\t%d claims killed between their halves, %d restarts, %d paid holds lost\n",
			r.KilledClaims, r.Restarts, r.LostHolds)
	}
	fmt.Fprintf(tw, "paid\t%d units (the buyers' truth; the ledger says %d sold)\n", r.Paid, r.Sold)
	if r.Partial {
		fmt.Fprintf(tw, "held\t%d %s by %d checkouts the signal cut short\n", r.Held, unitsWord(r.Held), r.Interrupted)
	}
	if len(r.Shops) > 1 {
		for _, sh := range r.Shops {
			fmt.Fprintf(tw, "shop %d\t%d of %d units sold, %d paid, %d held, %d oversold, %d leaked\n",
				sh.ShopID, sh.Sold, sh.Stock, sh.Paid, sh.Held, sh.Oversold, sh.Leaked)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Phases) > 1 {
		fmt.Fprintln(w)
		return writeFlashsalePhases(w, r.Phases)
	}
	return nil
}

func writeFlashsaleComparison(w io.Writer, reports []flashsale.Report) error {
	base := map[reservation.Strategy]float64{} // the baselines' reserving throughput
	for _, r := range reports {
		base[r.Strategy] = r.ReservingThroughput
	}
	ratio := func(r flashsale.Report, s reservation.Strategy) string {
		if base[s] <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", r.ReservingThroughput/base[s])
	}
	fmt.Fprintln(w, "reserving, while stock lasts (from the start to the last successful reserve):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\treserves/s\tvs counter\tvs for_update\tp50\tp99\tsold\toversold\tundersold\tleaked\tretries\trefills\t")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%v\t%v\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.Strategy, r.ReservingThroughput,
			ratio(r, reservation.StrategyCounter), ratio(r, reservation.StrategyForUpdate),
			r.ReserveP50.Round(time.Microsecond), r.ReserveP99.Round(time.Microsecond),
			r.Sold, r.Oversold, r.Undersold, r.Leaked, r.Retries, r.Refills)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "(sold ... refills count the whole sale, the sold-out path included)")
	fmt.Fprintln(w, "\nsold-out path, not in the comparison above (buyers refused once stock ran out):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\trefused\tafter the last unit\trefusals/s\trefusal p50\trefusal p99\t")
	for _, r := range reports {
		rate := "-"
		if r.SoldOutAfter > 0 {
			rate = fmt.Sprintf("%.1f", r.SoldOutRate)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%v\t%v\t\n", r.Strategy, r.SoldOut, r.SoldOutAfter, rate,
			r.SoldOutP50.Round(time.Microsecond), r.SoldOutP99.Round(time.Microsecond))
	}
	return tw.Flush()
}

// soldOutRate describes the refusals after the last successful reserve.
func soldOutRate(r flashsale.Report) string {
	s := fmt.Sprintf("%d turned away", r.SoldOut)
	if r.SoldOutAfter > 0 {
		s += fmt.Sprintf(", %d after the last unit in %v (%.1f refusals/s)", r.SoldOutAfter,
			r.SoldOutElapsed.Round(time.Millisecond), r.SoldOutRate)
	}
	return s
}

// flashsaleRun is one run in --json output; durations in seconds.
type flashsaleRun struct {
	Strategy       string  `json:"strategy"`
	Buyers         int64   `json:"buyers"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	Reserves       int64   `json:"reserves"`
	Throughput     float64 `json:"throughput_per_second"`
	// Reserving: from the start to the last successful reserve.
	ReservingElapsedSeconds float64 `json:"reserving_elapsed_seconds"`
	ReservingThroughput     float64 `json:"reserving_throughput_per_second"`
	// The sold-out path: refusals after the last successful reserve.
	SoldOutAfter          int64   `json:"sold_out_after_last_unit"`
	SoldOutElapsedSeconds float64 `json:"sold_out_elapsed_seconds"`
	SoldOutRate           float64 `json:"sold_out_refusals_per_second"`
	SoldOutP50Seconds     float64 `json:"sold_out_p50_seconds"`
	SoldOutP99Seconds     float64 `json:"sold_out_p99_seconds"`
	ReserveP50Seconds     float64 `json:"reserve_p50_seconds"`
	ReserveP99Seconds     float64 `json:"reserve_p99_seconds"`
	Stock                 int64   `json:"stock"`
	Sold                  int64   `json:"sold"`
	Oversold              int64   `json:"oversold"`
	Undersold             int64   `json:"undersold"`
	Leaked                int64   `json:"leaked"`
	SoldOut               int64   `json:"sold_out"`
	Abandoned             int64   `json:"abandoned"`
	Retries               int64   `json:"retries"`
	Refills               int64   `json:"refills"`
	ShortReads            int64   `json:"short_reads"`
	FailedCalls           int64   `json:"failed_calls"`
	Backend               string  `json:"backend"`
	Paid                  int64   `json:"paid"`
	KilledClaims          int64   `json:"killed_claims"`
	Restarts              int64   `json:"restarts"`
	LostHolds             int64   `json:"lost_holds"`
	// An interrupted sale's report: partial, and whether its books were
	// read (held: units live holds kept; on_hand: the ledger's unsold).
	Partial     bool  `json:"partial,omitempty"`
	Audited     bool  `json:"audited,omitempty"`
	Held        int64 `json:"held,omitempty"`
	OnHand      int64 `json:"on_hand,omitempty"`
	Interrupted int64 `json:"interrupted_checkouts,omitempty"`
}

func writeFlashsaleJSON(w io.Writer, where string, reports []flashsale.Report) error {
	doc := struct {
		Server string         `json:"server"`
		Runs   []flashsaleRun `json:"runs"`
	}{Server: where}
	for _, r := range reports {
		doc.Runs = append(doc.Runs, flashsaleRunJSON(r))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// flashsaleRunJSON is r in --json output.
func flashsaleRunJSON(r flashsale.Report) flashsaleRun {
	return flashsaleRun{Strategy: string(r.Strategy), Buyers: r.Buyers,
		ElapsedSeconds: r.Elapsed.Seconds(), Reserves: r.Reserves, Throughput: r.Throughput,
		ReserveP50Seconds: r.ReserveP50.Seconds(), ReserveP99Seconds: r.ReserveP99.Seconds(), Stock: r.Stock,
		Sold: r.Sold, Oversold: r.Oversold, Undersold: r.Undersold, Leaked: r.Leaked, SoldOut: r.SoldOut,
		Abandoned: r.Abandoned, Retries: r.Retries, Refills: r.Refills, ShortReads: r.ShortReads,
		FailedCalls: r.FailedCalls, Backend: r.Backend, Paid: r.Paid, KilledClaims: r.KilledClaims,
		Restarts: r.Restarts, LostHolds: r.LostHolds, ReservingElapsedSeconds: r.ReservingElapsed.Seconds(),
		ReservingThroughput: r.ReservingThroughput, SoldOutAfter: r.SoldOutAfter,
		SoldOutElapsedSeconds: r.SoldOutElapsed.Seconds(), SoldOutRate: r.SoldOutRate,
		SoldOutP50Seconds: r.SoldOutP50.Seconds(), SoldOutP99Seconds: r.SoldOutP99.Seconds(),
		Partial: r.Partial, Audited: r.Audited, Held: r.Held, OnHand: r.OnHand, Interrupted: r.Interrupted}
}

// serveAppMetrics serves an OpenTelemetry MeterProvider's metrics in the
// Prometheus format on addr at /metrics, until stop is called.
func serveAppMetrics(ctx context.Context, addr string) (*sdkmetric.MeterProvider, func(), error) {
	mp, _, stop, err := serveAppMetricsMux(ctx, addr)
	return mp, stop, err
}

// serveAppMetricsMux is serveAppMetrics that also returns the server's mux,
// for more endpoints (the kill switch).
func serveAppMetricsMux(ctx context.Context, addr string, extra ...sdkmetric.Reader) (*sdkmetric.MeterProvider, *http.ServeMux, func(), error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(exporter)}
	for _, r := range extra {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	mp := sdkmetric.NewMeterProvider(opts...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return mp, mux, func() {
		srv.Shutdown(context.WithoutCancel(ctx))
		mp.Shutdown(context.WithoutCancel(ctx))
	}, nil
}

// setupBackend builds the Redis design or the migration router for the
// sale (and a throwaway Redis unless --redis), or, for the engine with
// --restarts, a restart that KILLs the sale's MySQL connections. It returns
// the kill switch's handler for a migration.
func (f *flashsaleCmd) setupBackend(ctx context.Context, cfg *flashsale.Config, mc *mysql.Config) (func(), http.Handler, error) {
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	fail := func(err error) (func(), http.Handler, error) { cleanup(); return nil, nil, err }
	if f.restarts > 0 || f.killClaims > 0 {
		// Faults on purpose: the driver's log of every connection it
		// finds dead would bury the report.
		mc.Logger = &mysql.NopLogger{}
	}
	if f.backend == "mysql" {
		admin, err := sql.Open("mysql", mc.FormatDSN())
		if err != nil {
			return nil, nil, err
		}
		cfg.Restart = func(ctx context.Context) error { return flashsale.KillConnections(ctx, admin, mc.DBName) }
		return func() { admin.Close() }, nil, nil
	}
	if cfg.DB == nil {
		db, err := flashsale.OpenDB(*cfg)
		if err != nil {
			return nil, nil, err
		}
		undo = append(undo, func() { db.Close() })
		cfg.DB = db
	}
	addr := f.redisAddr
	if addr == "" {
		rs, err := testenv.StartRedis(ctx, testenv.RedisOptions{Persistence: testenv.Persistence(f.persistence)})
		if err != nil {
			return fail(fmt.Errorf("start a throwaway redis-server (or give --redis host:port): %w", err))
		}
		undo = append(undo, func() { rs.Close() })
		addr = rs.Addr
		cfg.Restart = rs.Restart
		if testenv.Persistence(f.persistence) == testenv.PersistenceSnapshot {
			cfg.AfterStock = rs.Save // the last snapshot before a crash
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: f.concurrency + 8})
	undo = append(undo, func() { rdb.Close() })
	pctx, cancel := context.WithTimeout(ctx, f.timeout)
	err := rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		return fail(fmt.Errorf("--redis %s does not answer PING: %v", addr, err))
	}
	rcfg := redisstock.Config{Redis: rdb, DB: cfg.DB, ClaimOrder: redisstock.ClaimOrder(f.claimOrder),
		MeterProvider: cfg.MeterProvider, ExpiryInterval: 10 * time.Millisecond}
	if f.backend == "redis" {
		b, err := flashsale.NewRedisBackend(rcfg)
		if err != nil {
			return fail(err)
		}
		if err := b.Migrate(ctx); err != nil {
			return fail(err)
		}
		cfg.Backend = b
		return cleanup, nil, nil
	}
	rollout := migration.Rollout{Shadow: migration.Plan{Percent: 100}}
	if f.migrate {
		rollout = migration.Rollout{}
	}
	b, err := flashsale.NewMigration(ctx, flashsale.MigrationConfig{DB: cfg.DB, Redis: rdb, Shops: cfg.ShopIDs, Rollout: rollout,
		PoolSize: f.poolSize, ShadowTimeout: f.shadowTimeout, QuietPeriod: f.quietPeriod, GateInterval: f.quietPeriod / 4,
		MeterProvider: cfg.MeterProvider, Logger: slog.New(slog.NewTextHandler(f.errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return fail(err)
	}
	cfg.Backend = b
	if f.migrate {
		cfg.Events = append(cfg.Events, flashsale.MigrationPlan(b.R)...)
	}
	return cleanup, b.R.Handler(), nil
}

func writeFlashsalePhases(w io.Writer, phases []flashsale.Phase) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tbuyers\treserves/s\tbooks of the source of truth\tmismatches")
	for _, p := range phases {
		var kinds []string
		var total int64
		for k, v := range p.Counters {
			if v > 0 {
				kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
				total += v
			}
		}
		sort.Strings(kinds)
		m := fmt.Sprint(total)
		if len(kinds) > 0 {
			m += " (" + strings.Join(kinds, ", ") + ")"
		}
		books := "-"
		if p.Reserves == 0 && p.Buyers > 0 {
			books = "none reserved"
		}
		if p.Checked > 0 {
			books = fmt.Sprintf("%d wrong of %d", p.Wrong, p.Checked)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\n", p.Name, p.Buyers, p.Throughput, books, m)
	}
	return tw.Flush()
}
