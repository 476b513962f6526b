package locks

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdtime/holdtime/conntag"
)

// The tags of what cannot be attributed; the same words as package
// collector's UntaggedTag and UnknownTag.
const (
	// UntaggedTag: the transaction's statements carry no tag.
	UntaggedTag = "untagged"
	// UnknownTag: no statement of the transaction could be seen.
	UnknownTag = "unknown"
)

// Flavor is the kind of server.
type Flavor string

const (
	MariaDB Flavor = "mariadb"
	MySQL   Flavor = "mysql"
)

// Where a snapshot's lock counts come from.
const (
	// SourceStatus: SHOW ENGINE INNODB STATUS with
	// innodb_status_output_locks=ON (MariaDB).
	SourceStatus = "innodb_status"
	// SourceDataLocks: performance_schema.data_locks (MySQL 8).
	SourceDataLocks = "performance_schema.data_locks"
)

// Config configures a Reader. The zero value of every field is its
// documented default.
type Config struct {
	// ParseTag reads a statement's tag. Default conntag.ParseTag, the tag
	// grammar's one parser (what the collector reads tags with too); set it
	// only to read another convention.
	ParseTag func(statement string) (tag string, ok bool)
	// MaxTransactions bounds the transactions a snapshot lists, oldest
	// first. Default 1,000.
	MaxTransactions int
	// SessionTag, when set, is asked for the tag of a session whose
	// transaction's tag stayed unknown from the server's statement
	// history: a caller that records every session's statements (the
	// collector reads events_statements_history_long) knows more than the
	// last 10 per thread. It must answer only for the session's current
	// transaction, and must not call the Reader.
	SessionTag func(threadID int64) (tag string, ok bool)
}

// Reader reads the locks, lock waits, deadlocks and thread saturation of
// one MySQL 8 or MariaDB 10.6+ server. It keeps no state between reads but
// the server's flavour, and is safe for concurrent use.
type Reader struct {
	db  *sql.DB
	cfg Config

	mu      sync.Mutex
	server  Server
	haveVer bool
}

// Server names the server read.
type Server struct {
	Flavor  Flavor `json:"flavor"`
	Version string `json:"version"`
}

// New returns a Reader on db. It runs no statement until the first read.
func New(db *sql.DB, cfg Config) (*Reader, error) {
	if db == nil {
		return nil, errors.New("locks: New needs a *sql.DB")
	}
	if cfg.ParseTag == nil {
		cfg.ParseTag = conntag.ParseTag
	}
	if cfg.MaxTransactions < 0 {
		return nil, fmt.Errorf("locks: Config.MaxTransactions %d is negative", cfg.MaxTransactions)
	}
	cfg.MaxTransactions = cmp.Or(cfg.MaxTransactions, 1000)
	return &Reader{db: db, cfg: cfg}, nil
}

// Snapshot is what one Read saw.
type Snapshot struct {
	At     time.Time `json:"at"`
	Server Server    `json:"server"`
	// LockSource says where Transactions[].Locks come from: SourceStatus
	// or SourceDataLocks.
	LockSource string     `json:"lock_source"`
	LockOutput LockOutput `json:"lock_output"`
	// StatusBytes is the length of SHOW ENGINE INNODB STATUS; when
	// StatusTruncated, the server cut it (MaxStatusSize) and transactions
	// or their locks are missing from it.
	StatusBytes     int  `json:"status_bytes"`
	StatusTruncated bool `json:"status_truncated"`
	// Transactions are the open InnoDB transactions, oldest first, at most
	// Config.MaxTransactions (TransactionsCut counts the rest).
	Transactions    []Transaction `json:"transactions"`
	TransactionsCut bool          `json:"transactions_cut,omitempty"`
	// Waits are the lock waits: who waits for whom.
	Waits []Wait `json:"waits"`
	// Chains are the waits as trees, one per root blocker (a session that
	// blocks others and waits for none), the root holding up most first.
	Chains []Chain `json:"chains"`
	// MetadataWaits are sessions waiting for metadata locks (DDL behind
	// open transactions), where the server records them (see Notes).
	MetadataWaits []MetadataWait `json:"metadata_waits"`
	// LatestDeadlock is the server's LATEST DETECTED DEADLOCK (nil: none
	// since it started). Use Deadlocks to report each one once.
	LatestDeadlock *Deadlock `json:"latest_deadlock,omitempty"`
	// DeadlockCount is the server's deadlock counter (MariaDB
	// Innodb_deadlocks, MySQL INNODB_METRICS lock_deadlocks), when known.
	DeadlockCount      int64      `json:"deadlock_count"`
	DeadlockCountKnown bool       `json:"deadlock_count_known"`
	Saturation         Saturation `json:"saturation"`
	// RowLocksPerRow are, per tag and table, the row locks per row locked
	// in the clustered index: 1.0 when rows are locked once, 2.0 when a
	// secondary index record is locked with each.
	RowLocksPerRow []RowLockRatio `json:"row_locks_per_row"`
	Hints          []Hint         `json:"hints"`
	// Notes say what this snapshot could not see, and why.
	Notes []string `json:"notes"`
}

