package collector

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/holdtime/holdtime/collector/internal/otlp"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Collector. The zero value of every field is its
// documented default; at least one source must be configured.
type Config struct {
	// ProxySQL lists the ProxySQL admin interfaces to poll.
	ProxySQL []ProxySQLConfig
	// MySQL lists the MySQL/MariaDB servers to poll directly.
	MySQL []MySQLConfig
	// OTLP turns on the OTLP/HTTP trace receiver (Handler serves
	// /v1/traces).
	OTLP OTLPConfig
	// MaxTags caps distinct tags per target and source; further tags go to
	// OverflowTag and count in holdtime_collector_tags_overflow_total.
	// Default 1000. Memory is about 3 KiB per tag and source. A tag unseen
	// for longer than the longest window (5 m) frees its slot and its
	// series leave /metrics, so only tags that do not fit now overflow.
	MaxTags int
	// Registerer receives the collector's metrics. Default: a new
	// prometheus.Registry, served by Handler (never the global one).
	Registerer prometheus.Registerer
	// Gatherer is what Handler serves at /metrics. Default: Registerer when
	// it is a Gatherer (a *prometheus.Registry is).
	Gatherer prometheus.Gatherer
	// Logger receives source failures and recoveries. Default: discarded.
	Logger *slog.Logger
	// RecordDir, when set, receives the processlist samples and stats
	// tables the ProxySQL sources poll (RECORDING.md), one directory per
	// target.
	RecordDir string
	// Timeout bounds one poll, connecting included. Default 5 s.
	Timeout time.Duration
	// MaxBackoff caps the wait between reconnection attempts of a failed
	// source (doubling from 100 ms, with jitter). Default 30 s.
	MaxBackoff time.Duration
}

// ProxySQLConfig is one ProxySQL instance.
type ProxySQLConfig struct {
	// Name is the instance's `target` label. Required: [A-Za-z0-9_.:-]+.
	Name string
	// DSN of the admin interface (port 6032), go-sql-driver/mysql form:
	// user:pass@tcp(host:6032)/. It never appears in logs, errors or
	// metrics.
	DSN string
	// ProcesslistInterval is how often stats_mysql_processlist is sampled.
	// Default 250 ms. Hold of a session is credited sample by sample, so
	// the sampling error of a hold is about one interval.
	ProcesslistInterval time.Duration
	// DigestInterval is how often stats_mysql_query_digest is read. Default
	// 10 s: the table has a row per digest and reading it costs ProxySQL.
	// Negative turns the digest poll off.
	DigestInterval time.Duration
	// PoolInterval is how often stats_mysql_connection_pool and
	// stats_mysql_global are read. Default 5 s.
	PoolInterval time.Duration
	// EventsLog is the path of ProxySQL's JSON events log
	// (mysql-eventslog_filename, format 2). ProxySQL appends a sequence
	// number (.00000001); give the file or that common prefix: the newest
	// file is followed across rotation and truncation. Optional.
	EventsLog string
	// EventsLogPoll is how often the events log is checked for new lines
	// once at its end. Default 200 ms.
	EventsLogPoll time.Duration
	// TagGrace is how long sampled hold of a session idle in a transaction
	// whose tag the processlist did not show waits for the events log or
	// an app span (holdtime.session_id) to name it before it is reported as
	// unknown. Default 10 s.
	TagGrace time.Duration
	// ClientAddress is the host:port apps dial to reach this instance
	// (its mysql-interfaces, often port 6033), exactly as their hold spans
	// name it in server.address and server.port. Only spans naming it
	// give this instance session hints: ProxySQL session ids are small
	// per-instance integers, so a span is never offered to another
	// instance. Optional when this is the collector's only ProxySQL or
	// MySQL target; otherwise, without it, app spans name none of this
	// instance's sessions.
	ClientAddress string
}

