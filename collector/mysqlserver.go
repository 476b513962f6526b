package collector

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/collector/internal/attrib"
	"github.com/holdtime/holdtime/collector/internal/trxjoin"
)

// CollectorMarker starts every statement the MySQL source sends. It never
// credits a session running a statement that starts with it, nor counts
// such statements: collectors and `holdtime top --mysql` polling the same
// server never show up as a tag, nor as untagged. (ProxySQL lists no admin
// sessions in stats_mysql_processlist: polls of the admin interface need
// no marker.)
const CollectorMarker = "/* holdtime:collector */ "

// isCollectorStatement reports whether q is one of the collector's own.
func isCollectorStatement(q string) bool { return strings.HasPrefix(q, CollectorMarker) }

// Server-side queries: three per poll, and the setup queries once per
// connection and every setupEvery.
const (
	// Sessions and their InnoDB transaction. INNODB_TRX lists a transaction
	// once it has touched InnoDB (BEGIN alone does not show).
	queryServerSessions = CollectorMarker + `SELECT p.ID, p.HOST, p.COMMAND, p.INFO, t.trx_id IS NOT NULL, ` +
		`COALESCE(TIMESTAMPDIFF(SECOND, t.trx_started, NOW()), 0), COALESCE(t.trx_rows_locked, 0) ` +
		`FROM information_schema.PROCESSLIST p LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID ` +
		`WHERE p.ID <> CONNECTION_ID() AND p.USER <> 'system user' ` +
		`AND p.COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Binlog Dump GTID')`
	// Running statements (with the time they ran so far: TIMER_WAIT of an
	// unfinished event is the time elapsed, on MariaDB 10.6+ and MySQL
	// 5.7+), our own one included: its TIMER_END is the server's timer now.
	queryRunning = `SELECT s.THREAD_ID, t.PROCESSLIST_ID, t.PROCESSLIST_ID = CONNECTION_ID(), s.EVENT_ID, 1, ` +
		`s.SQL_TEXT, s.ERRORS, s.TIMER_WAIT, s.TIMER_END ` +
		`FROM performance_schema.events_statements_current s JOIN performance_schema.threads t ON t.THREAD_ID = s.THREAD_ID ` +
		`WHERE s.END_EVENT_ID IS NULL AND s.NESTING_EVENT_LEVEL = 0`
	// Statements that completed since the last read (TIMER_END is the
	// server's timer, picoseconds since it started). SQL_TEXT keeps
	// comments, unlike statement digests. history_long keeps the rows of
	// threads that ended, so a client that disconnects right after its
	// statement is still counted; the LEFT JOIN keeps them. MariaDB records
	// no text for the execution of a prepared statement (COM_STMT_EXECUTE):
	// its tag comes from the processlist while it runs, else from its
	// transaction or session (see executeTag).
	queryCompletedFmt = `SELECT h.THREAD_ID, t.PROCESSLIST_ID, 0, h.EVENT_ID, 0, h.SQL_TEXT, h.ERRORS, h.TIMER_WAIT, h.TIMER_END ` +
		`FROM performance_schema.%s h LEFT JOIN performance_schema.threads t ON t.THREAD_ID = h.THREAD_ID ` +
		`WHERE h.TIMER_END > ? AND h.NESTING_EVENT_LEVEL = 0 ` +
		`AND (h.SQL_TEXT IS NOT NULL OR h.EVENT_NAME = 'statement/com/Execute')%s`
	// MariaDB (10.6+, and MySQL 5.7) keep lock waits in information_schema.
	// Their trx ids are not unique (every transaction holding only shared
	// locks has 0): the waiter is joined by its requested lock, and the
	// blocker only when one transaction has its id, else 0 (the lock
	// reader, when on, names it from the locks: locksReader.blockers).
	queryLockWaitsMariaDB = CollectorMarker + `SELECT r.trx_mysql_thread_id, ` +
		`IF(COUNT(DISTINCT b.trx_mysql_thread_id) = 1, MIN(b.trx_mysql_thread_id), 0) ` +
		`FROM information_schema.INNODB_LOCK_WAITS w ` +
		`JOIN information_schema.INNODB_TRX r ON r.trx_requested_lock_id = w.requested_lock_id ` +
		`LEFT JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id ` +
		`AND b.trx_mysql_thread_id <> r.trx_mysql_thread_id ` +
		`GROUP BY r.trx_mysql_thread_id, w.blocking_lock_id`
	// MySQL 8.0 moved them to performance_schema.data_lock_waits, keyed by
	// performance_schema thread ids. Not run by this repository's CI
	// (MariaDB only): keep it this small.
	queryLockWaitsMySQL8 = CollectorMarker + `SELECT r.PROCESSLIST_ID, b.PROCESSLIST_ID ` +
		`FROM performance_schema.data_lock_waits w ` +
		`JOIN performance_schema.threads r ON r.THREAD_ID = w.REQUESTING_THREAD_ID ` +
		`JOIN performance_schema.threads b ON b.THREAD_ID = w.BLOCKING_THREAD_ID`

	// A join-only target's one query per poll besides the join's read:
	// the connections, for the board to map ProxySQL's backends.
	queryJoinConnections = CollectorMarker + `SELECT ID, HOST FROM information_schema.PROCESSLIST ` +
		`WHERE ID <> CONNECTION_ID() AND USER <> 'system user' AND COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Binlog Dump GTID')`

	queryVersion   = CollectorMarker + `SELECT VERSION()`
	queryUptime    = CollectorMarker + `SHOW GLOBAL STATUS LIKE 'Uptime'`
	queryPerfOn    = CollectorMarker + `SELECT @@performance_schema`
	queryConsumers = CollectorMarker + `SELECT NAME, ENABLED FROM performance_schema.setup_consumers ` +
		`WHERE NAME IN ('global_instrumentation', 'thread_instrumentation', 'events_statements_current', ` +
		`'events_statements_history', 'events_statements_history_long')`
)

