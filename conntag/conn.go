package conntag

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// conn is conntag's connection. database/sql never sees a *conn itself but
// one of the combinations made by wrapConn (conn_caps.go): a struct that
// embeds *conn and one method carrier per optional interface the driver's
// connection implements, so that conntag's connection implements exactly
// the interfaces the driver's does, for database/sql and for code that gets
// it through (*sql.Conn).Raw. Two are always there: driver.SessionResetter
// and driver.Validator are how conntag sees a connection borrowed and given
// back; without them in the driver they answer as database/sql assumes when
// a driver lacks them (nothing to reset; the connection is valid).
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
	holdParent  trace.SpanContext // the borrower's span, parent of the hold span
	longTimer   *time.Timer
	sessionID   int64        // see WithSessionID; 0 when unknown
	prof        *profileSlot // WithHoldProfile: this hold's sample, if sampled
	profSkip    int64        // WithHoldProfile: borrows before the next sample
	profDrawn   bool         // profSkip has been drawn
	profMu      sync.Mutex   // prof's contents, read for open holds
	dialNanos   int64        // time to open the connection, for its first hold's sample

	// texts remembers the last statements' tagged text, so a connection
	// that runs the same statement text again (the common case: statements
	// are constants) pays neither the scan for where the tag goes nor the
	// allocation of the tagged string. Only texts up to maxCachedText bytes
	// are kept: a connection pins at most textCacheSize of them, however
	// large the statements it runs. database/sql serialises the calls that
	// use it.
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

// maxCachedText bounds the statements the cache keeps (the text as given;
// the tagged copy adds the comment): at most textCacheSize × 2 × 4 KiB
// pinned per pooled connection.
const maxCachedText = 4 << 10

type sentText struct {
	query, sent string
	ts          *tagState
	op          op
}

// sent returns query as sent for ts, and its operation, from the
// connection's memory when it ran the same text for the same tag lately.
// A statement the tag would push over the packet limit goes untagged (see
// instr.fits).
func (c *conn) sent(ctx context.Context, ts *tagState, query string) (string, op) {
	for i := range c.texts {
		t := &c.texts[i]
		if t.ts == ts && len(t.query) == len(query) && t.query == query {
			return t.sent, t.op
		}
	}
	sent, o := c.in.queryOp(ts, query)
	if c.in.tooLarge(ctx, c, query, sent) {
		return query, o // not cached: each one is counted
	}
	if len(query) <= maxCachedText {
		c.texts[c.nextText] = sentText{query: query, sent: sent, ts: ts, op: o}
		c.nextText = (c.nextText + 1) % textCacheSize
	}
	return sent, o
}

// legacyState is the tag of a driver call that comes without a context
// (the legacy interfaces, through (*sql.Conn).Raw or from a driver without
// the context ones): the hold's tag when it has one.
func (c *conn) legacyState() *tagState {
	if ts := c.holdTag.Load(); ts != nil {
		return ts
	}
	return c.in.deflt
}

// base is how conntag finds its *conn in any combination wrapConn made.
func (c *conn) base() *conn { return c }

type baseConn interface{ base() *conn }

var (
	_ driver.Conn            = (*conn)(nil)
	_ driver.SessionResetter = (*conn)(nil)
	_ driver.Validator       = (*conn)(nil)
)

// Prepare prepares with the hold's tag; database/sql calls it only when the
// driver's connection has no PrepareContext.
func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.prepare(context.Background(), c.legacyState(), query)
}

