package conntag

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
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

// instr is the measurement state of one wrapped pool, shared by its
// connections; nothing is global.
//
// The hot path (every statement, every hold) only reads the clock and adds
// to atomics in the tag's state. OpenTelemetry instruments read those
// atomics when metrics are collected; the SDK's synchronous histograms,
// which cost more than everything else together, are opt-in (WithHistograms).
type instr struct {
	cfg   config
	com   commenter
	epoch time.Time // monotonic origin of the int64 timestamps

	tagMu    sync.Mutex   // serialises creation of tag states
	tags     sync.Map     // tag name -> *tagState, at most cfg.maxTags entries
	ntags    atomic.Int64 // entries in tags
	overflow *tagState    // metrics of tags past the cap
	deflt    *tagState    // the default tag

	measure bool // metrics, spans or long holds are on

	connMu sync.Mutex
	conns  map[*conn]struct{} // live connections, to see holds in progress

	inst instruments
	reg  metric.Registration
	db   *sql.DB

	tracer trace.Tracer // nil: no spans

	// Packet limits (packet.go). clientPacket is the driver's (0: the
	// server's); serverPacket the server's, 0 until asked, -1 when unknown.
	// checkPackets is off for servers other than MySQL and MariaDB.
	checkPackets bool
	clientPacket int64
	serverPacket atomic.Int64
	oversize     atomic.Int64 // statements sent untagged for the limits
}

// tagState is one tag's comment, attribute sets and running totals.
type tagState struct {
	owner    *instr
	name     string
	comment  string
	metrics  *tagState // itself, or the overflow state
	spanAttr attribute.KeyValue

	holds       atomic.Int64 // completed holds
	holdNanos   atomic.Int64 // completed holds' length
	activeNanos atomic.Int64 // completed holds' time in driver calls
	longHolds   atomic.Int64
	ops         [numOps]opTotals

	holdOpts []metric.RecordOption
	obsOpts  []metric.ObserveOption // conn_tag, pool
	usedOpts []metric.ObserveOption // conn_tag, pool, state=used
	opOpts   [numOps][2]opAttrs     // [op][failed]
}

// opTotals are one operation's totals, kept apart by outcome so that each
// exported series only ever grows.
type opTotals struct {
	okCount, okNanos, errCount, errNanos atomic.Int64
}

type opAttrs struct {
	record  []metric.RecordOption
	observe []metric.ObserveOption
}

func newInstr(cfg config) (*instr, error) {
	in := &instr{
		cfg:     cfg,
		com:     newCommenter(cfg.format, cfg.static),
		epoch:   time.Now(),
		measure: cfg.metrics || cfg.tracerProvider != nil || cfg.longHold > 0 || cfg.holdProfile != nil,
		conns:   make(map[*conn]struct{}),

		checkPackets: cfg.dbSystem == "mysql" || cfg.dbSystem == "mariadb",
		clientPacket: cfg.clientPacket,
	}
	if in.clientPacket < 0 {
		in.clientPacket = defaultClientPacketLimit
	}
	if cfg.tracerProvider != nil {
		in.tracer = cfg.tracerProvider.Tracer(instrumentationName)
	}
	if cfg.metrics {
		if err := in.inst.create(cfg); err != nil {
			return nil, err
		}
	}
	in.overflow = in.newTagState(OverflowTag)
	in.deflt = in.stateNamed(cfg.defaultTag)
	return in, nil
}

// now is a monotonic timestamp in nanoseconds, never 0. time.Since reads
// only the monotonic clock: half the cost of time.Now.
func (in *instr) now() int64 { return int64(time.Since(in.epoch)) + 1 }

func (in *instr) wall(ts int64) time.Time { return in.epoch.Add(time.Duration(ts - 1)) }

// stateFor returns the tag state of a statement or borrow context.
func (in *instr) stateFor(ctx context.Context) *tagState {
	if ts := in.taggedState(ctx); ts != nil {
		return ts
	}
	return in.deflt
}

// taggedState is the state of ctx's tag, or nil when ctx carries none.
func (in *instr) taggedState(ctx context.Context) *tagState {
	tv, ok := ctx.Value(tagKey{}).(*tagValue)
	if !ok {
		return nil
	}
	if ts := tv.cached.Load(); ts != nil && ts.owner == in {
		return ts
	}
	ts := in.stateNamed(tv.name)
	tv.cached.Store(ts)
	return ts
}

// stateNamed returns the state of a sanitised tag, creating it while under
// the cap. Past the cap the tag still goes into statement text, but its
// metrics go to "other" and nothing about it is kept.
func (in *instr) stateNamed(name string) *tagState {
	if v, ok := in.tags.Load(name); ok {
		return v.(*tagState)
	}
	// Past the cap nothing is kept and no lock is taken: a caller that puts
	// ids into tags pays its own way without slowing everyone down.
	if in.ntags.Load() >= int64(in.cfg.maxTags) {
		return in.overflowState(name)
	}
	in.tagMu.Lock()
	defer in.tagMu.Unlock()
	if v, ok := in.tags.Load(name); ok {
		return v.(*tagState)
	}
	if in.ntags.Load() >= int64(in.cfg.maxTags) {
		return in.overflowState(name)
	}
	ts := in.newTagState(name)
	in.tags.Store(name, ts)
	in.ntags.Add(1)
	return ts
}