// MySQLConfig is one MySQL or MariaDB server.
type MySQLConfig struct {
	// Name is the server's `target` label. Required.
	Name string
	// DSN in go-sql-driver/mysql form. The account needs PROCESS and
	// SELECT on performance_schema.
	DSN string
	// Interval is the poll interval. Default 1 s, at least
	// MinServerInterval.
	Interval time.Duration
	// TagGrace is how long hold of a connection whose tag the server did
	// not show waits for an app span naming that connection
	// (holdtime.session_id, conntag.WithSessionID: CONNECTION_ID() when
	// the app connects without ProxySQL) before it is reported as unknown.
	// Used with the OTLP receiver only. Default 10 s.
	TagGrace time.Duration
	// LocksInterval is how often the server's locks (per tag and kind,
	// from SHOW ENGINE INNODB STATUS on MariaDB, performance_schema.
	// data_locks on MySQL 8), deadlocks and thread saturation are read
	// (source mysql_locks). Default 10 s: the status text can be large.
	// Negative turns it off. MariaDB lists locks only with
	// innodb_status_output_locks=ON: the source says so (degraded) and
	// never sets it.
	LocksInterval time.Duration
	// JoinOnly polls the server only for what the proxy↔server join needs
	// (the connections it lists, and the performance_schema evidence of
	// the backends this collector's ProxySQL targets show held) and
	// exports none of its figures: no server-layer hold, statements,
	// gauges, locks (LocksInterval is ignored) or per-tag series for this
	// target, and no app span hints. Use it when several collectors share
	// a server, each with its own ProxySQLs: each gets the exact join
	// while one collector, with a full target, exports the server's
	// figures, so Prometheus sums count nothing twice. The source's status
	// says join_only. It needs a ProxySQL target in the same Config.
	JoinOnly bool
}

// MinServerInterval is the shortest MySQL poll interval. InnoDB serves
// information_schema.INNODB_TRX and INNODB_LOCK_WAITS from a cache that it
// refreshes only when nobody read it for 100 ms: polled faster, the tables
// freeze (found by TestServerSourceWorkload: a committed transaction stayed
// listed for as long as the polls went on).
const MinServerInterval = 200 * time.Millisecond

// OTLPConfig configures the OTLP/HTTP trace receiver.
type OTLPConfig struct {
	// Enabled serves /v1/traces on Handler.
	Enabled bool
	// Target is the `target` label of app-side figures. Default "app".
	Target string
	// MaxBodyBytes caps one export request. Default 8 MiB.
	MaxBodyBytes int64
	// MaxHold rejects (and counts as malformed) a hold span longer than
	// this. Default 24 h. Whatever it is, a hold is credited at most the
	// time since the collector started plus its shortest window (10 s).
	MaxHold time.Duration
	// Metrics also serves /v1/metrics (with Enabled): the app layer's
	// figures then come from conntag's counters, exact whatever the spans
	// do, and hold spans only name ProxySQL sessions (they add no figure,
	// so no hold counts twice, and they may be sampled). Export the
	// counters at least as often as the shortest window read (10 s).
	Metrics bool
}

// DefaultOTLPMaxHold is OTLPConfig.MaxHold's default.
const DefaultOTLPMaxHold = otlp.DefaultMaxHold

var targetName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// ValidTargetName reports whether name can be a target label: 1 to 64 of
// [A-Za-z0-9_.:-].
func ValidTargetName(name string) bool { return targetName.MatchString(name) }

// ErrNoSource means the configuration names no source.
var ErrNoSource = errors.New("no source configured: give at least one ProxySQL admin DSN, MySQL DSN or enable the OTLP receiver")