// LockOutput describes innodb_status_output_locks, which MariaDB needs for
// lock counts by kind.
type LockOutput struct {
	// Needed: the lock counts come from the status text (MariaDB). MySQL 8
	// reads performance_schema.data_locks and needs no setting.
	Needed  bool `json:"needed"`
	Enabled bool `json:"enabled"`
	// Enable is the statement that turns it on (for a person to run).
	Enable string `json:"enable,omitempty"`
}

// Transaction is an open InnoDB transaction.
type Transaction struct {
	TrxID    string `json:"trx_id"`
	ThreadID int64  `json:"thread_id"`
	// Tag is the conn_tag of its statements (see the package doc): its
	// running statement's, else its latest tagged one's. Tags are all the
	// tags its statements carried, sorted, when more than one.
	Tag  string   `json:"tag"`
	Tags []string `json:"tags,omitempty"`
	// AgeSeconds is how long it has been open (whole seconds: INNODB_TRX).
	AgeSeconds float64 `json:"age_seconds"`
	// State is INNODB_TRX's trx_state: RUNNING, LOCK WAIT, ROLLING BACK,
	// COMMITTING; Operation what it does inside InnoDB now.
	State     string `json:"state"`
	Operation string `json:"operation,omitempty"`
	Isolation string `json:"isolation"`
	// Idle: no statement is running; the session holds its transaction
	// open between statements (INNODB_TRX.trx_query is NULL).
	// IdleSeconds is for how long (the session's Sleep time; MariaDB
	// gives milliseconds, MySQL 8 seconds).
	Idle        bool    `json:"idle"`
	IdleSeconds float64 `json:"idle_seconds,omitempty"`
	// User, Host and DB are the session's (processlist).
	User string `json:"user,omitempty"`
	Host string `json:"host,omitempty"`
	DB   string `json:"db,omitempty"`
	// Statement is the running statement, else the last one seen,
	// normalised (no literal values).
	Statement    string `json:"statement,omitempty"`
	RowsLocked   int64  `json:"rows_locked"`
	RowsModified int64  `json:"rows_modified"`
	LockStructs  int64  `json:"lock_structs"`
	// Locks are its locks by table, index, kind and mode. LocksKnown is
	// false when they could not be read (lock output off); LocksPartial
	// when the server listed only the first 10 lock structures (MariaDB),
	// or cut the status text.
	Locks        []Lock `json:"locks"`
	LocksKnown   bool   `json:"locks_known"`
	LocksPartial bool   `json:"locks_partial,omitempty"`
	// WaitingFor is the lock it waits for; WaitSeconds since when
	// (MariaDB: to the microsecond, from the status text; else whole
	// seconds).
	WaitingFor  *Lock   `json:"waiting_for,omitempty"`
	WaitSeconds float64 `json:"wait_seconds,omitempty"`

	requestedLockID string
}

// TrxRef names one side of a wait. ThreadID 0 and Tag "unknown": the
// side could not be named (see Snapshot.Notes); TrxID is then the server's
// id, which may be shared (0).
type TrxRef struct {
	TrxID       string   `json:"trx_id"`
	ThreadID    int64    `json:"thread_id"`
	Tag         string   `json:"tag"`
	Tags        []string `json:"tags,omitempty"`
	Statement   string   `json:"statement,omitempty"`
	Idle        bool     `json:"idle,omitempty"`
	IdleSeconds float64  `json:"idle_seconds,omitempty"`
	User        string   `json:"user,omitempty"`
	Host        string   `json:"host,omitempty"`
	DB          string   `json:"db,omitempty"`
}