// prepare prepares the statement with the tag of ts in its text: every
// later execution sends that text, whatever the executing context's tag
// (which is what the execution's metrics use).
func (c *conn) prepare(ctx context.Context, ts *tagState, query string) (driver.Stmt, error) {
	sent := c.in.query(ts, query)
	if c.in.tooLarge(ctx, c, query, sent) {
		sent = query
	}
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

// Begin begins with the hold's tag; database/sql calls it only when the
// driver's connection has no BeginTx.
func (c *conn) Begin() (driver.Tx, error) {
	return c.beginTx(context.Background(), c.legacyState(), driver.TxOptions{})
}

// beginTx starts a transaction; its Commit or Rollback is counted for ts,
// the tag the transaction began with.
func (c *conn) beginTx(ctx context.Context, ts *tagState, opts driver.TxOptions) (driver.Tx, error) {
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

// execContext runs through the driver's ExecerContext. driver.ErrSkip is
// the driver's answer for this statement only (go-sql-driver/mysql gives it
// for arguments unless interpolateParams=true, and with it for a value too
// large or of a type it cannot interpolate): database/sql then prepares
// this one statement, and the next is asked again.
func (c *conn) execContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ex := c.inner.(driver.ExecerContext)
	ts := c.in.stateFor(ctx)
	sent, o := c.sent(ctx, ts, query)
	if !c.in.measure {
		return ex.ExecContext(ctx, sent, args)
	}
	s, sctx := c.in.startOp(ctx, c, ts, o, sent)
	res, err := ex.ExecContext(sctx, sent, args)
	if err == driver.ErrSkip { //nolint:errorlint // a sentinel the driver returns as is
		c.in.dropStmt(s)
		return nil, err
	}
	c.in.endStmt(c, s, err)
	return res, err
}

func (c *conn) queryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	qr := c.inner.(driver.QueryerContext)
	ts := c.in.stateFor(ctx)
	sent, o := c.sent(ctx, ts, query)
	if !c.in.measure {
		return qr.QueryContext(ctx, sent, args)
	}
	s, sctx := c.in.startOp(ctx, c, ts, o, sent)
	rows, err := qr.QueryContext(sctx, sent, args)
	if err == driver.ErrSkip { //nolint:errorlint // a sentinel the driver returns as is
		c.in.dropStmt(s)
		return nil, err
	}
	if err != nil {
		c.in.endStmt(c, s, err)
		return nil, err
	}
	return newRows(rows, c, s), nil
}

// exec and query are the legacy Execer and Queryer: tagged and measured
// like the context versions, with the hold's tag, and the driver's answer
// (its own result type, ErrSkip) handed back untouched.
func (c *conn) exec(query string, args []driver.Value) (driver.Result, error) {
	ex := c.inner.(driver.Execer) //nolint:staticcheck // the legacy interface, kept when the driver has it
	ts := c.legacyState()
	ctx := context.Background()
	sent, o := c.sent(ctx, ts, query)
	if !c.in.measure {
		return ex.Exec(sent, args)
	}
	s, _ := c.in.startOp(ctx, c, ts, o, sent)
	res, err := ex.Exec(sent, args)
	if err == driver.ErrSkip { //nolint:errorlint // a sentinel the driver returns as is
		c.in.dropStmt(s)
		return nil, err
	}
	c.in.endStmt(c, s, err)
	return res, err
}

func (c *conn) query(query string, args []driver.Value) (driver.Rows, error) {
	qr := c.inner.(driver.Queryer) //nolint:staticcheck // the legacy interface, kept when the driver has it
	ts := c.legacyState()
	ctx := context.Background()
	sent, o := c.sent(ctx, ts, query)
	if !c.in.measure {
		return qr.Query(sent, args)
	}
	s, _ := c.in.startOp(ctx, c, ts, o, sent)
	rows, err := qr.Query(sent, args)
	if err == driver.ErrSkip { //nolint:errorlint // a sentinel the driver returns as is
		c.in.dropStmt(s)
		return nil, err
	}
	if err != nil {
		c.in.endStmt(c, s, err)
		return nil, err
	}
	return newRows(rows, c, s), nil
}

func (c *conn) ping(ctx context.Context) error {
	p := c.inner.(driver.Pinger)
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

// Unwrap returns the driver's own connection behind c, for code that needs
// the driver's type through (*sql.Conn).Raw:
//
//	err := sc.Raw(func(dc any) error {
//		mc := conntag.Unwrap(dc.(driver.Conn))
//		...
//	})
//
// Statements run on it directly are neither tagged nor measured. A
// connection that is not conntag's is returned as it is.
func Unwrap(c driver.Conn) driver.Conn {
	if b, ok := c.(baseConn); ok {
		return b.base().inner
	}
	return c
}
