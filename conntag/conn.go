package conntag

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// conn wraps a driver.Conn. It implements every optional interface
// database/sql looks for, delegating when the inner connection has it and
// answering as database/sql would without it (driver.ErrSkip, or nothing to
// do) when it does not.
type conn struct {
	inner driver.Conn
	in    *instr

	// Hold state. database/sql serialises calls on one connection; the
	// atomics are also read by the metrics callback and the long-hold timer.
	holdStart   atomic.Int64             // instr.now() at borrow; 0: not held
	holdTag     atomic.Pointer[tagState] // nil: borrower had no tag (yet)
	holdSeq     atomic.Uint64
	activeNanos atomic.Int64
	stmts       atomic.Int64
	holdSpan    trace.Span
	longTimer   *time.Timer
	sessionID   int64        // see WithSessionID; 0 when unknown
	prof        *profileSlot // WithHoldProfile: this hold's sample, if sampled
	profSkip    int64        // WithHoldProfile: borrows before the next sample
	profDrawn   bool         // profSkip has been drawn

	// skipArgs remembers that the inner driver answered ErrSkip to an
	// Exec/Query with arguments (go-sql-driver/mysql does unless
	// interpolateParams=true), so the next one skips straight to the
	// prepared-statement path without building the tagged text twice.
	skipArgs atomic.Bool

	// texts remembers the last statements' tagged text, so a connection
	// that runs the same statement text again (the common case: statements
	// are constants) pays neither the scan for where the tag goes nor the
	// allocation of the tagged string. database/sql serialises the calls
	// that use it.
	texts    [textCacheSize]sentText
	nextText uint8

	// rowsBuf is the result-set wrapper reused by newRows while rowsBusy
	// is false.
	rowsBuf  rows
	rowsBusy bool
}

// textCacheSize is how many statement texts a connection remembers: enough
// for the few statements of a transaction or a request.
const textCacheSize = 4

type sentText struct {
	query, sent string
	ts          *tagState
	op          op
}

// sent returns query as sent for ts, and its operation, from the
// connection's memory when it ran the same text for the same tag lately.
func (c *conn) sent(ts *tagState, query string) (string, op) {
	for i := range c.texts {
		t := &c.texts[i]
		if t.ts == ts && len(t.query) == len(query) && t.query == query {
			return t.sent, t.op
		}
	}
	sent, o := c.in.queryOp(ts, query)
	c.texts[c.nextText] = sentText{query: query, sent: sent, ts: ts, op: o}
	c.nextText = (c.nextText + 1) % textCacheSize
	return sent, o
}

var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext prepares the statement with the tag of ctx in its text:
// every later execution sends that text, whatever the executing context's
// tag (which is what the execution's metrics use).
func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	ts := c.in.stateFor(ctx)
	sent := c.in.query(ts, query)
	var start int64
	if c.in.measure {
		start = c.in.timeCall(ctx, c, ts)
	}
	var (
		st  driver.Stmt
		err error
	)
	if pc, ok := c.inner.(driver.ConnPrepareContext); ok {
		st, err = pc.PrepareContext(ctx, sent)
	} else {
		st, err = c.inner.Prepare(sent)
	}
	if c.in.measure {
		c.in.endCall(c, start)
	}
	if err != nil {
		return nil, err
	}
	return &stmt{inner: st, conn: c, op: operationOf(query), sent: sent}, nil
}