// Wait is one transaction waiting for a lock another holds.
type Wait struct {
	Waiting  TrxRef `json:"waiting"`
	Blocking TrxRef `json:"blocking"`
	Lock     *Lock  `json:"lock,omitempty"` // the lock asked for
	// WaitingMode and BlockingMode are the modes of the lock asked for and
	// of the lock in the way, as the server writes them (X,REC_NOT_GAP,
	// S, ...); LockData the locked record's key values ("3", "supremum
	// pseudo-record"), as the server gives them.
	WaitingMode  string  `json:"waiting_mode,omitempty"`
	BlockingMode string  `json:"blocking_mode,omitempty"`
	LockData     string  `json:"lock_data,omitempty"`
	WaitSeconds  float64 `json:"wait_seconds"`
}

// RowLockRatio is row locks per clustered-index row for one tag and table.
type RowLockRatio struct {
	Tag   string `json:"tag"`
	Table string `json:"table"`
	// Rows are the records locked in the clustered index (PRIMARY or
	// GEN_CLUST_INDEX); Locks the records locked in every index of the
	// table; ByIndex per index. Gap, supremum and insert-intention locks
	// lock no row and are not counted.
	Rows    int            `json:"rows"`
	Locks   int            `json:"locks"`
	ByIndex map[string]int `json:"by_index"`
	PerRow  float64        `json:"per_row"`
	Partial bool           `json:"partial,omitempty"`
}

// Read reads everything: transactions, their locks and tags, waits, the
// latest deadlock, saturation. See the package doc for what it runs and
// costs. An error means the server could not be read at all (connection,
// privileges); what one part cannot see is said in Snapshot.Notes.
func (r *Reader) Read(ctx context.Context) (*Snapshot, error) {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("locks: connect: %w", err)
	}
	defer conn.Close()
	s := &Snapshot{At: time.Now(), Waits: []Wait{}, Transactions: []Transaction{}, Hints: []Hint{}, Notes: []string{},
		MetadataWaits: []MetadataWait{}}
	if s.Server, err = r.serverOf(ctx, conn); err != nil {
		return nil, err
	}
	vars, status, err := readVars(ctx, conn, s.Server.Flavor)
	if err != nil {
		return nil, err
	}
	s.LockOutput = LockOutput{Needed: s.Server.Flavor == MariaDB, Enabled: vars["innodb_status_output_locks"] == "ON"}
	if s.LockOutput.Needed && !s.LockOutput.Enabled {
		s.LockOutput.Enable = setLockOutputOn
	}
	trx, cut, err := r.readTransactions(ctx, conn)
	if err != nil {
		return nil, err
	}
	s.TransactionsCut = cut
	var waitRows []waitRow
	waitRowsRead := false
	for _, t := range trx {
		if t.State == "LOCK WAIT" && !waitRowsRead {
			waitRowsRead = true
			if waitRows, err = readWaitRows(ctx, conn, s.Server.Flavor); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				s.Notes = append(s.Notes, "lock waits unreadable ("+oneLine(err)+"): who waits for whom is unknown")
			}
		}
	}
	if err := r.readSessions(ctx, conn, trx, s); err != nil {
		return nil, err
	}
	if err := r.readTags(ctx, conn, trx, s); err != nil {
		return nil, err
	}
	var text string
	if err := conn.QueryRowContext(ctx, queryInnoDBStatus).Scan(new(string), new(string), &text); err != nil {
		return nil, fmt.Errorf("locks: SHOW ENGINE INNODB STATUS: %w%s", err, privilegeHint(err, s.Server.Flavor))
	}
	st := ParseStatus(text)
	s.StatusBytes, s.StatusTruncated = len(text), st.Truncated
	s.LatestDeadlock = st.Deadlock
	s.LatestDeadlock.ResolveTags(r.cfg.ParseTag)
	if s.LatestDeadlock != nil {
		var off sql.NullInt64
		if err := conn.QueryRowContext(ctx, queryZoneOffset).Scan(&off); err == nil && off.Valid {
			s.LatestDeadlock.setZone(int(off.Int64))
		}
	}
	if s.Server.Flavor == MariaDB {
		s.LockSource = SourceStatus
		applyStatusLocks(trx, st, s.LockOutput.Enabled)
		if v, ok := status["Innodb_deadlocks"]; ok {
			s.DeadlockCount, s.DeadlockCountKnown = parseInt(v), true
		}
	} else {
		s.LockSource = SourceDataLocks
		if err := r.readDataLocks(ctx, conn, trx, s); err != nil {
			return nil, err
		}
		var n int64
		if err := conn.QueryRowContext(ctx, queryDeadlocksMySQL8).Scan(&n); err == nil {
			s.DeadlockCount, s.DeadlockCountKnown = n, true
		}
	}
	if s.Server.Flavor == MariaDB {
		waitedFromStatus(trx, st)
	}
	var unresolved int
	s.Waits, unresolved = resolveWaits(waitRows, trx, st)
	if s.Waits == nil {
		s.Waits = []Wait{}
	}
	if unresolved > 0 {
		s.Notes = append(s.Notes, unresolvedNote(unresolved, !s.LockOutput.Needed || s.LockOutput.Enabled))
	}
	s.Chains = Chains(s.Waits)
	if err := r.readMetadataWaits(ctx, conn, s); err != nil {
		return nil, err
	}
	for _, t := range trx {
		s.Transactions = append(s.Transactions, *t)
	}
	s.Saturation, err = readSaturation(ctx, conn, s.Server.Flavor, vars, status, st)
	if err != nil {
		return nil, err
	}
	s.notes()
	s.RowLocksPerRow = rowLockRatios(s.Transactions)
	s.Hints = hints(s)
	return s, nil
}

