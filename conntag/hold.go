package conntag

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A hold is one borrowing of a connection from the pool. database/sql
// tells the driver about it in two places:
//   - ResetSession(ctx) when a pooled connection is borrowed again, with the
//     borrower's context;
//   - IsValid() when the connection goes back to the pool.
//
// A new connection opened for a caller is borrowed at Connect(ctx). A
// connection the pool opened in the background, or put back without asking
// for a reset, is handed out without a word to the driver: its hold starts
// at its first driver call. The hold's tag is the borrower's; a borrower
// without a tag lets the first statement name it.

// borrow starts a hold on c. ts is nil when the borrower's tag is unknown.
func (in *instr) borrow(ctx context.Context, c *conn, ts *tagState) {
	if c.holdStart.Load() != 0 {
		in.giveBack(c) // never returned: close the books on it first
	}
	now := in.now()
	c.activeNanos.Store(0)
	c.holdTag.Store(ts)
	c.holdStart.Store(now)
	if in.tracer != nil {
		// The span is made when the hold ends, if sampling chooses it
		// (holdSpanWeight): only then are its length and idle time known.
		c.stmts.Store(0)
		c.holdParent = trace.SpanContextFromContext(ctx)
	}
	if hp := in.cfg.holdProfile; hp != nil {
		hp.sampleBorrow(c)
	}
	if in.cfg.longHold > 0 {
		seq := c.holdSeq.Add(1)
		stack := make([]uintptr, 48)
		stack = stack[:runtime.Callers(3, stack)]
		c.longTimer = time.AfterFunc(in.cfg.longHold, func() { in.reportLongHold(c, seq, stack) })
	}
}

// ensureHold starts a hold when a driver call arrives on a connection that
// the pool handed out silently, and names a hold whose borrower had no tag.
func (in *instr) ensureHold(ctx context.Context, c *conn, ts *tagState) {
	if c.holdStart.Load() == 0 {
		in.borrow(ctx, c, ts)
		return
	}
	if c.holdTag.Load() == nil {
		c.holdTag.CompareAndSwap(nil, ts)
	}
}

// giveBack ends c's hold, if one is open. The connection's open-hold state
// is cleared before the tag's totals grow, and observe reads the totals
// before the open holds: a hold is never counted twice (see observe).
func (in *instr) giveBack(c *conn) {
	start := c.holdStart.Swap(0)
	if start == 0 {
		return
	}
	end := in.now()
	held := end - start
	active := min(c.activeNanos.Load(), held)
	ts := c.holdTag.Load()
	if ts == nil {
		ts = in.deflt
	}
	m := ts.metrics
	m.holdNanos.Add(held)
	m.activeNanos.Add(active)
	m.holds.Add(1)
	if c.longTimer != nil {
		c.longTimer.Stop()
		c.longTimer = nil
	}
	if hp := in.cfg.holdProfile; hp != nil {
		hp.endHold(c, m.name, in.cfg.poolName, held, held-active)
	}
	if in.cfg.histograms {
		in.inst.useTime.Record(context.Background(), time.Duration(held).Seconds(), m.holdOpts...)
	}
	if in.tracer != nil {
		if w := in.holdSpanWeight(held, held-active); w > 0 {
			in.holdSpan(c, ts, start, end, active, w)
		}
	}
}

// holdSpan records the ended hold [start, end] of c as a
// "db.connection.hold" span, a child of the borrower's span.
func (in *instr) holdSpan(c *conn, ts *tagState, start, end, active int64, weight float64) {
	ctx := context.Background()
	if c.holdParent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, c.holdParent)
	}
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, attrSystem.String(in.cfg.dbSystem), attrPoolName.String(in.cfg.poolName))
	attrs = append(attrs, in.cfg.serverAddr...)
	if c.sessionID != 0 {
		attrs = append(attrs, attribute.Int64("holdtime.session_id", c.sessionID))
	}
	attrs = append(attrs, ts.spanAttr,
		attribute.Float64("holdtime.hold.active_seconds", time.Duration(active).Seconds()),
		attribute.Float64("holdtime.hold.idle_seconds", time.Duration(end-start-active).Seconds()),
		attribute.Int64("holdtime.hold.statements", c.stmts.Load()))
	if in.cfg.holdSampling != nil {
		attrs = append(attrs, attribute.Float64("holdtime.hold.sample_weight", weight))
	}
	_, span := in.tracer.Start(ctx, "db.connection.hold", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(in.wall(start)), trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(in.wall(end)))
}

// reportLongHold runs on a timer goroutine when a hold passes the
// threshold. It reports only if the same hold (seq) is still open.
func (in *instr) reportLongHold(c *conn, seq uint64, stack []uintptr) {
	start := c.holdStart.Load()
	if start == 0 || c.holdSeq.Load() != seq {
		return
	}
	ts := c.holdTag.Load()
	if ts == nil {
		ts = in.deflt
	}
	ts.metrics.longHolds.Add(1)
	if in.cfg.onLongHold != nil {
		in.cfg.onLongHold(LongHold{Tag: ts.name, Held: time.Duration(in.now() - start), Acquirer: formatStack(stack)})
	}
}

// formatStack renders the borrower's stack without database/sql's and
// conntag's own frames, which say nothing about who borrowed.
func formatStack(pcs []uintptr) string {
	var b strings.Builder
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		internal := strings.HasPrefix(f.Function, "database/sql.") ||
			strings.HasPrefix(f.Function, instrumentationName+".") && !strings.HasSuffix(f.File, "_test.go")
		if !internal {
			b.WriteString(f.Function)
			b.WriteString("\n\t")
			b.WriteString(f.File)
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(f.Line))
			b.WriteByte('\n')
		}
		if !more {
			return b.String()
		}
	}
}