// serverQueriesPerPoll is what one poll costs the server, stated in the
// docs and checked by a test.
const serverQueriesPerPoll = 3

// setupEvery is how often the source re-reads performance_schema's
// settings, so a consumer a DBA turned on (the fix of a degraded source) is
// used without a restart of the collector.
const setupEvery = 30 * time.Second

// timerMargin is how far before the newest TIMER_END seen the next read of
// completed statements starts: a statement is timed before it enters the
// history table, so one that ended just before another may be stored just
// after it (by far more than the microseconds in between when its thread
// is descheduled on a busy machine). Rows read twice are recognised by
// (THREAD_ID, EVENT_ID).
const timerMargin = uint64(500 * time.Millisecond / time.Nanosecond * 1000) // picoseconds

// stmtTable is where completed statements are read from.
type stmtTable string

const (
	tableHistoryLong stmtTable = "events_statements_history_long" // every statement, until the ring wraps
	tableHistory     stmtTable = "events_statements_history"      // the last 10 per live thread: a sample
	tableCurrent     stmtTable = "events_statements_current"      // the last one per live thread: a sample
)

// stmtKey identifies a statement event.
type stmtKey struct{ thread, event uint64 }

// stmtRow is a row of the statements query.
type stmtRow struct {
	key     stmtKey
	pid     int64 // processlist id; 0 for a thread that ended
	own     bool
	running bool
	text    string
	errs    int64
	wait    sql.NullInt64 // picoseconds
	end     uint64
	hasEnd  bool
}

// runningStmt is a statement outside a transaction credited while it runs:
// at completion only its TIMER_WAIT minus what was credited is added.
type runningStmt struct {
	credited float64 // seconds
	tag      string
	seen     time.Time // last poll that saw it running
}

type serverSession struct {
	lastEvent uint64 // highest statement EVENT_ID seen
	tag       string // tag of the current transaction's last statement; "" unknown yet
	tagEvent  uint64 // the EVENT_ID that set tag
	ended     bool   // its last statement was a COMMIT/ROLLBACK
	seen      bool   // listed by the current poll
	// touched is set when the current poll read statements of the
	// session: one that connected after the processlist was read is kept.
	touched bool
	inTrx   bool // in a transaction at the last poll
	// openBegin is the start (server timer) of the BEGIN of the
	// transaction performance_schema shows open; 0 when none is.
	openBegin uint64
}

type serverRow struct {
	id         int64
	host       string // client address, host:port for TCP: a ProxySQL backend's l_srv_host:l_srv_port
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
	// carry is hold already measured (a transaction's time from its BEGIN
	// to this poll) waiting for the next poll to name its tag.
	carry figures
}

// statementSetup is what performance_schema offers the source.
type statementSetup struct {
	running bool      // events_statements_current: running statements' elapsed time
	table   stmtTable // completed statements; "" none
}