// serverOf reads the server's version once per Reader.
func (r *Reader) serverOf(ctx context.Context, conn *sql.Conn) (Server, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.haveVer {
		return r.server, nil
	}
	var v string
	if err := conn.QueryRowContext(ctx, queryVersion).Scan(&v); err != nil {
		return Server{}, fmt.Errorf("locks: read the server version: %w", err)
	}
	r.server = Server{Flavor: MySQL, Version: v}
	if strings.Contains(strings.ToLower(v), "mariadb") {
		r.server.Flavor = MariaDB
	}
	r.haveVer = true
	return r.server, nil
}

func readVars(ctx context.Context, conn *sql.Conn, f Flavor) (vars, status map[string]string, err error) {
	vars, err = selectVars(ctx, conn, f)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if vars, err = readNameValues(ctx, conn, queryVariables); err != nil {
			return nil, nil, fmt.Errorf("locks: read server variables: %w", err)
		}
	}
	status, err = readNameValues(ctx, conn, queryStatusVars)
	if err != nil {
		return nil, nil, fmt.Errorf("locks: read server status: %w", err)
	}
	return vars, status, nil
}

// selectVars reads the variables in one SELECT, named and valued as SHOW
// GLOBAL VARIABLES names them.
func selectVars(ctx context.Context, conn *sql.Conn, f Flavor) (map[string]string, error) {
	q, names := queryVariablesMySQL, []string{"max_connections", "thread_handling", "innodb_thread_concurrency", "innodb_status_output_locks"}
	if f == MariaDB {
		q, names = queryVariablesMariaDB, []string{"max_connections", "thread_handling", "thread_pool_size",
			"thread_pool_max_threads", "innodb_status_output_locks"}
	}
	vals := make([]sql.NullString, len(names))
	ptrs := make([]any, len(names))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := conn.QueryRowContext(ctx, q).Scan(ptrs...); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, n := range names {
		v := vals[i].String
		if n == "innodb_status_output_locks" {
			v = map[string]string{"1": "ON", "0": "OFF"}[v]
		}
		out[n] = v
	}
	return out, nil
}