func (c *conn) Close() error {
	if c.in.measure {
		c.in.giveBack(c)
		c.in.untrack(c)
	}
	return c.inner.Close()
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx starts a transaction; its Commit or Rollback is counted for the
// tag of ctx, the context the transaction began with.
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	ts := c.in.stateFor(ctx)
	var s stmtStart
	if c.in.measure {
		s, ctx = c.in.startOp(ctx, c, ts, opBegin, "BEGIN")
	}
	var (
		tx  driver.Tx
		err error
	)
	if bt, ok := c.inner.(driver.ConnBeginTx); ok {
		tx, err = bt.BeginTx(ctx, opts)
	} else {
		if opts.Isolation != driver.IsolationLevel(0) || opts.ReadOnly {
			// database/sql makes the same refusal for drivers without BeginTx.
			err = errors.New("sql: driver does not support non-default isolation level or read-only transactions")
		} else {
			tx, err = c.inner.Begin() //nolint:staticcheck // the fallback database/sql itself uses
		}
	}
	if !c.in.measure {
		return tx, err
	}
	c.in.endStmt(c, s, err)
	if err != nil {
		return nil, err
	}
	return &txn{inner: tx, conn: c, ts: ts}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ex, ok := c.inner.(driver.ExecerContext)
	if !ok || len(args) > 0 && c.skipArgs.Load() {
		return nil, driver.ErrSkip
	}
	ts := c.in.stateFor(ctx)
	sent, o := c.sent(ts, query)
	if !c.in.measure {
		return ex.ExecContext(ctx, sent, args)
	}
	s, sctx := c.in.startOp(ctx, c, ts, o, sent)
	res, err := ex.ExecContext(sctx, sent, args)
	if err == driver.ErrSkip { //nolint:errorlint // a sentinel the driver returns as is
		c.skipArgs.Store(len(args) > 0)
		c.in.dropStmt(s)
		return nil, err
	}
	c.in.endStmt(c, s, err)
	return res, err
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	qr, ok := c.inner.(driver.QueryerContext)
	if !ok || len(args) > 0 && c.skipArgs.Load() {
		return nil, driver.ErrSkip
	}
	ts := c.in.stateFor(ctx)
	sent, o := c.sent(ts, query)
	if !c.in.measure {
		return qr.QueryContext(ctx, sent, args)
	}
	s, sctx := c.in.startOp(ctx, c, ts, o, sent)
	rows, err := qr.QueryContext(sctx, sent, args)
	if err == driver.ErrSkip { //nolint:errorlint // a sentinel the driver returns as is
		c.skipArgs.Store(len(args) > 0)
		c.in.dropStmt(s)
		return nil, err
	}
	if err != nil {
		c.in.endStmt(c, s, err)
		return nil, err
	}
	return newRows(rows, c, s), nil
}

func (c *conn) Ping(ctx context.Context) error {
	p, ok := c.inner.(driver.Pinger)
	if !ok {
		return nil // database/sql treats a driver without Pinger as alive
	}
	if !c.in.measure {
		return p.Ping(ctx)
	}
	start := c.in.timeCall(ctx, c, c.in.stateFor(ctx))
	err := p.Ping(ctx)
	c.in.endCall(c, start)
	return err
}

// ResetSession is how database/sql tells a driver that a pooled connection
// is being borrowed again, with the borrower's context: the hold starts.
func (c *conn) ResetSession(ctx context.Context) error {
	var err error
	if sr, ok := c.inner.(driver.SessionResetter); ok {
		err = sr.ResetSession(ctx)
		// database/sql drops the connection only on ErrBadConn; with any
		// other error it still hands the connection out, so the hold starts.
		if err != nil && errors.Is(err, driver.ErrBadConn) {
			return err
		}
	}
	if c.in.measure {
		// nil when the borrower has no tag: the first statement names it.
		c.in.borrow(ctx, c, c.in.taggedState(ctx))
	}
	return err
}

// IsValid is how database/sql asks, as a connection goes back to the pool,
// whether to keep it: the hold ends.
func (c *conn) IsValid() bool {
	if c.in.measure {
		c.in.giveBack(c)
	}
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if nvc, ok := c.inner.(driver.NamedValueChecker); ok {
		return nvc.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// Raw returns the driver's own connection, for code that needs it through
// (*sql.Conn).Raw.
func (c *conn) Raw() driver.Conn { return c.inner }