// withDefaults validates cfg and fills in defaults.
func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.ProxySQL) == 0 && len(cfg.MySQL) == 0 && !cfg.OTLP.Enabled {
		return cfg, ErrNoSource
	}
	cfg.MaxTags = cmp.Or(cfg.MaxTags, 1000)
	cfg.Timeout = cmp.Or(cfg.Timeout, 5*time.Second)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 30*time.Second)
	if cfg.MaxTags < 0 || cfg.Timeout < 0 || cfg.MaxBackoff < 0 {
		return cfg, errors.New("MaxTags, Timeout and MaxBackoff must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Registerer == nil {
		reg := prometheus.NewRegistry()
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	if cfg.Gatherer == nil {
		g, ok := cfg.Registerer.(prometheus.Gatherer)
		if !ok {
			return cfg, errors.New("Registerer is not a Gatherer: set Gatherer too, so Handler can serve /metrics")
		}
		cfg.Gatherer = g
	}
	seen := map[string]bool{}
	name := func(kind, n string) error {
		if !targetName.MatchString(n) {
			return fmt.Errorf("%s target name %q: use 1 to 64 of [A-Za-z0-9_.:-]; it becomes the target label", kind, n)
		}
		if seen[kind+n] {
			return fmt.Errorf("%s target name %q is used twice: give each instance its own name", kind, n)
		}
		seen[kind+n] = true
		return nil
	}
	cfg.ProxySQL = append([]ProxySQLConfig(nil), cfg.ProxySQL...)
	for i := range cfg.ProxySQL {
		p := &cfg.ProxySQL[i]
		if err := name("proxysql", p.Name); err != nil {
			return cfg, err
		}
		p.ProcesslistInterval = cmp.Or(p.ProcesslistInterval, 250*time.Millisecond)
		p.DigestInterval = cmp.Or(p.DigestInterval, 10*time.Second)
		p.PoolInterval = cmp.Or(p.PoolInterval, 5*time.Second)
		p.EventsLogPoll = cmp.Or(p.EventsLogPoll, 200*time.Millisecond)
		p.TagGrace = cmp.Or(p.TagGrace, 10*time.Second)
		if p.ProcesslistInterval < 0 || p.PoolInterval < 0 || p.EventsLogPoll < 0 || p.TagGrace < 0 {
			return cfg, fmt.Errorf("proxysql target %q: intervals must be positive", p.Name)
		}
		if p.DSN == "" {
			return cfg, fmt.Errorf("proxysql target %q: no admin DSN: give user:pass@tcp(host:6032)/", p.Name)
		}
		if _, err := parseDSN(p.DSN, cfg.Timeout); err != nil {
			return cfg, fmt.Errorf("proxysql target %q: %w", p.Name, err)
		}
	}
	cfg.MySQL = append([]MySQLConfig(nil), cfg.MySQL...)
	for i := range cfg.MySQL {
		m := &cfg.MySQL[i]
		if err := name("mysql", m.Name); err != nil {
			return cfg, err
		}
		m.Interval = cmp.Or(m.Interval, time.Second)
		m.TagGrace = cmp.Or(m.TagGrace, 10*time.Second)
		m.LocksInterval = cmp.Or(m.LocksInterval, 10*time.Second)
		if m.TagGrace < 0 {
			return cfg, fmt.Errorf("mysql target %q: TagGrace must be positive", m.Name)
		}
		if m.Interval < MinServerInterval {
			return cfg, fmt.Errorf("mysql target %q: interval %v is below %v: InnoDB refreshes INNODB_TRX only when it was not read for 100 ms, so faster polls see a frozen table",
				m.Name, m.Interval, MinServerInterval)
		}
		if m.DSN == "" {
			return cfg, fmt.Errorf("mysql target %q: no DSN: give user:pass@tcp(host:3306)/", m.Name)
		}
		if _, err := parseDSN(m.DSN, cfg.Timeout); err != nil {
			return cfg, fmt.Errorf("mysql target %q: %w", m.Name, err)
		}
		if m.JoinOnly {
			if len(cfg.ProxySQL) == 0 {
				return cfg, fmt.Errorf("mysql target %q is join-only but the config has no ProxySQL target: it would read nothing; add the ProxySQL targets in front of it, or drop JoinOnly", m.Name)
			}
			m.LocksInterval = -1
		}
	}
	cfg.OTLP.Target = cmp.Or(cfg.OTLP.Target, "app")
	cfg.OTLP.MaxBodyBytes = cmp.Or(cfg.OTLP.MaxBodyBytes, 8<<20)
	cfg.OTLP.MaxHold = cmp.Or(cfg.OTLP.MaxHold, otlp.DefaultMaxHold)
	if cfg.OTLP.MaxHold < time.Second {
		return cfg, fmt.Errorf("OTLP maximum hold %v: give at least 1s (a hold span longer than it is rejected)", cfg.OTLP.MaxHold)
	}
	if cfg.OTLP.Enabled && !targetName.MatchString(cfg.OTLP.Target) {
		return cfg, fmt.Errorf("OTLP target name %q: use 1 to 64 of [A-Za-z0-9_.:-]", cfg.OTLP.Target)
	}
	return cfg, nil
}

// parseDSN parses a DSN without ever echoing it: go-sql-driver's parse
// errors can quote the DSN, password included.
func parseDSN(dsn string, timeout time.Duration) (*mysql.Config, error) {
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, errors.New("the DSN is not in go-sql-driver/mysql form (user:pass@tcp(host:port)/): check it")
	}
	// Bound every network step: a peer that accepts and never answers
	// must fail the poll, not hang it. The poll's context (timeout) ends
	// first and says "timeout"; the read and write deadlines are a
	// backstop.
	mc.Timeout = cmp.Or(mc.Timeout, timeout)
	mc.ReadTimeout = cmp.Or(mc.ReadTimeout, 2*timeout)
	mc.WriteTimeout = cmp.Or(mc.WriteTimeout, 2*timeout)
	// The driver's default logger is process-global stderr; failures are
	// reported once per outage through Config.Logger instead, with the
	// cause the driver logged.
	mc.Logger = &causeLogger{}
	return mc, nil
}