// mysqlTarget polls one MySQL/MariaDB server.
type mysqlTarget struct {
	st     *store
	log    *slog.Logger
	cfg    MySQLConfig
	secret string
	user   string
	db     *sql.DB
	causes *causeLogger

	mu     sync.Mutex
	conn   *sql.Conn    // kept across polls: a new one means the setup is read again
	mysql8 sql.NullBool // lock wait query flavour
	// lastPoll is when the last successful poll read the server: one
	// that started later restarted since.
	lastPoll time.Time
	setup    statementSetup
	// setupAt is when the setup was last read; zero forces a read.
	setupAt time.Time

	sessions  map[int64]*serverSession
	held      []heldRow // rows of the previous poll sampled at the next
	prevAt    time.Time
	maxGap    time.Duration
	tagBuf    []byte
	batch     map[string]*tagDelta
	primed    bool // completed statements read once: later reads count
	watermark uint64
	seenStmts map[stmtKey]uint64 // completed statements within timerMargin of watermark, by TIMER_END
	lastMax   stmtKey            // the completed statement with TIMER_END == watermark
	running   map[stmtKey]*runningStmt
	stmts     []stmtRow  // reused
	fresh     []*stmtRow // reused
	stmtAt    time.Time  // when the statements query was sent: the time of timerNow
	stmtDone  time.Time  // when its answer had been read
	// timerPrev is the server's timer at the last poll that read it, and
	// timerPrevDone when that poll's answer had been read: how far the
	// timer must have run since, unless the server restarted.
	timerPrev     uint64
	timerPrevDone time.Time

	// hints are app hold spans naming a server connection (the
	// app↔server join), under hintMu: they arrive from the OTLP receiver
	// while a poll runs. nil without the OTLP receiver. pendingHold is
	// hold of an unknown tag waiting TagGrace for a span to name it.
	hintMu      sync.Mutex
	hints       map[int64][]sessionHint
	pendingHold []serverPending

	locks    *locksReader   // nil with LocksInterval < 0
	excluded map[int64]bool // the lock reader's connection

	// join is this server's side of the proxy↔server join: the
	// connections listed and the reads of the backends ProxySQL shows held.
	// degraded are the statement setup's degradations, joinDegraded the
	// join's (published together).
	join                   *serverJoin
	degraded, joinDegraded []Degradation
}

func newMySQLTarget(st *store, ccfg Config, router *spanRouter, cfg MySQLConfig) (*mysqlTarget, error) {
	mc, err := parseDSN(cfg.DSN, ccfg.Timeout)
	if err != nil {
		return nil, err
	}
	// The statements query has one parameter: inline it rather than
	// prepare a statement per poll.
	mc.InterpolateParams = true
	db, err := openDB(mc, 1)
	if err != nil {
		return nil, err
	}
	m := &mysqlTarget{st: st, log: ccfg.Logger, cfg: cfg, secret: mc.Passwd, user: mc.User, db: db, causes: mc.Logger.(*causeLogger),
		sessions: map[int64]*serverSession{}, maxGap: max(4*cfg.Interval, time.Second), batch: map[string]*tagDelta{},
		seenStmts: map[stmtKey]uint64{}, running: map[stmtKey]*runningStmt{}, join: newServerJoin(),
		hints: hintsIf(!cfg.JoinOnly && router.mysqlHinted(ccfg, cfg.Name))}
	if cfg.LocksInterval > 0 && !cfg.JoinOnly {
		if m.locks, err = newLocksReader(m, cfg.DSN, ccfg.Timeout); err != nil {
			db.Close()
			return nil, err
		}
	}
	return m, nil
}

// polled lists the target's polled sources: the server and, when
// configured, its locks.
func (m *mysqlTarget) polled() []polled {
	out := []polled{{target: m.cfg.Name, source: SourceMySQL, interval: m.cfg.Interval, poll: m.poll, secret: m.secret, causes: m.causes}}
	if m.locks != nil {
		out = append(out, polled{target: m.cfg.Name, source: SourceMySQLLocks, interval: m.cfg.LocksInterval, poll: m.locks.poll,
			secret: m.secret, causes: m.causes, own: m.locks.sat.ownMetrics})
	}
	return out
}

func (m *mysqlTarget) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		m.conn.Close()
		m.conn = nil
	}
	if m.locks != nil {
		m.locks.close()
	}
	return m.db.Close()
}

// exclude leaves connection id out of the source's figures: the lock
// reader's own.
func (m *mysqlTarget) exclude(id int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.excluded == nil {
		m.excluded = map[int64]bool{}
	}
	if !m.excluded[id] {
		clear(m.excluded) // the reader has one connection: its old id is gone
		m.excluded[id] = true
	}
}

// tagOfStatement parses a statement's tag. Statements that drivers and
// wrappers send on their own, untagged, say nothing ("", false): BEGIN,
// COMMIT, ROLLBACK, SET autocommit, SET TRANSACTION (go-sql-driver/mysql
// sends it before START TRANSACTION for an isolation level), SET NAMES and
// SELECT CONNECTION_ID() (conntag.WithSessionID); so do a collector's own
// statements. Otherwise the session would be credited to "untagged"
// between a transaction's start and its first statement, and a pooled
// session to whatever ran last.
func (m *mysqlTarget) tagOfStatement(q string) (string, bool) {
	if q == "" || isCollectorStatement(q) {
		return "", false // no text (a prepared statement's execution on MariaDB) names nothing
	}
	b := []byte(q)
	if class, _, _ := attrib.Classify(b); class == attrib.ClassBegin || class == attrib.ClassCommit ||
		class == attrib.ClassAutocommitOff || class == attrib.ClassAutocommitOn {
		return "", false
	}
	t, ok := AppendTag(m.tagBuf[:0], b)
	m.tagBuf = t[:0]
	if !ok {
		if driverStatement(b) {
			return "", false
		}
		if attrib.MayBeTruncated(b) {
			return UnknownTag, true // its tag may have been cut off with its end
		}
		return UntaggedTag, true
	}
	return string(t), true
}