// overflowState is a throwaway state for a tag past the cap: the statement
// text keeps the tag, the metrics go to "other". The context caches it, so a
// request pays for it once, not per statement.
func (in *instr) overflowState(name string) *tagState {
	return &tagState{owner: in, name: name, comment: in.com.comment(name), metrics: in.overflow, spanAttr: AttrConnTag.String(name)}
}

func (in *instr) newTagState(name string) *tagState {
	ts := &tagState{owner: in, name: name, comment: in.com.comment(name), spanAttr: AttrConnTag.String(name)}
	ts.metrics = ts
	if !in.cfg.metrics {
		return ts
	}
	tag := AttrConnTag.String(name)
	pool := attrPoolName.String(in.cfg.poolName)
	system := attrSystem.String(in.cfg.dbSystem)
	holdSet := attribute.NewSet(tag, pool, system)
	ts.holdOpts = []metric.RecordOption{metric.WithAttributeSet(holdSet)}
	ts.obsOpts = []metric.ObserveOption{metric.WithAttributeSet(holdSet)}
	ts.usedOpts = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(tag, pool, system, attrState.String("used")))}
	for op := range numOps {
		opName := attrOpName.String(opNames[op])
		ok := attribute.NewSet(tag, system, opName)
		failed := attribute.NewSet(tag, system, opName, attrErrType.String("error"))
		ts.opOpts[op][0] = opAttrs{[]metric.RecordOption{metric.WithAttributeSet(ok)}, []metric.ObserveOption{metric.WithAttributeSet(ok)}}
		ts.opOpts[op][1] = opAttrs{[]metric.RecordOption{metric.WithAttributeSet(failed)}, []metric.ObserveOption{metric.WithAttributeSet(failed)}}
	}
	return ts
}

// eachTag calls fn for every tag state that holds metrics.
func (in *instr) eachTag(fn func(*tagState)) {
	in.tags.Range(func(_, v any) bool { fn(v.(*tagState)); return true })
	fn(in.overflow)
}

// query returns query as sent for ts.
func (in *instr) query(ts *tagState, query string) string {
	if in.cfg.format == FormatNone {
		return query
	}
	return in.com.inject(query, ts.comment)
}

// queryOp is query that also finds the statement's operation, in one scan.
func (in *instr) queryOp(ts *tagState, query string) (string, op) {
	if in.cfg.format == FormatNone {
		return query, operationOf(query)
	}
	return in.com.injectOp(query, ts.comment)
}

// track and untrack keep the set of live connections (once per connection,
// not per statement).
func (in *instr) track(c *conn) {
	in.connMu.Lock()
	in.conns[c] = struct{}{}
	in.connMu.Unlock()
}

func (in *instr) untrack(c *conn) {
	in.connMu.Lock()
	delete(in.conns, c)
	in.connMu.Unlock()
}

// stmtStart is what a statement needs to finish its books.
type stmtStart struct {
	at   int64
	ts   *tagState
	op   op
	span trace.Span
}

// startOp is called before a driver call that is a statement.
func (in *instr) startOp(ctx context.Context, c *conn, ts *tagState, o op, sent string) (stmtStart, context.Context) {
	in.ensureHold(ctx, c, ts)
	s := stmtStart{at: in.now(), ts: ts, op: o}
	if in.tracer != nil && !in.cfg.noStmtSpans {
		attrs := []attribute.KeyValue{ts.spanAttr, attrSystem.String(in.cfg.dbSystem), attrOpName.String(opNames[s.op])}
		if in.cfg.queryText {
			attrs = append(attrs, attrQuery.String(sent))
		}
		ctx, s.span = in.tracer.Start(ctx, opNames[s.op], trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(in.wall(s.at)), trace.WithAttributes(attrs...))
	}
	return s, ctx
}

// endStmt closes the books on a statement started with startStmt.
func (in *instr) endStmt(c *conn, s stmtStart, err error) {
	d := in.now() - s.at
	c.activeNanos.Add(d)
	failed := 0
	if err != nil {
		failed = 1
	}
	if in.cfg.metrics {
		t := &s.ts.metrics.ops[s.op]
		if failed == 1 {
			t.errCount.Add(1)
			t.errNanos.Add(d)
		} else {
			t.okCount.Add(1)
			t.okNanos.Add(d)
		}
		if in.cfg.histograms {
			in.inst.opDuration.Record(context.Background(), time.Duration(d).Seconds(), s.ts.metrics.opOpts[s.op][failed].record...)
		}
	}
	if in.tracer != nil {
		c.stmts.Add(1)
	}
	if s.span != nil {
		if err != nil {
			s.span.RecordError(err)
			s.span.SetStatus(codes.Error, err.Error())
		}
		s.span.End()
	}
}

// dropStmt forgets a statement the driver declined with driver.ErrSkip:
// database/sql retries it another way, which is measured instead.
func (in *instr) dropStmt(s stmtStart) {
	if s.span != nil {
		s.span.End()
	}
}

// timeCall measures a driver call that is not a statement (prepare, ping):
// it is active time of the hold.
func (in *instr) timeCall(ctx context.Context, c *conn, ts *tagState) int64 {
	in.ensureHold(ctx, c, ts)
	return in.now()
}

func (in *instr) endCall(c *conn, start int64) {
	c.activeNanos.Add(in.now() - start)
}