// board is where sources leave evidence for each other instead of reaching
// into one another: each MySQL target's reads of the backends the ProxySQL
// targets showed held (its serverJoin), for the proxy↔server join. New fills
// it before Run; it is read-only after. (App span hints reach their target
// through the span router; events-log open tags stay within one ProxySQL
// target.)
type board struct {
	joins []*serverJoin
}

func (b *board) serverJoins() []*serverJoin { return b.joins }

// Collector polls the configured sources and serves what they saw.
type Collector struct {
	cfg     Config
	st      *store
	proxies []*proxysqlTarget
	mysqls  []*mysqlTarget
	otlp    *otlp.Receiver
	metrics *otlp.MetricsReceiver // nil unless OTLP.Metrics
	router  *spanRouter           // nil without the OTLP receiver
	board   *board
	// sources are the targets' polled sources, listed by New, run by Run.
	sources []polled
	// pollSeconds is how long each poll took, failed ones included: the
	// runner's, so every polled source has it.
	pollSeconds *prometheus.HistogramVec
	pollsLate   *prometheus.CounterVec
	pollLag     *prometheus.GaugeVec
	running     sync.Mutex
	// onPoll, when set (tests), is called after every poll, so a test can
	// wait for a poll instead of sleeping.
	onPoll func(target string, source Source, err error)
}

// New validates cfg and returns a Collector; it registers the metrics and
// opens no connection: Run does.
func New(cfg Config) (*Collector, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("collector config: %w", err)
	}
	router, err := newSpanRouter(cfg)
	if err != nil {
		return nil, fmt.Errorf("collector config: %w", err)
	}
	c := &Collector{cfg: cfg, st: newStore(cfg.MaxTags, time.Now), router: router, board: &board{}}
	c.st.otlpMetrics = cfg.OTLP.Enabled && cfg.OTLP.Metrics
	if err := c.addTargets(); err != nil {
		c.closeTargets()
		return nil, fmt.Errorf("collector config: %w", err)
	}
	if cfg.RecordDir != "" {
		if err := os.MkdirAll(cfg.RecordDir, 0o755); err != nil {
			c.closeTargets()
			return nil, fmt.Errorf("create record directory: %w: check the path and permissions", err)
		}
	}
	if err := c.registerMetrics(); err != nil {
		c.closeTargets()
		return nil, fmt.Errorf("register collector metrics: %w: give each Collector its own registry", err)
	}
	return c, nil
}