// driverStatement reports whether an untagged statement is one a driver
// sends by itself around the application's statements.
func driverStatement(q []byte) bool {
	kw, rest := attrib.FirstWord(attrib.SkipLeadingComments(q))
	switch {
	case attrib.EqFold(kw, "SET"):
		w, after := attrib.FirstWord(rest)
		if attrib.EqFold(w, "SESSION") || attrib.EqFold(w, "LOCAL") {
			w, _ = attrib.FirstWord(after)
		}
		return attrib.EqFold(w, "TRANSACTION") || attrib.EqFold(w, "NAMES") || attrib.EqFold(w, "CHARACTER")
	case attrib.EqFold(kw, "SELECT"):
		return bytes.EqualFold(bytes.TrimSpace(rest), []byte("CONNECTION_ID()"))
	}
	return false
}

// boundary reports whether a statement starts or ends a transaction.
func boundary(q string) (begin, end bool) {
	class, _, _ := attrib.Classify([]byte(q))
	return class == attrib.ClassBegin, class == attrib.ClassCommit
}

func (m *mysqlTarget) poll(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.pollLocked(ctx)
	if err != nil && m.conn != nil {
		// Whatever failed, the next poll starts on a fresh connection and
		// reads the setup again (a restarted server shows there).
		m.conn.Close()
		m.conn = nil
	}
	return err
}

func (m *mysqlTarget) pollLocked(ctx context.Context) error {
	if m.conn == nil {
		conn, err := m.db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		m.conn, m.setupAt = conn, time.Time{}
	}
	if m.setupAt.IsZero() || time.Since(m.setupAt) >= setupEvery {
		if err := m.readSetup(ctx); err != nil {
			return err
		}
	}
	if m.cfg.JoinOnly {
		return m.pollJoinOnly(ctx)
	}
	at := time.Now()
	rows, bad, err := m.querySessions(ctx)
	if err != nil {
		return err
	}
	m.stmtAt = time.Now()
	stmts, err := m.queryStatements(ctx, &bad)
	if err != nil {
		return err
	}
	m.stmtDone = time.Now()
	waits, err := m.queryLockWaits(ctx)
	if err != nil {
		return err
	}
	m.st.malformed(m.cfg.Name, SourceMySQL, bad)
	m.apply(at, rows, stmts, waits)
	// The server's figures are read and credited: a failed join read
	// degrades the join, never the poll.
	m.readJoin(ctx)
	m.lastPoll = at
	return nil
}

// pollJoinOnly is a join-only target's poll (MySQLConfig.JoinOnly): the
// connections listed, for the board to map ProxySQL's backends, and the
// join's read of those shown held. Nothing is credited.
func (m *mysqlTarget) pollJoinOnly(ctx context.Context) error {
	at := time.Now()
	rs, err := m.conn.QueryContext(ctx, queryJoinConnections)
	if err != nil {
		return fmt.Errorf("query information_schema.PROCESSLIST: %w: the account needs the PROCESS privilege", err)
	}
	defer rs.Close()
	hosts := map[int64]string{}
	bad := 0
	for rs.Next() {
		var id int64
		var host sql.NullString
		if err := rs.Scan(&id, &host); err != nil {
			bad++
			continue
		}
		hosts[id] = host.String
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("read processlist: %w", err)
	}
	m.st.malformed(m.cfg.Name, SourceMySQL, bad)
	m.join.update(at, hosts)
	m.readJoin(ctx)
	m.lastPoll = at
	return nil
}