func readNameValues(ctx context.Context, conn *sql.Conn, q string) (map[string]string, error) {
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

func (r *Reader) readTransactions(ctx context.Context, conn *sql.Conn) ([]*Transaction, bool, error) {
	rows, err := conn.QueryContext(ctx, fmt.Sprintf(queryTransactions, r.cfg.MaxTransactions+1))
	if err != nil {
		return nil, false, fmt.Errorf("locks: read information_schema.INNODB_TRX: %w%s", err, privilegeHint(err, ""))
	}
	defer rows.Close()
	var out []*Transaction
	for rows.Next() {
		t := &Transaction{}
		var age, wait int64
		var op, iso, query, requested sql.NullString
		if err := rows.Scan(&t.TrxID, &t.State, &age, &wait, &t.ThreadID, &op, &iso,
			&t.RowsLocked, &t.RowsModified, &t.LockStructs, &query, &requested); err != nil {
			return nil, false, fmt.Errorf("locks: read information_schema.INNODB_TRX: %w", err)
		}
		t.Operation, t.Isolation, t.Statement, t.Idle = op.String, iso.String, query.String, !query.Valid
		t.requestedLockID = requested.String
		t.AgeSeconds = float64(age)
		if t.State == "LOCK WAIT" {
			t.WaitSeconds = float64(wait)
		}
		t.Locks = []Lock{}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("locks: read information_schema.INNODB_TRX: %w", err)
	}
	cut := len(out) > r.cfg.MaxTransactions
	if cut {
		out = out[:r.cfg.MaxTransactions]
	}
	return out, cut, nil
}

// Where the server cuts statement text: a tag at the end of a longer
// statement is lost, and such a statement's tag is unknown, never
// untagged (see the package doc).
const (
	// TrxQueryLimit: information_schema.INNODB_TRX.trx_query
	// (TRX_I_S_TRX_QUERY_MAX_LEN).
	TrxQueryLimit = 1024
	// HistoryTextLimit: performance_schema's SQL_TEXT
	// (performance_schema_max_sql_text_length, default 1,024).
	HistoryTextLimit = 1024
	// DigestTextLimit: statement digest text (max_digest_length, 1,024
	// by default; ProxySQL's 2,048).
	DigestTextLimit = 2048
	// DeadlockTextLimit: LATEST DETECTED DEADLOCK prints each transaction's
	// session line and statement in 3,000 bytes together (MariaDB 10.11
	// kept 2,980 bytes of a long statement): a statement within
	// deadlockLineRoom of it may be cut.
	DeadlockTextLimit = 3000
	deadlockLineRoom  = 200
)

// mayBeCut reports whether a statement read from a layer that keeps limit
// bytes may have lost its end: it fills the limit (less a multibyte
// character the server would not split, or the "..." it appends; the
// deadlock text shares its limit with the session line).
func mayBeCut(q string, limit int) bool {
	if limit == DeadlockTextLimit {
		return len(q) >= limit-deadlockLineRoom
	}
	return len(q) >= limit-4
}

// statementTag classifies one statement: its tag (conntag writes
// "untagged" for a context without one: that is no tag), or none and
// whether its end may be cut off.
func statementTag(parse func(string) (string, bool), q string, limit int) (tag string, cut bool) {
	if t, ok := parse(q); ok && t != UntaggedTag && t != UnknownTag {
		return t, false
	}
	return "", mayBeCut(q, limit)
}

// readTags names every transaction's tags from its running statement and
// its session's statement history, and normalises its statement.
func (r *Reader) readTags(ctx context.Context, conn *sql.Conn, trx []*Transaction, s *Snapshot) error {
	var history map[int64][]histStmt
	var ids []string
	for _, t := range trx {
		if t.ThreadID > 0 {
			ids = append(ids, strconv.FormatInt(t.ThreadID, 10))
		}
	}
	historyErr := ""
	if len(ids) > 0 {
		var err error
		if history, err = r.readHistory(ctx, conn, ids); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			historyErr = oneLine(err)
		}
	}
	unknownIdle := 0
	for _, t := range trx {
		running := t.Statement
		t.Tag, t.Tags, t.Statement = tagOf(r.cfg.ParseTag, running, history[t.ThreadID])
		if t.Tag == UnknownTag && r.cfg.SessionTag != nil && t.ThreadID > 0 {
			if tag, ok := r.cfg.SessionTag(t.ThreadID); ok && tag != "" && tag != UnknownTag {
				t.Tag = tag
			}
		}
		if t.Tag == UnknownTag && t.Idle {
			unknownIdle++
		}
	}
	if unknownIdle > 0 {
		s.Notes = append(s.Notes, r.unknownTagNote(ctx, conn, unknownIdle, historyErr))
	}
	return nil
}

// unknownTagNote says which consumer would make the tags of idle
// transactions known.
func (r *Reader) unknownTagNote(ctx context.Context, conn *sql.Conn, n int, historyErr string) string {
	head := fmt.Sprintf("%d idle transaction(s) have tag unknown: ", n)
	if historyErr != "" {
		return head + "performance_schema statement history unreadable (" + historyErr + "); the account needs " +
			"SELECT on performance_schema, and the server performance_schema=ON with the events_statements_history consumer"
	}
	var off []string
	if rows, err := conn.QueryContext(ctx, queryConsumers); err == nil {
		for rows.Next() {
			var name, enabled string
			if rows.Scan(&name, &enabled) == nil && enabled != "YES" {
				off = append(off, name)
			}
		}
		rows.Close()
	}
	if len(off) > 0 {
		return head + "the performance_schema consumer " + strings.Join(off, " and ") + " is off, so their statements " +
			"are not kept; turn it on with `UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME IN ('" +
			strings.Join(off, "', '") + "')` (or performance-schema-consumer-" +
			strings.ReplaceAll(off[len(off)-1], "_", "-") + "=ON in the server's configuration)"
	}
	return head + "none of the statements events_statements_history keeps of their sessions (the last " +
		"performance_schema_events_statements_history_size, 10 by default) is theirs, or they ran as server-side " +
		"prepared statements, whose text MariaDB does not record (use interpolateParams=true)"
}