// addTargets makes the configured targets and lists their polled sources.
// Each target's main source is known (and down) from the start, so that
// Ready means "every target has answered", not "nothing has run".
func (c *Collector) addTargets() error {
	cfg := c.cfg
	for _, p := range cfg.ProxySQL {
		t, err := newProxySQLTarget(c.st, cfg, c.board, c.router, p)
		if err != nil {
			return fmt.Errorf("proxysql target %q: %w", p.Name, err)
		}
		c.proxies = append(c.proxies, t)
		if c.router.proxyHinted(cfg, p.Name) {
			c.router.connect(cfg, c.router.proxyKeys[p.Name], t.sessions.hint)
		}
		c.st.register(p.Name, SourceProxySQLProcesslist)
		// The proxy layer's headline: exact before sampled.
		if p.EventsLog != "" {
			c.st.setHeadline(p.Name, SourceProxySQLEvents)
		} else {
			c.st.setHeadline(p.Name, SourceProxySQLProcesslist)
		}
		c.sources = append(c.sources, t.polled()...)
	}
	for _, m := range cfg.MySQL {
		t, err := newMySQLTarget(c.st, cfg, c.router, m)
		if err != nil {
			return fmt.Errorf("mysql target %q: %w", m.Name, err)
		}
		c.mysqls = append(c.mysqls, t)
		c.board.joins = append(c.board.joins, t.join)
		t.join.proxied = len(cfg.ProxySQL) > 0
		c.sources = append(c.sources, t.polled()...)
		if m.JoinOnly {
			// Known, with no layer: its figures are another collector's.
			c.st.setJoinOnly(m.Name, SourceMySQL)
			continue
		}
		if c.router.mysqlHinted(cfg, m.Name) {
			c.router.connect(cfg, c.router.mysqlKeys[m.Name], t.hint)
		}
		c.st.setHeadline(m.Name, SourceMySQL)
	}
	if cfg.OTLP.Enabled {
		c.otlp = &otlp.Receiver{Sink: storeSink{c.st, cfg.OTLP.Target, SourceOTLP}, Router: c.router,
			MaxTags: cfg.MaxTags, MaxBody: cfg.OTLP.MaxBodyBytes, MaxHold: cfg.OTLP.MaxHold, Started: time.Now(), HintsOnly: cfg.OTLP.Metrics}
		if cfg.OTLP.Metrics {
			c.metrics = &otlp.MetricsReceiver{Sink: storeSink{c.st, cfg.OTLP.Target, SourceOTLP},
				MaxTags: cfg.MaxTags, MaxBody: cfg.OTLP.MaxBodyBytes, Started: c.otlp.Started}
		}
		// Waiting until the first export: up only while spans arrive.
		c.st.setHeadline(cfg.OTLP.Target, SourceOTLP)
	}
	return nil
}

// registerMetrics registers the runner's poll timing, the store's families,
// every polled source's own (ownMetrics) and the OTLP receiver's.
func (c *Collector) registerMetrics() error {
	c.pollSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "holdtime_collector_poll_duration_seconds",
		Help: "How long one poll of a source took, connecting included, failed polls too. A poll near its source's interval cannot keep up; near Config.Timeout it is timing out.",
		// From a 50 ms processlist sample to the 5 s default timeout.
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"target", "source"})
	c.pollsLate = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdtime_collector_polls_late_total",
		Help: "Polls of a source that started a whole interval or more after they were due (one per interval missed): " +
			"figures sampled between polls are coarser than configured. cause=overran: mostly because the previous poll " +
			"ran past the time this one was due (the source, or the network, answered slowly); cause=delayed: mostly " +
			"because the poll's timer fired late (the collector's process or machine was busy).",
	}, []string{"target", "source", "cause"})
	c.pollLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "holdtime_collector_poll_lag_seconds",
		Help: "How late the last poll of a source started against when it was due (0 on schedule; a failed source is due again at its interval, so its first good poll shows how long it was behind). Near or above an interval the source is falling behind.",
	}, []string{"target", "source"})
	cs := []prometheus.Collector{c.pollsLate, c.pollLag, c.pollSeconds, newMetricsCollector(c.st)}
	for _, p := range c.sources {
		if p.own != nil {
			cs = append(cs, p.own)
		}
	}
	if c.metrics != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "holdtime_collector_otlp_metric_series",
			Help: "Counter series the OTLP metrics receiver remembers (cumulative baselines, about 200 bytes each, " +
				"at most 100,000; forgotten after 10 minutes unseen).",
			ConstLabels: prometheus.Labels{"target": c.cfg.OTLP.Target}}, func() float64 { return float64(c.metrics.Series()) }))
	}
	if c.otlp != nil {
		cs = append(cs, newSpanRouterMetrics(c.router, c.cfg.OTLP.Target))
	}
	for _, m := range cs {
		if err := c.cfg.Registerer.Register(m); err != nil {
			return err
		}
	}
	return nil
}

