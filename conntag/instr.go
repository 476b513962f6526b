package conntag

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName scopes conntag's meter and tracer.
const instrumentationName = "github.com/holdtime/holdtime/conntag"

// Attribute keys. conn_tag is holdtime's; the others are OpenTelemetry's
// database semantic conventions.
const (
	AttrConnTag  = attribute.Key("conn_tag")
	attrPoolName = attribute.Key("db.client.connection.pool.name")
	attrSystem   = attribute.Key("db.system.name")
	attrOpName   = attribute.Key("db.operation.name")
	attrErrType  = attribute.Key("error.type")
	attrState    = attribute.Key("db.client.connection.state")
	attrQuery    = attribute.Key("db.query.text")
)

// instr is the measurement state of one wrapped pool. It is created by
// Open/OpenDB and shared by the pool's connections; nothing is global.
type instr struct {
	cfg config
	com commenter

	tagMu    sync.Mutex // serialises creation of tag states
	tags     sync.Map   // tag name -> *tagState, at most cfg.maxTags entries
	ntags    int        // guarded by tagMu
	overflow *tagState  // metrics of tags past the cap
	deflt    *tagState  // the default tag

	measure bool // metrics, spans or long holds are on

	useTime    metric.Float64Histogram
	opDuration metric.Float64Histogram
	createTime metric.Float64Histogram
	longHolds  metric.Int64Counter
	reg        metric.Registration
	tracer     trace.Tracer // nil: no spans

	// Open holds, for the observable counters that include holds still in
	// progress, and for long-hold reports.
	mu        sync.Mutex
	open      map[*conn]openHold
	closedSum map[*tagState]*holdSums // completed holds per metrics tag
	db        *sql.DB                 // for DB.Stats; set before callbacks are registered
}

type openHold struct {
	start time.Time
	tag   *tagState // nil until known
	seq   uint64
}

type holdSums struct {
	hold, active float64 // seconds
}

// tagState is what a tag costs once: its comment, its attribute sets.
type tagState struct {
	name    string
	comment string
	metrics *tagState // itself, or the overflow state

	holdOpts []metric.RecordOption
	addOpts  []metric.AddOption
	obsOpts  []metric.ObserveOption
	opOpts   [numOps][2][]metric.RecordOption // [op][failed]
	spanAttr attribute.KeyValue
}