// readHistory reads the statement history of the sessions ids.
func (r *Reader) readHistory(ctx context.Context, conn *sql.Conn, ids []string) (map[int64][]histStmt, error) {
	history := map[int64][]histStmt{}
	rows, err := conn.QueryContext(ctx, queryHistoryPrefix+strings.Join(ids, ", ")+")")
	if err != nil {
		return history, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, event int64
		var text string
		if err := rows.Scan(&id, &event, &text); err != nil {
			continue
		}
		history[id] = append(history[id], histStmt{event: event, text: text})
	}
	return history, rows.Err()
}

type histStmt struct {
	event int64
	text  string
}

// tagOf is a transaction's tag and tags: the tags of the statements it ran
// (its running statement and its session's history since the transaction
// began); tag is the running statement's, else the latest one's; tags lists
// them all, sorted, when there are several. It also returns the statement
// to show, normalised. A statement cut before its end names nothing and
// makes the tag unknown rather than untagged.
func tagOf(parse func(string) (string, bool), running string, hist []histStmt) (tag string, tags []string, stmt string) {
	cut, untagged := false, false
	note := func(q string, limit int) {
		t, c := statementTag(parse, q, limit)
		switch {
		case t != "":
			if tag == "" {
				tag = t
			}
			if !slices.Contains(tags, t) {
				tags = append(tags, t)
			}
		case c:
			cut = true
		case !driverStatement(q):
			untagged = true
		}
	}
	if running != "" {
		stmt = Normalize(running)
		note(running, TrxQueryLimit)
	}
	slices.SortFunc(hist, func(a, b histStmt) int { return cmp.Compare(b.event, a.event) }) // newest first
	for _, h := range hist {
		if boundaryStatement(h.text) {
			break // the statements before belong to an earlier transaction
		}
		if driverStatement(h.text) {
			continue
		}
		if stmt == "" {
			stmt = Normalize(h.text)
		}
		note(h.text, HistoryTextLimit)
	}
	switch {
	case tag != "":
		if len(tags) < 2 {
			tags = nil
		}
		slices.Sort(tags)
		return tag, tags, stmt
	case cut:
		return UnknownTag, nil, stmt
	case untagged:
		return UntaggedTag, nil, stmt
	}
	return UnknownTag, nil, stmt
}

// firstWord returns the first word of a statement after leading comments,
// upper-cased, and the rest.
func firstWord(q string) (string, string) {
	for {
		q = strings.TrimLeft(q, " \t\r\n(")
		if strings.HasPrefix(q, "/*") {
			end := strings.Index(q[2:], "*/")
			if end < 0 {
				return "", ""
			}
			q = q[2+end+2:]
			continue
		}
		break
	}
	end := 0
	for end < len(q) && isIdentByte(q[end]) {
		end++
	}
	return strings.ToUpper(q[:end]), q[end:]
}

// boundaryStatement reports whether a statement starts or ends a
// transaction.
func boundaryStatement(q string) bool {
	w, rest := firstWord(q)
	switch w {
	case "BEGIN", "COMMIT":
		return true
	case "START":
		w2, _ := firstWord(rest)
		return w2 == "TRANSACTION"
	case "ROLLBACK":
		w2, _ := firstWord(rest)
		return w2 != "TO"
	case "SET":
		w2, _ := firstWord(rest)
		return w2 == "AUTOCOMMIT"
	}
	return false
}

// driverStatement reports whether an untagged statement is one a driver
// sends by itself around the application's statements: it names no
// business process.
func driverStatement(q string) bool {
	w, rest := firstWord(q)
	switch w {
	case "SET":
		w2, after := firstWord(rest)
		if w2 == "SESSION" || w2 == "LOCAL" {
			w2, _ = firstWord(after)
		}
		return w2 == "TRANSACTION" || w2 == "NAMES" || w2 == "CHARACTER" || w2 == "AUTOCOMMIT"
	case "SELECT":
		return strings.EqualFold(strings.TrimSpace(rest), "CONNECTION_ID()")
	}
	return false
}