// readSetup reads the server's version, start time and what
// performance_schema records, marks the source degraded when that is not
// enough, and forgets every session when the server restarted.
func (m *mysqlTarget) readSetup(ctx context.Context) error {
	conn := m.conn
	if !m.mysql8.Valid {
		var v string
		if err := conn.QueryRowContext(ctx, queryVersion).Scan(&v); err != nil {
			return fmt.Errorf("read server version: %w", err)
		}
		// MySQL 8.0 removed INNODB_LOCK_WAITS; MariaDB kept it.
		m.mysql8 = sql.NullBool{Bool: !strings.Contains(v, "MariaDB") && !strings.HasPrefix(v, "5."), Valid: true}
	}
	var name, uptime string
	if err := conn.QueryRowContext(ctx, queryUptime).Scan(&name, &uptime); err != nil {
		return fmt.Errorf("read Uptime: %w", err)
	}
	if secs, err := strconv.ParseInt(uptime, 10, 64); err == nil {
		// Uptime is whole seconds: the start it implies is up to a second
		// late. A server that started after the last poll that read it
		// restarted since.
		boot := time.Now().Add(-time.Duration(secs) * time.Second)
		if !m.lastPoll.IsZero() && boot.After(m.lastPoll.Add(time.Second)) {
			m.restarted("Uptime", secs)
		}
	}
	setup, degraded, err := m.readStatementSetup(ctx, conn)
	if err != nil {
		return err
	}
	if setup.table != m.setup.table {
		m.lastMax = stmtKey{} // not in the other table: no sign of a wrap
	}
	m.setup, m.setupAt = setup, time.Now()
	m.degraded = degraded
	m.degrade(append(slices.Clip(degraded), m.joinDegraded...))
	return nil
}

// restarted forgets the sessions of a server that restarted.
func (m *mysqlTarget) restarted(sign string, uptime int64) {
	m.log.Warn("server restarted: sessions that died with it earn no more hold",
		"target", m.cfg.Name, "detected_by", sign, "uptime_seconds", uptime)
	m.forget()
}

// forget drops what the source knew of the server's sessions and
// statements: after a restart its thread ids and timer start over.
func (m *mysqlTarget) forget() {
	clear(m.sessions)
	m.held = m.held[:0]
	m.prevAt = time.Time{}
	m.hintMu.Lock()
	for _, p := range m.pendingHold {
		m.delta(UnknownTag).Add(&p.f)
	}
	m.pendingHold = m.pendingHold[:0]
	clear(m.hints)
	m.hintMu.Unlock()
	m.watermark, m.lastMax = 0, stmtKey{}
	m.timerPrev, m.timerPrevDone = 0, time.Time{}
	clear(m.seenStmts)
	clear(m.running)
	m.join.reset()
}

// mysqlErrNumber returns the server's error number, 0 for other errors.
func mysqlErrNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// Error numbers of a missing privilege: ER_DBACCESS_DENIED_ERROR,
// ER_TABLEACCESS_DENIED_ERROR, ER_SPECIFIC_ACCESS_DENIED_ERROR.
func accessDenied(err error) bool {
	switch mysqlErrNumber(err) {
	case 1044, 1142, 1227:
		return true
	}
	return false
}

// Degradation reasons of the MySQL source, worst first.
const (
	ReasonPerfSchemaOff       = "performance_schema_off"
	ReasonNoPerfSchemaGrant   = "no_performance_schema_privilege"
	ReasonInstrumentationOff  = "instrumentation_consumer_off"
	ReasonStatementsOff       = "statement_consumers_off"
	ReasonHistoryOff          = "history_consumer_off"
	ReasonHistoryLongOff      = "history_long_consumer_off"
	ReasonCurrentOff          = "current_consumer_off"
	ReasonStatementsWrapped   = "history_long_wrapped"
	ReasonTrxInstrumentOff    = "transaction_instrument_off"
	ReasonTrxConsumerOff      = "transactions_consumer_off"
	ReasonJoinReadFailed      = "server_join_read_failed"
	consumerFixCnfPrefix      = "; to keep it after a restart, add "
	consumerFixSQL            = "UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME IN (%s)"
	consumerFixCnf            = "; to keep it after a restart, add %s under [mysqld] in my.cnf"
	perfSchemaMissesWhat      = "statements, errors and the tags of idle transactions are not known (idle transactions count as unknown), and a statement outside a transaction is sampled"
	historyLongConsumerOption = "performance-schema-consumer-events-statements-history-long=ON"
)