func newInstr(cfg config) (*instr, error) {
	in := &instr{
		cfg:       cfg,
		com:       newCommenter(cfg.format, cfg.static),
		measure:   cfg.metrics || cfg.tracerProvider != nil || cfg.longHold > 0,
		open:      make(map[*conn]openHold),
		closedSum: make(map[*tagState]*holdSums),
	}
	if cfg.tracerProvider != nil {
		in.tracer = cfg.tracerProvider.Tracer(instrumentationName)
	}
	meter := cfg.meterProvider.Meter(instrumentationName)
	var err, e error
	in.useTime, e = meter.Float64Histogram("db.client.connection.use_time", metric.WithUnit("s"),
		metric.WithDescription("Time between borrowing a connection from the pool and returning it (the hold), by conn_tag of the borrower."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	err = errors.Join(err, e)
	in.opDuration, e = meter.Float64Histogram("db.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of database client operations, including reading the rows, by conn_tag of the statement's context."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	err = errors.Join(err, e)
	in.createTime, e = meter.Float64Histogram("db.client.connection.create_time", metric.WithUnit("s"),
		metric.WithDescription("Time it took to open a new connection."))
	err = errors.Join(err, e)
	in.longHolds, e = meter.Int64Counter("holdtime.connection.long_holds", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds that lasted longer than the long-hold threshold, by conn_tag."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	in.overflow = in.newTagState(OverflowTag, nil)
	in.deflt = in.stateNamed(cfg.defaultTag)
	return in, nil
}

// registerCallbacks exports the observable instruments: hold, active and
// idle seconds per tag including holds in progress, connections per state,
// and the pool's wait statistics, which only database/sql can see.
func (in *instr) registerCallbacks(db *sql.DB) error {
	in.db = db
	if !in.cfg.metrics {
		return nil
	}
	meter := in.cfg.meterProvider.Meter(instrumentationName)
	var err, e error
	hold, e := meter.Float64ObservableCounter("holdtime.connection.hold_time", metric.WithUnit("s"),
		metric.WithDescription("Seconds connections were held (borrowed from the pool), by conn_tag, including holds in progress. rate() of it is occupancy: connections kept busy."))
	err = errors.Join(err, e)
	active, e := meter.Float64ObservableCounter("holdtime.connection.active_time", metric.WithUnit("s"),
		metric.WithDescription("Seconds of holds spent inside driver calls (statements, row reading, begin/commit), by conn_tag of the hold."))
	err = errors.Join(err, e)
	idle, e := meter.Float64ObservableCounter("holdtime.connection.idle_time", metric.WithUnit("s"),
		metric.WithDescription("Seconds of holds spent outside driver calls: a borrowed connection doing nothing, by conn_tag of the hold."))
	err = errors.Join(err, e)
	count, e := meter.Int64ObservableUpDownCounter("db.client.connection.count", metric.WithUnit("{connection}"),
		metric.WithDescription("Connections by state; used connections also by conn_tag of the borrower."))
	err = errors.Join(err, e)
	maxConns, e := meter.Int64ObservableUpDownCounter("db.client.connection.max", metric.WithUnit("{connection}"),
		metric.WithDescription("The pool's maximum number of open connections (0: unlimited)."))
	err = errors.Join(err, e)
	waits, e := meter.Int64ObservableCounter("holdtime.pool.waits", metric.WithUnit("{wait}"),
		metric.WithDescription("Times a caller had to wait for a connection because the pool was at its limit (DB.Stats WaitCount)."))
	err = errors.Join(err, e)
	waitTime, e := meter.Float64ObservableCounter("holdtime.pool.wait_time", metric.WithUnit("s"),
		metric.WithDescription("Total seconds callers waited for a connection (DB.Stats WaitDuration)."))
	err = errors.Join(err, e)
	if err != nil {
		return err
	}
	pool := attribute.String(string(attrPoolName), in.cfg.poolName)
	idleOpts := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(pool, attrState.String("idle")))}
	poolOpts := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(pool))}
	in.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := time.Now()
		type sums struct {
			hold, active float64
			used         int64
		}
		per := make(map[*tagState]*sums, 8)
		in.mu.Lock()
		for ts, s := range in.closedSum {
			per[ts] = &sums{hold: s.hold, active: s.active}
		}
		for c, h := range in.open {
			ts := in.deflt.metrics
			if h.tag != nil {
				ts = h.tag.metrics
			}
			s := per[ts]
			if s == nil {
				s = &sums{}
				per[ts] = s
			}
			s.hold += now.Sub(h.start).Seconds()
			s.active += time.Duration(c.activeNanos.Load()).Seconds()
			s.used++
		}
		in.mu.Unlock()
		for ts, s := range per {
			o.ObserveFloat64(hold, s.hold, ts.obsOpts...)
			o.ObserveFloat64(active, s.active, ts.obsOpts...)
			o.ObserveFloat64(idle, max(0, s.hold-s.active), ts.obsOpts...)
			o.ObserveInt64(count, s.used, ts.obsOpts...)
		}
		st := db.Stats()
		o.ObserveInt64(count, int64(st.Idle), idleOpts...)
		o.ObserveInt64(maxConns, int64(st.MaxOpenConnections), poolOpts...)
		o.ObserveInt64(waits, st.WaitCount, poolOpts...)
		o.ObserveFloat64(waitTime, st.WaitDuration.Seconds(), poolOpts...)
		return nil
	}, hold, active, idle, count, maxConns, waits, waitTime)
	return err
}

func (in *instr) close() error {
	if in.reg != nil {
		return in.reg.Unregister()
	}
	return nil
}

// stateFor returns the tag state of a statement or borrow context.
func (in *instr) stateFor(ctx context.Context) *tagState {
	name, ok := TagFrom(ctx)
	if !ok {
		return in.deflt
	}
	return in.stateNamed(name)
}

// stateNamed returns the state of a sanitised tag, creating it while under
// the cap. Past the cap the tag still goes into statement text, but its
// metrics go to "other" and nothing about it is kept.
func (in *instr) stateNamed(name string) *tagState {
	if v, ok := in.tags.Load(name); ok {
		return v.(*tagState)
	}
	in.tagMu.Lock()
	defer in.tagMu.Unlock()
	if v, ok := in.tags.Load(name); ok {
		return v.(*tagState)
	}
	if in.ntags >= in.cfg.maxTags {
		return &tagState{name: name, comment: in.com.comment(name), metrics: in.overflow, spanAttr: AttrConnTag.String(name)}
	}
	ts := in.newTagState(name, nil)
	in.tags.Store(name, ts)
	in.ntags++
	return ts
}