// applyStatusLocks copies the status text's locks onto the transactions,
// joined by thread id (by trx id for sessionless transactions).
func applyStatusLocks(trx []*Transaction, st *Status, enabled bool) {
	byThread := map[int64]*StatusTransaction{}
	byID := map[string]*StatusTransaction{}
	for i := range st.Transactions {
		x := &st.Transactions[i]
		if x.ThreadID > 0 {
			byThread[x.ThreadID] = x
		}
		byID[x.TrxID] = x
	}
	for _, t := range trx {
		x := byThread[t.ThreadID]
		if t.ThreadID == 0 {
			x = byID[t.TrxID]
		}
		if x == nil {
			// Not in the text: it started after the text was printed, or
			// the server cut the list.
			t.LocksPartial = st.Truncated
			continue
		}
		if x.Waiting != nil {
			w := *x.Waiting
			t.WaitingFor = &w
		}
		if !enabled && !x.LocksListed {
			continue
		}
		t.Locks = slices.Clone(x.Locks)
		t.LocksKnown = true
		t.LocksPartial = x.LocksPartial
	}
}

// readDataLocks reads MySQL 8's performance_schema.data_locks, counted on
// the server.
func (r *Reader) readDataLocks(ctx context.Context, conn *sql.Conn, trx []*Transaction, s *Snapshot) error {
	if len(trx) == 0 {
		return nil
	}
	byID := map[string]*Transaction{}
	for _, t := range trx {
		byID[t.TrxID] = t
	}
	rows, err := conn.QueryContext(ctx, queryLocksMySQL8)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.Notes = append(s.Notes, "performance_schema.data_locks unreadable ("+oneLine(err)+
			"): locks are not counted by kind; the account needs SELECT on performance_schema")
		return nil
	}
	defer rows.Close()
	sets := map[*Transaction]*lockSet{}
	for rows.Next() {
		var id, table, typ, mode, status string
		var index sql.NullString
		var supremum bool
		var n int
		if err := rows.Scan(&id, &table, &index, &typ, &mode, &status, &supremum, &n); err != nil {
			return fmt.Errorf("locks: read performance_schema.data_locks: %w", err)
		}
		t := byID[id]
		if t == nil {
			continue
		}
		set := sets[t]
		if set == nil {
			set = &lockSet{}
			sets[t] = set
		}
		set.add(dataLock(table, index.String, typ, mode, status == "WAITING", supremum, n))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("locks: read performance_schema.data_locks: %w", err)
	}
	for _, t := range trx {
		t.LocksKnown = true
		if set := sets[t]; set != nil {
			sortLocks(set.locks)
			t.Locks = set.locks
			for _, l := range set.locks {
				if l.Waiting && t.WaitingFor == nil {
					w := l
					t.WaitingFor = &w
				}
			}
		}
	}
	return nil
}

// dataLock makes a Lock of a data_locks / INNODB_LOCKS row.
func dataLock(table, index, typ, modeList string, waiting, supremum bool, rows int) Lock {
	mode, gap, recNotGap, ii := parseModeList(modeList)
	l := Lock{Table: tableName(table), Index: index, Mode: mode, Waiting: waiting, Rows: rows}
	if typ == "TABLE" {
		l.Index = ""
		l.Kind = tableKind(mode)
	} else {
		l.Kind = recordKind(gap, recNotGap, ii, supremum)
	}
	return l
}

// waitedFromStatus sets the wait time of waiting transactions to the
// microsecond, from the status text (INNODB_TRX has whole seconds).
func waitedFromStatus(trx []*Transaction, st *Status) {
	by := map[int64]int64{}
	for _, x := range st.Transactions {
		if x.ThreadID > 0 && x.WaitMicros >= 0 {
			by[x.ThreadID] = x.WaitMicros
		}
	}
	for _, t := range trx {
		if us, ok := by[t.ThreadID]; ok && t.State == "LOCK WAIT" {
			t.WaitSeconds = float64(us) / 1e6
		}
	}
}

