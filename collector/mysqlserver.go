package collector

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Server-side queries, three per poll (plus SELECT VERSION() once per
// connection). The poller's own session is left out of each.
const (
	// Sessions and their InnoDB transaction. INNODB_TRX lists a transaction
	// once it has touched InnoDB (BEGIN alone does not show).
	queryServerSessions = `SELECT p.ID, p.COMMAND, p.INFO, t.trx_id IS NOT NULL, ` +
		`COALESCE(TIMESTAMPDIFF(SECOND, t.trx_started, NOW()), 0), COALESCE(t.trx_rows_locked, 0) ` +
		`FROM information_schema.PROCESSLIST p LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID ` +
		`WHERE p.ID <> CONNECTION_ID() AND p.USER <> 'system user' ` +
		`AND p.COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Binlog Dump GTID')`
	// The last statements of every session (10 per thread by default):
	// the tag of a session idle in a transaction, statements and errors.
	// SQL_TEXT keeps comments, unlike statement digests.
	queryServerHistory = `SELECT t.PROCESSLIST_ID, h.EVENT_ID, h.SQL_TEXT, h.ERRORS, h.TIMER_WAIT ` +
		`FROM performance_schema.events_statements_history h ` +
		`JOIN performance_schema.threads t ON t.THREAD_ID = h.THREAD_ID ` +
		`WHERE t.PROCESSLIST_ID IS NOT NULL AND t.PROCESSLIST_ID <> CONNECTION_ID() AND h.SQL_TEXT IS NOT NULL`
	// MariaDB (10.6+, and MySQL 5.7) keep lock waits in information_schema.
	queryLockWaitsMariaDB = `SELECT r.trx_mysql_thread_id, b.trx_mysql_thread_id ` +
		`FROM information_schema.INNODB_LOCK_WAITS w ` +
		`JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id ` +
		`JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id`
	// MySQL 8.0 moved them to performance_schema.data_lock_waits, keyed by
	// performance_schema thread ids. Not run by this repository's CI
	// (MariaDB only): keep it this small.
	queryLockWaitsMySQL8 = `SELECT r.PROCESSLIST_ID, b.PROCESSLIST_ID ` +
		`FROM performance_schema.data_lock_waits w ` +
		`JOIN performance_schema.threads r ON r.THREAD_ID = w.REQUESTING_THREAD_ID ` +
		`JOIN performance_schema.threads b ON b.THREAD_ID = w.BLOCKING_THREAD_ID`
)

// serverQueriesPerPoll is what one poll costs the server, stated in the
// docs and checked by a test.
const serverQueriesPerPoll = 3

type serverSession struct {
	lastEvent int64  // highest statement EVENT_ID counted
	tag       string // tag of the current transaction's last statement; "" unknown yet
	tagEvent  int64  // the EVENT_ID that set tag
	ended     bool   // its last statement was a COMMIT/ROLLBACK
	seen      bool   // listed by the current poll
	inTrx     bool   // in a transaction at the last poll
	// exact is the time of the statements that completed since the last
	// poll, per tag, from performance_schema: credited as they are when the
	// session was not in a transaction (see apply).
	exact map[string]float64
}

type serverRow struct {
	id         int64
	command    string
	info       sql.NullString
	inTrx      bool
	trxAge     float64
	rowsLocked int64
}

type heldRow struct {
	id    int64
	tag   string
	idle  bool
	inTrx bool
}

// mysqlTarget polls one MySQL/MariaDB server.
type mysqlTarget struct {
	c      *Collector
	cfg    MySQLConfig
	secret string
	db     *sql.DB
	causes *causeLogger

	mu        sync.Mutex
	mysql8    sql.NullBool // lock wait query flavour, detected per connection
	sessions  map[int64]*serverSession
	held      []heldRow // rows of the previous poll, credited at the next
	prevAt    time.Time
	maxGap    time.Duration
	tagBuf    []byte
	batch     map[string]*tagDelta
	historyOK bool
	primed    bool
}

func newMySQLTarget(c *Collector, cfg MySQLConfig) (*mysqlTarget, error) {
	mc, err := parseDSN(cfg.DSN, c.cfg.Timeout)
	if err != nil {
		return nil, err
	}
	db, err := openDB(mc, 1)
	if err != nil {
		return nil, err
	}
	return &mysqlTarget{c: c, cfg: cfg, secret: mc.Passwd, db: db, causes: mc.Logger.(*causeLogger), sessions: map[int64]*serverSession{},
		maxGap: max(4*cfg.Interval, time.Second), batch: map[string]*tagDelta{}, historyOK: true}, nil
}

func (m *mysqlTarget) start(ctx context.Context, wg *sync.WaitGroup) {
	p := &poller{c: m.c, target: m.cfg.Name, source: SourceMySQL, interval: m.cfg.Interval, poll: m.poll, secret: m.secret, causes: m.causes}
	wg.Go(func() { p.run(ctx) })
}

func (m *mysqlTarget) close() error { return m.db.Close() }

// tagOfStatement parses a statement's tag. Statements that drivers and
// wrappers send on their own, untagged, say nothing ("", false): BEGIN,
// COMMIT, ROLLBACK, SET autocommit, SET TRANSACTION (go-sql-driver/mysql
// sends it before START TRANSACTION for an isolation level), SET NAMES and
// SELECT CONNECTION_ID() (conntag.WithSessionID). Otherwise the session
// would be credited to "untagged" between a transaction's start and its
// first statement, and a pooled session to whatever ran last.
func (m *mysqlTarget) tagOfStatement(q string) (string, bool) {
	b := []byte(q)
	if class, _, _ := classify(b); class == classBegin || class == classCommit ||
		class == classAutocommitOff || class == classAutocommitOn {
		return "", false
	}
	t, ok := AppendTag(m.tagBuf[:0], b)
	m.tagBuf = t[:0]
	if !ok {
		if driverStatement(b) {
			return "", false
		}
		return UntaggedTag, true
	}
	return string(t), true
}

// driverStatement reports whether an untagged statement is one a driver
// sends by itself around the application's statements.
func driverStatement(q []byte) bool {
	kw, rest := firstWord(skipLeadingComments(q))
	switch {
	case eqFold(kw, "SET"):
		w, after := firstWord(rest)
		if eqFold(w, "SESSION") || eqFold(w, "LOCAL") {
			w, _ = firstWord(after)
		}
		return eqFold(w, "TRANSACTION") || eqFold(w, "NAMES") || eqFold(w, "CHARACTER")
	case eqFold(kw, "SELECT"):
		return bytes.EqualFold(bytes.TrimSpace(rest), []byte("CONNECTION_ID()"))
	}
	return false
}

// boundary reports whether a statement starts or ends a transaction.
func boundary(q string) (begin, end bool) {
	class, _, _ := classify([]byte(q))
	return class == classBegin, class == classCommit
}

func (m *mysqlTarget) poll(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	// One connection for the three queries, so CONNECTION_ID() is ours.
	conn, err := m.db.Conn(ctx)
	if err != nil {
		m.mysql8 = sql.NullBool{}
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	at := time.Now()
	rows, bad, err := m.querySessions(ctx, conn)
	if err != nil {
		return err
	}
	if err := m.readHistory(ctx, conn, &bad); err != nil {
		return err
	}
	waits, err := m.queryLockWaits(ctx, conn)
	if err != nil {
		return err
	}
	m.c.st.malformed(m.cfg.Name, SourceMySQL, bad)
	m.apply(at, rows, waits)
	return nil
}

func (m *mysqlTarget) querySessions(ctx context.Context, conn *sql.Conn) ([]serverRow, int, error) {
	rs, err := conn.QueryContext(ctx, queryServerSessions)
	if err != nil {
		return nil, 0, fmt.Errorf("query information_schema.PROCESSLIST and INNODB_TRX: %w: the account needs the PROCESS privilege", err)
	}
	defer rs.Close()
	var out []serverRow
	bad := 0
	for rs.Next() {
		var r serverRow
		var cmd sql.NullString
		if err := rs.Scan(&r.id, &cmd, &r.info, &r.inTrx, &r.trxAge, &r.rowsLocked); err != nil {
			bad++
			continue
		}
		r.command = cmd.String
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, 0, fmt.Errorf("read processlist: %w", err)
	}
	return out, bad, nil
}

// readHistory counts new statements and errors per tag and notes each
// session's last tag. Without performance_schema (or its history
// consumer) it reads nothing and the source still works from the
// processlist alone; that is logged once.
func (m *mysqlTarget) readHistory(ctx context.Context, conn *sql.Conn, bad *int) error {
	rs, err := conn.QueryContext(ctx, queryServerHistory)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		if m.historyOK {
			m.c.cfg.Logger.Warn("performance_schema statement history unreadable: statements, errors and the tags of idle transactions are not known",
				"target", m.cfg.Name, "err", scrub(err, m.secret))
			m.historyOK = false
		}
		return nil
	}
	defer rs.Close()
	type hist struct {
		event    int64
		tag      string
		ok       bool
		boundary int64 // the latest BEGIN/COMMIT's event
		ended    bool  // that boundary ended a transaction
	}
	latest := map[int64]hist{}
	for rs.Next() {
		var id, event int64
		var text string
		var errs, timerWait sql.NullInt64
		if err := rs.Scan(&id, &event, &text, &errs, &timerWait); err != nil {
			*bad++
			continue
		}
		s := m.sessions[id]
		if s == nil {
			s = &serverSession{}
			m.sessions[id] = s
		}
		tag, ok := m.tagOfStatement(text)
		// Statements the driver sent by itself (ok false) are not counted:
		// they are no business process's.
		if ok && event > s.lastEvent && m.primed {
			d := m.delta(tag)
			d.stmts++
			if errs.Int64 > 0 {
				d.errors++
			}
			if timerWait.Valid { // picoseconds
				if s.exact == nil {
					s.exact = map[string]float64{}
				}
				s.exact[tag] += float64(timerWait.Int64) / 1e12
			}
		}
		h := latest[id]
		if ok && event >= h.event {
			h.event, h.tag, h.ok = event, tag, true
		}
		if begin, end := boundary(text); (begin || end) && event > h.boundary {
			h.boundary, h.ended = event, end
		}
		latest[id] = h
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read statement history: %w", err)
	}
	m.primed = true // the first read only sets the baseline
	for id, h := range latest {
		s := m.sessions[id]
		if s == nil {
			continue
		}
		switch {
		case h.ok && h.event > h.boundary && h.event >= s.tagEvent:
			s.tag, s.tagEvent, s.ended = h.tag, h.event, false
		case h.boundary > s.tagEvent:
			// A transaction began or ended after the last statement that
			// named the session: its tag is not known until its next
			// statement, which names the time held meanwhile (see apply).
			s.tag, s.tagEvent, s.ended = "", h.boundary, h.ended
		}
		s.lastEvent = max(s.lastEvent, h.event, h.boundary)
	}
	return nil
}

func (m *mysqlTarget) queryLockWaits(ctx context.Context, conn *sql.Conn) ([][2]int64, error) {
	if !m.mysql8.Valid {
		var v string
		if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
			return nil, fmt.Errorf("read server version: %w", err)
		}
		// MySQL 8.0 removed INNODB_LOCK_WAITS; MariaDB kept it.
		m.mysql8 = sql.NullBool{Bool: !strings.Contains(v, "MariaDB") && !strings.HasPrefix(v, "5."), Valid: true}
	}
	q := queryLockWaitsMariaDB
	if m.mysql8.Bool {
		q = queryLockWaitsMySQL8
	}
	rs, err := conn.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("query lock waits: %w", err)
	}
	defer rs.Close()
	var out [][2]int64
	for rs.Next() {
		var w, b sql.NullInt64
		if err := rs.Scan(&w, &b); err != nil || !w.Valid || !b.Valid {
			continue
		}
		out = append(out, [2]int64{w.Int64, b.Int64})
	}
	return out, rs.Err()
}