func (in *instr) newTagState(name string, metrics *tagState) *tagState {
	ts := &tagState{name: name, comment: in.com.comment(name), metrics: metrics}
	if metrics == nil {
		ts.metrics = ts
	}
	tag := AttrConnTag.String(name)
	pool := attrPoolName.String(in.cfg.poolName)
	system := attrSystem.String(in.cfg.dbSystem)
	holdSet := attribute.NewSet(tag, pool, system)
	ts.holdOpts = []metric.RecordOption{metric.WithAttributeSet(holdSet)}
	ts.addOpts = []metric.AddOption{metric.WithAttributeSet(holdSet)}
	ts.obsOpts = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(tag, pool, attrState.String("used")))}
	for op := range numOps {
		opName := attrOpName.String(opNames[op])
		ts.opOpts[op][0] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(tag, system, opName))}
		ts.opOpts[op][1] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(tag, system, opName, attrErrType.String("error")))}
	}
	ts.spanAttr = tag
	return ts
}

// query returns query as sent for ts.
func (in *instr) query(ts *tagState, query string) string {
	if in.cfg.format == FormatNone {
		return query
	}
	return in.com.inject(query, ts.comment)
}

// borrow starts a hold on c. ts may be nil when the borrower's tag is not
// known yet (a connection the pool opened in the background); the first
// statement then names it.
func (in *instr) borrow(ctx context.Context, c *conn, ts *tagState) {
	now := time.Now()
	c.held.Store(true)
	c.activeNanos.Store(0)
	c.stmts.Store(0)
	c.pendingTag.Store(ts == nil)
	in.mu.Lock()
	if old, ok := in.open[c]; ok {
		in.mu.Unlock()
		in.endHold(c, old) // never returned: close the books on it first
		in.mu.Lock()
	}
	c.holdSeq++
	seq := c.holdSeq
	in.open[c] = openHold{start: now, tag: ts, seq: seq}
	in.mu.Unlock()
	if in.tracer != nil {
		name := "db.connection.hold"
		_, c.holdSpan = in.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(now), trace.WithAttributes(attrSystem.String(in.cfg.dbSystem), attrPoolName.String(in.cfg.poolName)))
	}
	if in.cfg.longHold > 0 {
		stack := make([]uintptr, 48)
		stack = stack[:runtime.Callers(3, stack)]
		c.longTimer = time.AfterFunc(in.cfg.longHold, func() { in.reportLongHold(c, seq, stack) })
	}
}

// nameHold gives a hold that started without a tag the tag of its first
// statement.
func (in *instr) nameHold(c *conn, ts *tagState) {
	if !c.pendingTag.CompareAndSwap(true, false) {
		return
	}
	in.mu.Lock()
	if h, ok := in.open[c]; ok && h.tag == nil {
		h.tag = ts
		in.open[c] = h
	}
	in.mu.Unlock()
}

// giveBack ends c's hold, if one is open.
func (in *instr) giveBack(c *conn) {
	if !c.held.Swap(false) {
		return
	}
	in.mu.Lock()
	h, ok := in.open[c]
	delete(in.open, c)
	in.mu.Unlock()
	if ok {
		in.endHold(c, h)
	}
}

func (in *instr) endHold(c *conn, h openHold) {
	held := time.Since(h.start)
	active := time.Duration(c.activeNanos.Load())
	ts := h.tag
	if ts == nil {
		ts = in.deflt
	}
	m := ts.metrics
	in.mu.Lock()
	delete(in.open, c)
	s := in.closedSum[m]
	if s == nil {
		s = &holdSums{}
		in.closedSum[m] = s
	}
	s.hold += held.Seconds()
	s.active += active.Seconds()
	in.mu.Unlock()
	if c.longTimer != nil {
		c.longTimer.Stop()
		c.longTimer = nil
	}
	if in.cfg.metrics {
		in.useTime.Record(context.Background(), held.Seconds(), m.holdOpts...)
	}
	if c.holdSpan != nil {
		idle := max(0, held-active)
		c.holdSpan.SetAttributes(ts.spanAttr,
			attribute.Float64("holdtime.hold.active_seconds", active.Seconds()),
			attribute.Float64("holdtime.hold.idle_seconds", idle.Seconds()),
			attribute.Int64("holdtime.hold.statements", c.stmts.Load()))
		c.holdSpan.End()
		c.holdSpan = nil
	}
}