// readStatementSetup finds what performance_schema records and which
// degradations follow.
func (m *mysqlTarget) readStatementSetup(ctx context.Context, conn *sql.Conn) (statementSetup, []Degradation, error) {
	var on sql.NullString
	if err := conn.QueryRowContext(ctx, queryPerfOn).Scan(&on); err != nil {
		return statementSetup{}, nil, fmt.Errorf("read @@performance_schema: %w", err)
	}
	if on.String != "1" && !strings.EqualFold(on.String, "ON") {
		return statementSetup{}, []Degradation{{Reason: ReasonPerfSchemaOff,
			Detail: "performance_schema is off (MariaDB's default): " + perfSchemaMissesWhat,
			Fix:    "add performance_schema=ON and " + historyLongConsumerOption + " under [mysqld] in my.cnf and restart the server"}}, nil
	}
	rs, err := conn.QueryContext(ctx, queryConsumers)
	if err != nil {
		if accessDenied(err) {
			return statementSetup{}, []Degradation{{Reason: ReasonNoPerfSchemaGrant,
				Detail: "this account cannot read performance_schema: " + perfSchemaMissesWhat,
				Fix:    fmt.Sprintf("GRANT SELECT ON performance_schema.* TO '%s'@'%%' (use the account's host)", m.user)}}, nil
		}
		return statementSetup{}, nil, fmt.Errorf("read performance_schema.setup_consumers: %w", err)
	}
	defer rs.Close()
	enabled := map[string]bool{}
	for rs.Next() {
		var name, value string
		if err := rs.Scan(&name, &value); err != nil {
			return statementSetup{}, nil, fmt.Errorf("read performance_schema.setup_consumers: %w", err)
		}
		enabled[name] = strings.EqualFold(value, "YES")
	}
	if err := rs.Err(); err != nil {
		return statementSetup{}, nil, fmt.Errorf("read performance_schema.setup_consumers: %w", err)
	}
	fix := func(names ...string) string {
		quoted := make([]string, len(names))
		opts := make([]string, len(names))
		for i, n := range names {
			quoted[i] = "'" + n + "'"
			opts[i] = "performance-schema-consumer-" + strings.ReplaceAll(n, "_", "-") + "=ON"
		}
		return fmt.Sprintf(consumerFixSQL, strings.Join(quoted, ", ")) + fmt.Sprintf(consumerFixCnf, strings.Join(opts, " and "))
	}
	if !enabled["global_instrumentation"] || !enabled["thread_instrumentation"] {
		return statementSetup{}, []Degradation{{Reason: ReasonInstrumentationOff,
			Detail: "performance_schema's global or thread instrumentation is off: " + perfSchemaMissesWhat,
			Fix:    fix("global_instrumentation", "thread_instrumentation", "events_statements_current", "events_statements_history_long")}}, nil
	}
	var s statementSetup
	var d []Degradation
	s.running = enabled["events_statements_current"]
	switch {
	case enabled["events_statements_history_long"]:
		s.table = tableHistoryLong
	case enabled["events_statements_history"]:
		s.table = tableHistory
		d = append(d, Degradation{Reason: ReasonHistoryLongOff,
			Detail: "events_statements_history_long is off, the source reads the last 10 statements per session: statements of clients that disconnect right after are missed, and under load the counts are a lower bound",
			Fix:    fix("events_statements_history_long")})
	case s.running:
		s.table = tableCurrent
		d = append(d, Degradation{Reason: ReasonHistoryOff,
			Detail: "events_statements_history and _history_long are off, the source sees only each session's last statement: counts are a lower bound, statements of clients that disconnect right after are missed",
			Fix:    fix("events_statements_history_long")})
	default:
		return statementSetup{}, []Degradation{{Reason: ReasonStatementsOff,
			Detail: "every events_statements consumer is off: " + perfSchemaMissesWhat,
			Fix:    fix("events_statements_current", "events_statements_history_long")}}, nil
	}
	if !s.running {
		d = append(d, Degradation{Reason: ReasonCurrentOff,
			Detail: "events_statements_current is off: a running statement outside a transaction is sampled instead of timed",
			Fix:    fix("events_statements_current")})
	}
	return s, d, nil
}

// degrade publishes the degradations and logs a change once.
func (m *mysqlTarget) degrade(d []Degradation) {
	if !m.st.degrade(m.cfg.Name, SourceMySQL, d) {
		return
	}
	if len(d) == 0 {
		m.log.Info("source no longer degraded", "target", m.cfg.Name, "source", SourceMySQL)
		return
	}
	for _, x := range d {
		m.log.Warn("source degraded: "+x.Detail, "target", m.cfg.Name, "source", SourceMySQL, "reason", x.Reason, "fix", x.Fix)
	}
}

func (m *mysqlTarget) querySessions(ctx context.Context) ([]serverRow, int, error) {
	rs, err := m.conn.QueryContext(ctx, queryServerSessions)
	if err != nil {
		return nil, 0, fmt.Errorf("query information_schema.PROCESSLIST and INNODB_TRX: %w: the account needs the PROCESS privilege", err)
	}
	defer rs.Close()
	var out []serverRow
	bad := 0
	for rs.Next() {
		var r serverRow
		var cmd sql.NullString
		var host sql.NullString
		if err := rs.Scan(&r.id, &host, &cmd, &r.info, &r.inTrx, &r.trxAge, &r.rowsLocked); err != nil {
			bad++
			continue
		}
		r.command, r.host = cmd.String, host.String
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, 0, fmt.Errorf("read processlist: %w", err)
	}
	return out, bad, nil
}