func (m *mysqlTarget) delta(tag string) *tagDelta {
	d := m.batch[tag]
	if d == nil {
		d = &tagDelta{}
		m.batch[tag] = d
	}
	return d
}

// sessionTag is the tag a server session is holding its connection for:
// the running statement's, else its last statement's, else unknown.
func (m *mysqlTarget) sessionTag(r *serverRow) string {
	if r.command != "Sleep" && r.info.Valid {
		if tag, ok := m.tagOfStatement(r.info.String); ok {
			return tag
		}
	}
	if s := m.sessions[r.id]; s != nil && s.tag != "" {
		return s.tag
	}
	return UnknownTag
}

// apply credits the previous poll's holding sessions with the time since,
// records this poll's holders, and replaces the gauges.
func (m *mysqlTarget) apply(at time.Time, rows []serverRow, waits [][2]int64) {
	if !m.prevAt.IsZero() {
		sec := min(at.Sub(m.prevAt), m.maxGap).Seconds()
		for _, h := range m.held {
			if !h.inTrx && m.historyOK {
				// A statement outside a transaction: sampling would credit
				// a 40 ms statement a whole interval or nothing; its exact
				// time comes from performance_schema when it completes.
				continue
			}
			tag := h.tag
			if tag == UnknownTag {
				// Held without a known tag at the last poll (a transaction
				// that had only begun): its first statement since names it.
				if s := m.sessions[h.id]; s != nil && s.tag != "" {
					tag = s.tag
				}
			}
			d := m.delta(tag)
			d.hold += sec
			if h.idle {
				d.idle += sec
			} else {
				d.active += sec
			}
		}
	}
	// Statements that completed since the last poll, of sessions that were
	// not in a transaction then: the sampling above did not count them. (A
	// transaction's statements are inside its sampled hold.)
	for _, s := range m.sessions {
		if !s.inTrx && !m.prevAt.IsZero() {
			for tag, sec := range s.exact {
				d := m.delta(tag)
				d.hold += sec
				d.active += sec
			}
		}
		clear(s.exact)
	}
	m.prevAt = at
	m.held = m.held[:0]
	for _, s := range m.sessions {
		s.seen = false
	}
	sessions := map[string]int{}
	trx := map[string]trxFigures{}
	tagOf := map[int64]string{}
	for i := range rows {
		r := &rows[i]
		if s := m.sessions[r.id]; s != nil {
			s.seen = true
		} else {
			m.sessions[r.id] = &serverSession{seen: true}
		}
		active := r.command != "Sleep"
		sess := m.sessions[r.id]
		inTrx := r.inTrx && (active || !sess.ended)
		// MariaDB serves INNODB_TRX from a cache up to 100 ms old: a session
		// idle since its COMMIT may still show its transaction.
		sess.inTrx = inTrx
		if !active && !inTrx {
			continue
		}
		tag := m.sessionTag(r)
		tagOf[r.id] = tag
		m.held = append(m.held, heldRow{id: r.id, tag: tag, idle: !active, inTrx: inTrx})
		sessions[tag]++
		if inTrx {
			f := trx[tag]
			f.count++
			f.maxAge = max(f.maxAge, r.trxAge, 0) // a clock step can make TIMESTAMPDIFF negative
			f.rowsLocked += r.rowsLocked
			trx[tag] = f
		}
	}
	for id, s := range m.sessions {
		if !s.seen {
			delete(m.sessions, id) // disconnected: ids are not reused soon
		}
	}
	lw := map[[2]string]int{}
	for _, w := range waits {
		wt, bt := tagOf[w[0]], tagOf[w[1]]
		lw[[2]string{cmpOr(wt, UnknownTag), cmpOr(bt, UnknownTag)}]++
	}
	m.c.st.add(m.cfg.Name, SourceMySQL, m.batch)
	clear(m.batch)
	m.c.st.setGauges(m.cfg.Name, SourceMySQL, func(sr *series, g *gauges) {
		g.sessions = map[string]int{}
		for tag, n := range sessions {
			g.sessions[m.c.st.capTag(sr, tag)] += n
		}
		g.trx = map[string]trxFigures{}
		for tag, f := range trx {
			ct := m.c.st.capTag(sr, tag)
			o := g.trx[ct]
			o.count += f.count
			o.maxAge = max(o.maxAge, f.maxAge)
			o.rowsLocked += f.rowsLocked
			g.trx[ct] = o
		}
		g.waits = map[[2]string]int{}
		for k, n := range lw {
			g.waits[[2]string{m.c.st.capTag(sr, k[0]), m.c.st.capTag(sr, k[1])}] += n
		}
	})
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