// readSessions reads the user, host, database and idle time of the
// transactions' sessions.
func (r *Reader) readSessions(ctx context.Context, conn *sql.Conn, trx []*Transaction, s *Snapshot) error {
	byThread := map[int64]*Transaction{}
	var ids []string
	for _, t := range trx {
		if t.ThreadID > 0 {
			byThread[t.ThreadID] = t
			ids = append(ids, strconv.FormatInt(t.ThreadID, 10))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	q := querySessionsMariaDB
	if s.Server.Flavor == MySQL {
		q = querySessionsMySQL8
	}
	rows, err := conn.QueryContext(ctx, q+strings.Join(ids, ", ")+")")
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.Notes = append(s.Notes, "sessions unreadable ("+oneLine(err)+"): user, host, database and idle time are not shown")
		return nil
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var user, host, db, command string
		var secs float64
		if err := rows.Scan(&id, &user, &host, &db, &command, &secs); err != nil {
			return fmt.Errorf("locks: read sessions: %w", err)
		}
		if t := byThread[id]; t != nil {
			t.User, t.Host, t.DB = user, host, db
			if command == "Sleep" && t.Idle {
				t.IdleSeconds = secs
			}
		}
	}
	return rows.Err()
}

// notes says what the snapshot could not see.
func (s *Snapshot) notes() {
	if s.LockOutput.Needed && !s.LockOutput.Enabled {
		s.Notes = append(s.Notes, "innodb_status_output_locks is OFF: locks are not counted by kind (row lock totals "+
			"and lock waits still are). Turn it on with `"+setLockOutputOn+"` (needs SUPER); "+LockOutputCost)
	}
	if s.StatusTruncated {
		s.Notes = append(s.Notes, fmt.Sprintf("the server cut SHOW ENGINE INNODB STATUS at %d bytes (MaxStatusSize): "+
			"the locks of transactions missing from it are not counted", s.StatusBytes))
	}
	partial := 0
	for _, t := range s.Transactions {
		if t.LocksPartial {
			partial++
		}
	}
	if partial > 0 && s.LockSource == SourceStatus {
		s.Notes = append(s.Notes, fmt.Sprintf("%d transaction(s) hold more lock structures than the server lists "+
			"(10 per transaction): their locks by kind are partial; rows_locked is their exact total", partial))
	}
	if s.TransactionsCut {
		s.Notes = append(s.Notes, fmt.Sprintf("more than %d open transactions: the newest are not listed", len(s.Transactions)))
	}
}

// LockOutputCost is what innodb_status_output_locks=ON costs, for messages.
const LockOutputCost = "cost: every SHOW ENGINE INNODB STATUS (this tool's, and any monitoring's) then prints every " +
	"lock of every transaction (up to 10 lock structures each, 1 MiB in all) while holding the lock system's " +
	"latch, which stalls new lock requests for as long; with innodb_status_output=ON it also goes to the error " +
	"log every 15 s. It lasts until the server restarts or it is turned off " +
	"(SET GLOBAL innodb_status_output_locks = OFF)"

// LockOutputEnabled reads innodb_status_output_locks.
func (r *Reader) LockOutputEnabled(ctx context.Context) (bool, error) {
	var v string
	if err := r.db.QueryRowContext(ctx, `SELECT @@GLOBAL.innodb_status_output_locks`).Scan(&v); err != nil {
		return false, fmt.Errorf("locks: read innodb_status_output_locks: %w", err)
	}
	return v == "1" || v == "ON", nil
}

// SetLockOutput sets innodb_status_output_locks for the whole server. Call
// it only when the user asked (see LockOutputCost); it needs SUPER on
// MariaDB, SYSTEM_VARIABLES_ADMIN (or SUPER) on MySQL.
func (r *Reader) SetLockOutput(ctx context.Context, on bool) error {
	q := setLockOutputOff
	if on {
		q = setLockOutputOn
	}
	if _, err := r.db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("locks: %s: %w (the account needs SUPER on MariaDB, SYSTEM_VARIABLES_ADMIN on MySQL)", q, err)
	}
	return nil
}

// privilegeHint adds what to grant to an access-denied error.
func privilegeHint(err error, f Flavor) string {
	msg := err.Error()
	if !strings.Contains(msg, "Access denied") && !strings.Contains(msg, "1227") && !strings.Contains(msg, "1142") {
		return ""
	}
	if f == MySQL {
		return ": the account needs PROCESS, and SELECT on performance_schema"
	}
	return ": the account needs the PROCESS privilege (GRANT PROCESS ON *.* TO ...)"
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

func parseInt(s string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n
}