// queryStatements reads running statements and those completed since the
// last read, as the setup allows. A privilege revoked since the setup was
// read degrades the source rather than failing it.
func (m *mysqlTarget) queryStatements(ctx context.Context, bad *int) ([]stmtRow, error) {
	m.stmts = m.stmts[:0]
	var parts []string
	var args []any
	if m.setup.running {
		parts = append(parts, queryRunning)
	}
	if m.setup.table != "" {
		extra := ""
		if m.setup.table == tableCurrent {
			extra = " AND h.END_EVENT_ID IS NOT NULL"
		}
		parts = append(parts, fmt.Sprintf(queryCompletedFmt, m.setup.table, extra))
		args = append(args, m.watermark-min(m.watermark, timerMargin))
	}
	if len(parts) == 0 {
		return nil, nil
	}
	rs, err := m.conn.QueryContext(ctx, CollectorMarker+strings.Join(parts, " UNION ALL "), args...)
	if err != nil {
		if accessDenied(err) {
			m.setupAt = time.Time{} // read again: it says why
			m.setup = statementSetup{}
			return nil, nil
		}
		return nil, fmt.Errorf("query performance_schema statements: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var r stmtRow
		var pid sql.NullInt64
		var own sql.NullBool
		var text sql.NullString
		var end sql.Null[uint64]
		if err := rs.Scan(&r.key.thread, &pid, &own, &r.key.event, &r.running, &text, &r.errs, &r.wait, &end); err != nil {
			*bad++
			continue
		}
		r.pid, r.own, r.text, r.end, r.hasEnd = pid.Int64, own.Bool, text.String, end.V, end.Valid
		m.stmts = append(m.stmts, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read performance_schema statements: %w", err)
	}
	return m.stmts, nil
}

func (m *mysqlTarget) queryLockWaits(ctx context.Context) ([][2]int64, error) {
	q := queryLockWaitsMariaDB
	if m.mysql8.Bool {
		q = queryLockWaitsMySQL8
	}
	rs, err := m.conn.QueryContext(ctx, q)
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
		if b.Int64 == 0 && m.locks != nil {
			if bs := m.locks.blockers(w.Int64); len(bs) > 0 {
				for _, x := range bs {
					out = append(out, [2]int64{w.Int64, x})
				}
				continue
			}
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

// credit adds active hold to tag.
func (m *mysqlTarget) credit(tag string, sec float64) {
	if sec <= 0 {
		return
	}
	d := m.delta(tag)
	d.Hold += sec
	d.Active += sec
}

func (m *mysqlTarget) session(id int64) *serverSession {
	s := m.sessions[id]
	if s == nil {
		s = &serverSession{}
		m.sessions[id] = s
	}
	s.touched = true
	return s
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

// executeTag is the tag of a prepared statement's execution that MariaDB
// recorded without its text and the source did not see running: its
// transaction's (the first tagged statement since the last read), else
// the session's last, else unknown.
func (m *mysqlTarget) executeTag(pid int64, w *trxWindow) string {
	if w != nil && w.firstTag != "" {
		return w.firstTag
	}
	if s := m.sessions[pid]; s != nil && s.tag != "" && pid != 0 {
		return s.tag
	}
	return UnknownTag
}

// trxWindow is what one read of completed statements says of a session's
// transactions: the latest BEGIN and COMMIT/ROLLBACK since the last read,
// and the statements of a transaction begun since, whose time is credited
// with that transaction's hold (or on their own when the server does not
// list it as a transaction after all).
type trxWindow struct {
	beginEvent, commitEvent uint64
	beginStart, commitEnd   uint64 // server timer, picoseconds
	pending                 []pendingStmt
	// firstTag is the tag of the first statement since the last read that
	// came before any COMMIT: it names the transaction the last poll held
	// without a tag, even when that transaction has ended since.
	firstTag string
}

type pendingStmt struct {
	tag string
	sec float64
}

// open reports whether a transaction began since the last read and is
// still open.
func (w *trxWindow) open() bool { return w != nil && w.beginEvent > w.commitEvent }

// ended reports whether a transaction ended since the last read.
func (w *trxWindow) ended() bool { return w != nil && w.commitEvent > 0 }

// publishJoin hands the proxy↔server join the connections listed now.
func (m *mysqlTarget) publishJoin(at time.Time, listed map[int64]*serverRow) {
	hosts := make(map[int64]string, len(listed))
	for id, r := range listed {
		hosts[id] = r.host
	}
	m.join.update(at, hosts)
}

// readJoin reads the performance_schema evidence of the backends the
// ProxySQL samplers showed held (none: no read), for the proxy↔server
// join, and publishes what the server's setup costs the join. A failed
// read degrades the join (ReasonJoinReadFailed, until a read succeeds)
// and leaves the poll's figures alone; the connection is dropped only
// when it is unusable, so the next poll opens a new one.
func (m *mysqlTarget) readJoin(ctx context.Context) {
	ids := m.join.wantedIDs(time.Now())
	if len(ids) == 0 {
		return
	}
	r, err := trxjoin.ReadServer(ctx, m.conn, ids)
	if errors.Is(err, trxjoin.ErrNoPerformanceSchema) {
		return // the statement setup's degradation says so
	}
	if err != nil {
		if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || ctx.Err() != nil {
			m.conn.Close()
			m.conn = nil
		}
		m.publishJoinDegraded(append(m.joinSetupDegraded(), m.joinReadFailed(err)))
		return
	}
	m.join.addRead(r)
	var d []Degradation
	for _, x := range r.Setup.Degradations() {
		// The statement consumers are the statement setup's degradations.
		if reason := joinReasons[x.Item]; reason != "" {
			d = append(d, Degradation{Reason: reason, Detail: "proxy↔server join: " + x.Why,
				Fix: x.Fix + consumerFixCnfPrefix + x.Config + " under [mysqld] in my.cnf"})
		}
	}
	m.publishJoinDegraded(d)
}

// joinSetupDegraded is the join's degradations but a failed read's: what
// the last read that succeeded said of the setup.
func (m *mysqlTarget) joinSetupDegraded() []Degradation {
	var d []Degradation
	for _, x := range m.joinDegraded {
		if x.Reason != ReasonJoinReadFailed {
			d = append(d, x)
		}
	}
	return d
}

// joinReadFailed is the degradation of a failed join read: its error
// (the DSN's password scrubbed; the driver's messages name no DSN) and
// what it costs.
func (m *mysqlTarget) joinReadFailed(err error) Degradation {
	fix := "the read is retried every poll; check the error and the server's log"
	if accessDenied(err) {
		fix = fmt.Sprintf("GRANT SELECT ON performance_schema.* TO '%s'@'%%' (use the account's host)", m.user)
	}
	return Degradation{Reason: ReasonJoinReadFailed,
		Detail: "proxy↔server join: reading the held backends' performance_schema evidence failed (" + scrub(err, m.secret) +
			"): the server's figures are unaffected, but ProxySQL's idle backend hold gets no exact tag until a read succeeds",
		Fix: fix}
}

// publishJoinDegraded publishes the join's degradations beside the
// statement setup's when they changed.
func (m *mysqlTarget) publishJoinDegraded(d []Degradation) {
	if !slices.Equal(d, m.joinDegraded) {
		m.joinDegraded = d
		m.degrade(append(slices.Clip(m.degraded), d...))
	}
}

// joinReasons are the degradation reasons of the join's own setup items.
var joinReasons = map[string]string{
	"mysql.instruments.transaction":              ReasonTrxInstrumentOff,
	"mysql.consumer.events_transactions_current": ReasonTrxConsumerOff,
}

func hintsIf(on bool) map[int64][]sessionHint {
	if on {
		return map[int64][]sessionHint{}
	}
	return nil
}

// serverPending is hold of a server connection whose tag was unknown.
type serverPending struct {
	id       int64
	from, to time.Time
	f        figures
}

// hint records what an app hold span says: connection id (the server's
// thread id, when the app connects without ProxySQL) was held for tag from
// start to end.
func (m *mysqlTarget) hint(id int64, h sessionHint) {
	if m.hints == nil {
		return
	}
	m.hintMu.Lock()
	defer m.hintMu.Unlock()
	hs, ok := m.hints[id]
	if !ok && len(m.hints) >= 1<<16 {
		return
	}
	if len(hs) >= maxHintsPerSession {
		hs = append(hs[:0], hs[1:]...)
	}
	m.hints[id] = append(hs, h)
}

// resolvePending credits pending hold to the span that contains it (within
// one poll interval of slack: the app's and the collector's clocks), or to
// unknown once the grace period is over, and forgets old spans.
func (m *mysqlTarget) resolvePending(at time.Time) {
	if m.hints == nil {
		return
	}
	m.hintMu.Lock()
	defer m.hintMu.Unlock()
	slack := m.cfg.Interval
	kept := m.pendingHold[:0]
	for _, p := range m.pendingHold {
		tag := ""
		for _, h := range m.hints[p.id] {
			if !p.from.Before(h.Start.Add(-slack)) && !p.to.After(h.End.Add(slack)) {
				tag = h.Tag
			}
		}
		switch {
		case tag != "":
			m.delta(tag).Add(&p.f)
		case at.Sub(p.to) > m.cfg.TagGrace:
			m.delta(UnknownTag).Add(&p.f)
		default:
			kept = append(kept, p)
		}
	}
	clear(m.pendingHold[len(kept):])
	m.pendingHold = kept
	for id, hs := range m.hints {
		n := 0
		for _, h := range hs {
			if at.Sub(h.Received) <= m.cfg.TagGrace+time.Minute {
				hs[n] = h
				n++
			}
		}
		if n == 0 {
			delete(m.hints, id)
		} else {
			m.hints[id] = hs[:n]
		}
	}
}

func cmpOr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