// closeTargets releases the pools of the targets New made before failing.
func (c *Collector) closeTargets() {
	for _, p := range c.proxies {
		p.close()
	}
	for _, m := range c.mysqls {
		m.close()
	}
}

// Run polls every source until ctx is done, then closes connections and
// recordings. Each source runs on its own: one that fails is marked down
// and retried with backoff while the others go on. Run returns nil when ctx
// ends; it can run once per Collector.
func (c *Collector) Run(ctx context.Context) error {
	if !c.running.TryLock() {
		return errors.New("collector is already running: create another Collector")
	}
	var wg sync.WaitGroup
	for _, src := range c.sources {
		p := &poller{c: c, polled: src}
		wg.Go(func() {
			if p.stop != nil {
				defer p.stop()
			}
			p.run(ctx)
		})
	}
	wg.Wait()
	var errs []error
	for _, p := range c.proxies {
		errs = append(errs, p.close())
	}
	for _, m := range c.mysqls {
		errs = append(errs, m.close())
	}
	return errors.Join(errs...)
}

func roundWindow(w time.Duration) time.Duration {
	switch {
	case w <= 30*time.Second:
		return 10 * time.Second
	case w <= 3*time.Minute:
		return time.Minute
	}
	return 5 * time.Minute
}

// polled is one polled source: one table or file of one target, read once
// by poll. Targets list theirs (polled()); the runner (poller) alone
// decides when each runs, times it (holdtime_collector_poll_duration_seconds),
// backs off while it fails and marks it up or down in the store. A new
// polled source is a poll function and one entry in its target's polled().
// OTLP, the one push source, is an http.Handler instead (internal/otlp).
type polled struct {
	target   string
	source   Source
	interval time.Duration
	poll     func(ctx context.Context) error
	secret   string       // the DSN's password, scrubbed from logged errors
	causes   *causeLogger // what the driver logged behind "invalid connection"
	// failure classifies a failed poll; nil: FailureOf, for the sources
	// that speak the MySQL protocol.
	failure func(error) Failure
	// stop, when set, runs once the runner returns (the tailer's file).
	stop func()
	// own, when set, are the source's figures without a tag: New
	// registers them, the runner drops them while the source is down.
	own *ownMetrics
}

// poller runs one polled source for the Collector.
type poller struct {
	c *Collector
	polled
}