// reportLongHold runs on a timer goroutine when a hold passes the
// threshold. It reports only if the same hold (seq) is still open.
func (in *instr) reportLongHold(c *conn, seq uint64, stack []uintptr) {
	in.mu.Lock()
	h, ok := in.open[c]
	in.mu.Unlock()
	if !ok || h.seq != seq {
		return
	}
	ts := h.tag
	if ts == nil {
		ts = in.deflt
	}
	if in.cfg.metrics {
		in.longHolds.Add(context.Background(), 1, ts.metrics.addOpts...)
	}
	if in.cfg.onLongHold != nil {
		in.cfg.onLongHold(LongHold{Tag: ts.name, Held: time.Since(h.start), Acquirer: formatStack(stack)})
	}
}

func formatStack(pcs []uintptr) string {
	var b strings.Builder
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		// database/sql and conntag frames say nothing about who borrowed.
		internal := strings.HasPrefix(f.Function, "database/sql.") ||
			strings.HasPrefix(f.Function, instrumentationName+".") && !strings.HasSuffix(f.File, "_test.go")
		if !internal {
			b.WriteString(f.Function)
			b.WriteString("\n\t")
			b.WriteString(f.File)
			b.WriteByte(':')
			b.WriteString(itoa(f.Line))
			b.WriteByte('\n')
		}
		if !more {
			return b.String()
		}
	}
}

func itoa(n int) string {
	var buf [20]byte
	i := len(buf)
	for n >= 10 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	i--
	buf[i] = byte('0' + n)
	return string(buf[i:])
}

// stmtStart is what a statement needs to finish its books.
type stmtStart struct {
	at   time.Time
	ts   *tagState
	op   op
	span trace.Span
}

// startStmt is called before a driver call that is a statement.
func (in *instr) startStmt(ctx context.Context, c *conn, ts *tagState, rawQuery, sent string) (stmtStart, context.Context) {
	in.ensureHold(ctx, c, ts)
	s := stmtStart{at: time.Now(), ts: ts, op: operationOf(rawQuery)}
	if in.tracer != nil {
		attrs := []attribute.KeyValue{ts.spanAttr, attrSystem.String(in.cfg.dbSystem), attrOpName.String(opNames[s.op])}
		if in.cfg.queryText {
			attrs = append(attrs, attrQuery.String(sent))
		}
		ctx, s.span = in.tracer.Start(ctx, opNames[s.op], trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(s.at), trace.WithAttributes(attrs...))
	}
	return s, ctx
}

// ensureHold starts a hold when a driver call arrives on a connection that
// the pool handed out without telling the driver (see borrow), and names a
// hold whose borrower had no tag.
func (in *instr) ensureHold(ctx context.Context, c *conn, ts *tagState) {
	if !c.held.Load() {
		in.borrow(ctx, c, ts)
		return
	}
	if c.pendingTag.Load() {
		in.nameHold(c, ts)
	}
}

// endStmt closes the books on a statement started with startStmt.
func (in *instr) endStmt(c *conn, s stmtStart, err error) {
	d := time.Since(s.at)
	c.activeNanos.Add(int64(d))
	c.stmts.Add(1)
	failed := 0
	if err != nil {
		failed = 1
	}
	if in.cfg.metrics {
		in.opDuration.Record(context.Background(), d.Seconds(), s.ts.metrics.opOpts[s.op][failed]...)
	}
	if s.span != nil {
		if err != nil {
			s.span.RecordError(err)
			s.span.SetStatus(codes.Error, err.Error())
		}
		s.span.End()
	}
}

// timeCall measures a driver call that is not a statement (prepare, ping,
// begin): it is active time of the hold.
func (in *instr) timeCall(ctx context.Context, c *conn, ts *tagState) time.Time {
	in.ensureHold(ctx, c, ts)
	return time.Now()
}

func (in *instr) endCall(c *conn, start time.Time) {
	c.activeNanos.Add(int64(time.Since(start)))
}

// dropStmt forgets a statement the driver declined with driver.ErrSkip:
// database/sql retries it another way, which is measured instead.
func (in *instr) dropStmt(s stmtStart) {
	if s.span != nil {
		s.span.End()
	}
}