func (p *poller) run(ctx context.Context) {
	p.c.st.register(p.target, p.source)
	took := p.c.pollSeconds.WithLabelValues(p.target, string(p.source))
	overran := p.c.pollsLate.WithLabelValues(p.target, string(p.source), lateOverran)
	delayed := p.c.pollsLate.WithLabelValues(p.target, string(p.source), lateDelayed)
	lag := p.c.pollLag.WithLabelValues(p.target, string(p.source))
	// The series exist from the start: a rate of 0 is an answer.
	overran.Add(0)
	delayed.Add(0)
	var due time.Time     // when the next poll should start; zero: now
	var prevEnd time.Time // when the previous poll ended
	backoff := time.Duration(0)
	t := time.NewTimer(0)
	defer t.Stop()
	failed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, p.c.cfg.Timeout)
		err := p.poll(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		end := time.Now()
		took.Observe(end.Sub(start).Seconds())
		if !due.IsZero() && p.interval > 0 {
			// Lateness against the schedule: the last poll overran its
			// interval (it ended after this one was due: the source was
			// slow to answer), or the timer fired late (a busy machine),
			// whichever accounts for more of it.
			if missed := start.Sub(due) / p.interval; missed > 0 {
				if lateCause(due, prevEnd, start) == lateOverran {
					overran.Add(float64(missed))
				} else {
					delayed.Add(float64(missed))
				}
			}
			lag.Set(max(start.Sub(due), 0).Seconds())
		}
		prevEnd = end
		if err != nil {
			err = p.causes.explain(err, start)
			kind := FailureOf(err)
			if p.failure != nil {
				kind = p.failure(err)
			}
			if p.own != nil {
				p.own.drop() // first: a source the store says is down never shows stale figures
			}
			p.c.st.failure(p.target, p.source, scrub(err, p.secret), kind)
			backoff = min(max(2*backoff, 100*time.Millisecond), p.c.cfg.MaxBackoff)
			wait := backoff/2 + rand.N(backoff/2+1)
			if !failed {
				p.c.cfg.Logger.Warn("source down: its figures are stale until it recovers",
					"target", p.target, "source", p.source, "failure", kind, "err", scrub(err, p.secret), "retry_in", wait.Round(time.Millisecond))
			}
			failed = true
			p.notify(err)
			t.Reset(wait)
			continue
		}
		if failed {
			p.c.cfg.Logger.Info("source recovered", "target", p.target, "source", p.source)
		}
		failed, backoff = false, 0
		p.c.st.success(p.target, p.source)
		p.notify(nil)
		due = start.Add(p.interval)
		t.Reset(max(time.Until(due), 0))
	}
}

// The causes of a late poll (holdtime_collector_polls_late_total).
const (
	lateOverran = "overran" // the previous poll ended after this one was due
	lateDelayed = "delayed" // the timer fired late
)

// lateCause says why a poll due at due that started at start was late,
// the previous poll having ended at prevEnd: overran when the previous
// poll's end past due accounts for at least half of the lateness, else
// delayed (the timer, or the goroutine, started it late).
func lateCause(due, prevEnd, start time.Time) string {
	over := max(prevEnd.Sub(due), 0)
	if over >= start.Sub(due)-over {
		return lateOverran
	}
	return lateDelayed
}

// runTailer reads an events log under the runner until ctx ends (tests;
// Run runs it from the ProxySQL target's polled()).
func (c *Collector) runTailer(ctx context.Context, tl *tailer) {
	defer tl.closeFile()
	p := &poller{c: c, polled: tl.polled()}
	p.run(ctx)
}

func (p *poller) notify(err error) {
	if p.c.onPoll != nil {
		p.c.onPoll(p.target, p.source, err)
	}
}

// scrub removes a password from an error's text: defence in depth, since
// the driver's own messages do not carry it. Any password is scrubbed, even
// one short enough to also match ordinary text: a mangled message is better
// than a leaked secret.
func scrub(err error, secret string) string {
	msg := err.Error()
	if secret != "" {
		msg = strings.ReplaceAll(msg, secret, "xxx")
	}
	return msg
}

// openDB opens a pool on a parsed DSN; connections are made on first use.
func openDB(mc *mysql.Config, maxConns int) (*sql.DB, error) {
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, errors.New("the DSN's options are not valid for go-sql-driver/mysql: check them")
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxLifetime(10 * time.Minute)
	return db, nil
}

// recordPath is where a target's recording of table goes.
func recordPath(dir, target, file string) string {
	return filepath.Join(dir, target, file)
}

// Handler serves /metrics, /api/v1/top, /healthz, /readyz and, with the
// OTLP receiver on, /v1/traces (and /v1/metrics with OTLPConfig.Metrics).
func (c *Collector) Handler() http.Handler { return c.handler() }
