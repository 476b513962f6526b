package collector

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdtime/holdtime/conntag"

	"github.com/holdtime/holdtime/collector/internal/attrib"
)

// The admin queries. Columns are named so a future ProxySQL that adds some
// does not shift them.
const (
	// extended_info (3–6 KB of JSON per session) only for the sessions the
	// sampler reads it of, those holding a backend or waiting for one
	// (attrib.NeedsExtInfo): an idle session's is not sent. ProxySQL
	// builds every session's JSON whatever the query selects.
	queryProcesslist = `SELECT ThreadID, SessionID, user, db, cli_host, cli_port, hostgroup, l_srv_host, l_srv_port, ` +
		`srv_host, srv_port, command, time_ms, info, status_flags, ` +
		`CASE WHEN srv_host IS NOT NULL OR command = 'Connect' THEN extended_info END AS extended_info ` +
		`FROM stats_mysql_processlist`
	queryDigest = `SELECT hostgroup, schemaname, username, client_address, digest, digest_text, count_star, ` +
		`first_seen, last_seen, sum_time FROM stats_mysql_query_digest`
	queryKeepComment = `SELECT variable_value FROM global_variables WHERE variable_name = 'mysql-query_digests_keep_comment'`
	queryPool        = `SELECT hostgroup, srv_host, srv_port, status, ConnUsed, ConnFree, ConnOK, ConnERR, Queries, Latency_us ` +
		`FROM stats_mysql_connection_pool`
	queryGlobal = `SELECT Variable_Name, Variable_Value FROM stats_mysql_global`
)

// proxysqlTarget is one ProxySQL instance: its pollers share one small pool
// of admin connections and one session state machine.
type proxysqlTarget struct {
	st        *store
	log       *slog.Logger
	recordDir string
	cfg       ProxySQLConfig
	secret    string
	db        *sql.DB
	causes    *causeLogger
	sessions  *proxysqlSessions

	rows    []ProcesslistRow // reused between samples
	digests *digestState
	pool    *poolMetrics // the pool source's own figures

	recMu  sync.Mutex
	recs   map[string]*attrib.TableRecorder
	plRec  *ProcesslistWriter
	plFile *os.File
}

func newProxySQLTarget(st *store, ccfg Config, b *board, router *spanRouter, cfg ProxySQLConfig) (*proxysqlTarget, error) {
	mc, err := parseDSN(cfg.DSN, ccfg.Timeout)
	if err != nil {
		return nil, err
	}
	db, err := openDB(mc, 3)
	if err != nil {
		return nil, err
	}
	pc := ProcesslistConfig{
		MaxSampleGap: max(4*cfg.ProcesslistInterval, time.Second),
		// The processlist lists every live session in every sample, so a
		// session missing for a minute is gone.
		ForgetAfter: time.Minute,
	}
	var joins func() []*serverJoin
	if len(ccfg.MySQL) > 0 {
		// Any MySQL target of this collector may be a backend: the join
		// matches a backend by its address and thread id, so one that is
		// not matches nothing. The board is complete before Run.
		joins = b.serverJoins
	}
	t := &proxysqlTarget{st: st, log: ccfg.Logger, recordDir: ccfg.RecordDir, cfg: cfg, secret: mc.Passwd, db: db, causes: mc.Logger.(*causeLogger),
		sessions: newProxySQLSessions(cfg.Name, st, pc, cfg.EventsLog != "", router.proxyHinted(ccfg, cfg.Name), cfg.TagGrace, joins),
		digests:  newDigestState(), recs: map[string]*attrib.TableRecorder{}, pool: newPoolMetrics(cfg.Name)}
	t.sessions.waitingNow = newWaitingMetrics(cfg.Name)
	return t, nil
}

// polled lists the target's polled sources: processlist, digests, pool
// and, when configured, the events log.
func (t *proxysqlTarget) polled() []polled {
	src := func(s Source, interval time.Duration, poll func(context.Context) error, own *ownMetrics) polled {
		return polled{target: t.cfg.Name, source: s, interval: interval, poll: poll, secret: t.secret, causes: t.causes, own: own}
	}
	out := []polled{src(SourceProxySQLProcesslist, t.cfg.ProcesslistInterval, t.pollProcesslist, t.sessions.waitingNow.ownMetrics)}
	if t.cfg.DigestInterval > 0 {
		out = append(out, src(SourceProxySQLDigest, t.cfg.DigestInterval, t.pollDigest, nil))
	}
	out = append(out, src(SourceProxySQLPool, t.cfg.PoolInterval, t.pollPool, t.pool.ownMetrics))
	if t.cfg.EventsLog != "" {
		tl := &tailer{path: t.cfg.EventsLog, poll: t.cfg.EventsLogPoll, target: t.cfg.Name, sessions: t.sessions,
			sink: storeSink{t.st, t.cfg.Name, SourceProxySQLEvents}, log: t.log}
		out = append(out, tl.polled())
	}
	return out
}

func (t *proxysqlTarget) close() error {
	t.recMu.Lock()
	defer t.recMu.Unlock()
	var errs []error
	if t.plRec != nil {
		errs = append(errs, t.plRec.Flush(), t.plFile.Close())
	}
	for _, r := range t.recs {
		errs = append(errs, r.Close())
	}
	errs = append(errs, t.db.Close())
	return errors.Join(errs...)
}

// pollProcesslist takes one sample: the sample time is the collector's
// clock when the query is sent, never ProxySQL's lagging time_ms.
func (t *proxysqlTarget) pollProcesslist(ctx context.Context) error {
	at := time.Now()
	rows, err := t.db.QueryContext(ctx, queryProcesslist)
	if err != nil {
		return fmt.Errorf("query stats_mysql_processlist: %w", err)
	}
	defer rows.Close()
	t.rows = t.rows[:0]
	bad := 0
	for rows.Next() {
		t.rows = append(t.rows, ProcesslistRow{SampleTime: at})
		r := &t.rows[len(t.rows)-1]
		var timeMS sql.NullInt64
		if err := rows.Scan(&r.ThreadID, &r.SessionID, &r.User, &r.DB, &r.CliHost, &r.CliPort, &r.Hostgroup,
			&r.LSrvHost, &r.LSrvPort, &r.SrvHost, &r.SrvPort, &r.Command, &timeMS, &r.Info, &r.StatusFlags,
			&r.ExtendedInfo); err != nil {
			bad++
			t.rows = t.rows[:len(t.rows)-1]
			continue
		}
		r.TimeMS = timeMS.Int64
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read stats_mysql_processlist: %w", err)
	}
	t.st.malformed(t.cfg.Name, SourceProxySQLProcesslist, bad)
	t.sessions.sampleRead(at, time.Now(), t.rows)
	if t.recordDir != "" {
		return t.recordProcesslist(t.rows)
	}
	return nil
}

func (t *proxysqlTarget) recordProcesslist(rows []ProcesslistRow) error {
	t.recMu.Lock()
	defer t.recMu.Unlock()
	if t.plRec == nil {
		path := recordPath(t.recordDir, t.cfg.Name, "processlist.tsv")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("record processlist: %w", err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("record processlist: %w: check the --record directory", err)
		}
		t.plFile, t.plRec = f, NewProcesslistWriter(f)
	}
	if err := t.plRec.Write(rows); err != nil {
		return err
	}
	return t.plRec.Flush()
}

// queryTable reads a whole admin table as text, the way ProxySQL's admin
// (SQLite underneath) returns it, for parsers and for recording.
func queryTable(ctx context.Context, db *sql.DB, query string) ([]string, [][]sql.NullString, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, nil, err
	}
	var out [][]sql.NullString
	ptrs := make([]any, len(cols))
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, err
		}
		out = append(out, vals)
	}
	return cols, out, rows.Err()
}

// record appends a polled table to the target's recording of it.
func (t *proxysqlTarget) record(table string, at time.Time, cols []string, rows [][]sql.NullString) error {
	if t.recordDir == "" {
		return nil
	}
	t.recMu.Lock()
	defer t.recMu.Unlock()
	r := t.recs[table]
	if r == nil {
		var err error
		r, err = attrib.NewTableRecorder(recordPath(t.recordDir, t.cfg.Name, table+".tsv"), table)
		if err != nil {
			return err
		}
		t.recs[table] = r
	}
	return r.Write(at, cols, rows)
}

// digestKey identifies a row of stats_mysql_query_digest.
type digestKey struct {
	hostgroup, schema, user, client, digest string
}

type digestRow struct {
	key       digestKey
	text      string
	count     int64
	firstSeen int64
	sumUS     int64
}

type digestState struct {
	prev     map[digestKey]digestRow
	cur      map[digestKey]digestRow
	baseline bool
	// deltas are the last apply's per-digest deltas, for the tags'
	// statements.
	deltas []digestDelta
	// held keeps the figures of tags no other source has shown yet, for
	// digestHold: ProxySQL 2.7.1's digest text sometimes mixes the comment
	// bytes of concurrent statements, and such a "tag" is nobody's.
	held map[string]*heldDigest
}

type heldDigest struct {
	d tagDelta
	// deltas are the held tag's per digest deltas, summed per digest,
	// given to the tag's statements with its figures.
	deltas map[string]*digestDelta
	rows   int
	since  time.Time
	sample string
}

// digestHold is how long figures of a tag seen only in digest text wait
// for another source (processlist, events log, server, spans) to show the
// tag before they are counted as malformed.
const digestHold = time.Minute

// maxHeldDigestTags bounds the tags held: a flood of corrupt text is
// counted as malformed at once beyond it.
const maxHeldDigestTags = 256

func newDigestState() *digestState {
	return &digestState{prev: map[digestKey]digestRow{}, cur: map[digestKey]digestRow{}, held: map[string]*heldDigest{}}
}

// wellFormedDigestTag reports whether the conntag comment that carries tag
// in digest text is whole (conntag.WholeTagComment): ProxySQL's digest text
// can mix up comment bytes, leaving the comment unclosed or running SQL
// into it.
func wellFormedDigestTag(text, tag string) bool { return conntag.WholeTagComment(text, tag) }

// parseDigestRow reads one stats_mysql_query_digest row (columns in
// queryDigest's order).
func parseDigestRow(v []sql.NullString) (digestRow, error) {
	if len(v) != 10 {
		return digestRow{}, fmt.Errorf("%d columns, want 10", len(v))
	}
	var r digestRow
	r.key = digestKey{v[0].String, v[1].String, v[2].String, v[3].String, v[4].String}
	r.text = v[5].String
	var err error
	if r.count, err = parseCount(v[6]); err != nil {
		return r, fmt.Errorf("count_star: %w", err)
	}
	if r.firstSeen, err = parseCount(v[7]); err != nil {
		return r, fmt.Errorf("first_seen: %w", err)
	}
	if r.sumUS, err = parseCount(v[9]); err != nil {
		return r, fmt.Errorf("sum_time: %w", err)
	}
	return r, nil
}

func parseCount(v sql.NullString) (int64, error) {
	if !v.Valid {
		return 0, errors.New("NULL")
	}
	n, err := strconv.ParseInt(v.String, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", attrib.Truncate(v.String, 32))
	}
	if n < 0 {
		return 0, fmt.Errorf("%d is negative", n)
	}
	return n, nil
}

// digestTextCut is where ProxySQL cuts digest_text by default
// (mysql-query_digests_max_digest_length, 2,048 bytes).
const digestTextCut = 2048

// digestTag is the tag a digest row's figures go to. With
// mysql-query_digests_keep_comment=false ProxySQL strips comments from
// digest_text, so no tag can be read: everything goes to UnknownTag rather
// than to UntaggedTag, which would claim the statements had no tag.
func digestTag(text string, keepComments bool, buf []byte) ([]byte, string) {
	if !keepComments {
		return buf, UnknownTag
	}
	t, ok := AppendTag(buf[:0], []byte(text))
	if !ok {
		if attrib.MayBeTruncated([]byte(text)) || len(text) >= digestTextCut {
			return t, UnknownTag // cut at mysql-query_digests_max_digest_length: its tag may be gone
		}
		return t, UntaggedTag
	}
	return t, string(t)
}

// apply computes per-tag deltas from one digest poll. The first poll is a
// baseline. A digest whose count went down or whose first_seen changed was
// reset (stats_mysql_query_digest_reset, or evicted and seen again): its
// whole count is new. A digest that appeared since the last poll is all new.
//
// A tag read from digest text is checked (see checkTags): figures of a tag
// whose comment is not whole are rejected, and those of a tag no other
// source has shown wait in held.
func (d *digestState) apply(rows []digestRow, keepComments bool, batch map[string]*tagDelta) {
	clear(d.cur)
	clear(d.deltas)
	d.deltas = d.deltas[:0]
	var buf []byte
	for _, r := range rows {
		d.cur[r.key] = r
		if !d.baseline {
			continue
		}
		dc, dt := r.count, r.sumUS
		if p, ok := d.prev[r.key]; ok && r.count >= p.count && abs(r.firstSeen-p.firstSeen) <= firstSeenJitter {
			dc, dt = r.count-p.count, max(r.sumUS-p.sumUS, 0)
		}
		if dc == 0 && dt == 0 {
			continue
		}
		var tag string
		buf, tag = digestTag(r.text, keepComments, buf)
		if tag != UnknownTag && tag != UntaggedTag && !wellFormedDigestTag(r.text, tag) {
			tag = malformedDigest(r.text)
		}
		td := batch[tag]
		if td == nil {
			td = &tagDelta{}
			batch[tag] = td
		}
		td.Stmts += float64(dc)
		td.Active += float64(dt) / 1e6
		d.deltas = append(d.deltas, digestDelta{tag: tag, digest: r.key.digest, text: r.text, count: float64(dc), seconds: float64(dt) / 1e6})
	}
	d.baseline = true
	d.prev, d.cur = d.cur, d.prev
}

// firstSeenJitter is how far first_seen moves between two reads of the
// same digest: ProxySQL 2.7.1 converts it from its monotonic clock at each
// read, and the second it shows goes back and forth by one (3 reads in 30
// of one digest were a second later). Taken as a reset, the move counted
// the digest's whole count again.
const firstSeenJitter = 1

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func (t *proxysqlTarget) pollDigest(ctx context.Context) error {
	at := time.Now()
	keep := true
	var v sql.NullString
	if err := t.db.QueryRowContext(ctx, queryKeepComment).Scan(&v); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("read mysql-query_digests_keep_comment: %w", err)
	}
	// Before 2.4 the variable does not exist and comments are kept.
	keep = !v.Valid || strings.EqualFold(v.String, "true") || v.String == "1"
	cols, raw, err := queryTable(ctx, t.db, queryDigest)
	if err != nil {
		return fmt.Errorf("query stats_mysql_query_digest: %w", err)
	}
	rows := make([]digestRow, 0, len(raw))
	bad := 0
	for _, r := range raw {
		dr, err := parseDigestRow(r)
		if err != nil {
			bad++
			continue
		}
		rows = append(rows, dr)
	}
	t.st.malformed(t.cfg.Name, SourceProxySQLDigest, bad)
	batch := map[string]*tagDelta{}
	t.digests.apply(rows, keep, batch)
	n, sample := t.digests.checkTags(at, batch, func(tag string) bool { return t.st.seenElsewhere(tag, SourceProxySQLDigest) })
	t.st.malformedWith(t.cfg.Name, SourceProxySQLDigest, n, sample)
	t.st.add(t.cfg.Name, SourceProxySQLDigest, batch)
	t.st.addStatements(t.cfg.Name, SourceProxySQLDigest, t.digests.deltas)
	return t.record("stats_mysql_query_digest", at, cols, raw)
}

// parsePoolRow reads one stats_mysql_connection_pool row (queryPool's
// columns).
func parsePoolRow(v []sql.NullString) (PoolServer, error) {
	if len(v) != 10 {
		return PoolServer{}, fmt.Errorf("%d columns, want 10", len(v))
	}
	var p PoolServer
	var err error
	var hg int64
	if hg, err = strconv.ParseInt(v[0].String, 10, 64); err != nil {
		return p, fmt.Errorf("hostgroup %q is not an integer", attrib.Truncate(v[0].String, 32))
	}
	p.Hostgroup = hg
	if !v[1].Valid || !v[2].Valid {
		return p, errors.New("srv_host or srv_port is NULL")
	}
	p.Server = v[1].String + ":" + v[2].String
	p.Status = v[3].String
	for i, dst := range []*int64{&p.ConnUsed, &p.ConnFree, &p.ConnOK, &p.ConnERR, &p.Queries, &p.LatencyUS} {
		if *dst, err = parseCount(v[4+i]); err != nil {
			return p, fmt.Errorf("column %d: %w", 5+i, err)
		}
	}
	return p, nil
}

// parseGlobal reads the stats_mysql_global variables holdtime exports.
func parseGlobal(rows [][]sql.NullString) (*proxysqlGlobal, int) {
	g := &proxysqlGlobal{}
	bad := 0
	for _, r := range rows {
		if len(r) != 2 {
			bad++
			continue
		}
		var dst *float64
		switch r[0].String {
		case "Client_Connections_connected":
			dst = &g.clientConnections
		case "Active_Transactions":
			dst = &g.activeTransactions
		case "ConnPool_get_conn_failure":
			dst = &g.getConnFailures
		default:
			continue
		}
		n, err := parseCount(r[1])
		if err != nil {
			bad++
			continue
		}
		*dst = float64(n)
	}
	return g, bad
}

func (t *proxysqlTarget) pollPool(ctx context.Context) error {
	at := time.Now()
	cols, raw, err := queryTable(ctx, t.db, queryPool)
	if err != nil {
		return fmt.Errorf("query stats_mysql_connection_pool: %w", err)
	}
	gcols, graw, err := queryTable(ctx, t.db, queryGlobal)
	if err != nil {
		return fmt.Errorf("query stats_mysql_global: %w", err)
	}
	var pool []PoolServer
	bad := 0
	for _, r := range raw {
		p, err := parsePoolRow(r)
		if err != nil {
			bad++
			continue
		}
		p.SampleTime = at
		pool = append(pool, p)
	}
	global, gbad := parseGlobal(graw)
	t.st.malformed(t.cfg.Name, SourceProxySQLPool, bad+gbad)
	t.pool.set(pool, global)
	return errors.Join(t.record("stats_mysql_connection_pool", at, cols, raw),
		t.record("stats_mysql_global", at, gcols, graw))
}

// malformedPrefix marks, in a digest batch, the rows whose tag comment is
// not whole: checkTags counts them and drops them.
const malformedPrefix = "\x00malformed:"

func malformedDigest(text string) string { return malformedPrefix + attrib.Truncate(text, 200) }

// checkTags removes from batch what is not a tag: rows marked malformed,
// and tags no other source has shown (seen) within digestHold, which are
// held until then. Held figures of a tag another source has shown since
// go back into batch. It returns how many rows were rejected and the text
// of the latest.
// holdDeltas moves this poll's deltas of a held tag into h.
func (d *digestState) holdDeltas(tag string, h *heldDigest) {
	d.deltas = slices.DeleteFunc(d.deltas, func(dd digestDelta) bool {
		if dd.tag != tag {
			return false
		}
		if h.deltas == nil {
			h.deltas = map[string]*digestDelta{}
		}
		if x := h.deltas[dd.digest]; x != nil {
			x.count += dd.count
			x.seconds += dd.seconds
		} else {
			h.deltas[dd.digest] = &dd
		}
		return true
	})
}

func (d *digestState) checkTags(now time.Time, batch map[string]*tagDelta, seen func(string) bool) (int, string) {
	rejected, sample := 0, ""
	for tag, td := range batch {
		if text, ok := strings.CutPrefix(tag, malformedPrefix); ok {
			rejected++
			sample = text
			delete(batch, tag)
			continue
		}
		if tag == UnknownTag || tag == UntaggedTag || seen(tag) {
			continue
		}
		h := d.held[tag]
		if h == nil {
			if len(d.held) >= maxHeldDigestTags {
				rejected++
				sample = tag
				delete(batch, tag)
				continue
			}
			h = &heldDigest{since: now, sample: tag}
			d.held[tag] = h
		}
		h.d.Figures.Add(&td.Figures)
		h.rows++
		delete(batch, tag)
		d.holdDeltas(tag, h)
	}
	for tag, h := range d.held {
		switch {
		case seen(tag):
			td := batch[tag]
			if td == nil {
				td = &tagDelta{}
				batch[tag] = td
			}
			td.Figures.Add(&h.d.Figures)
			for _, dd := range h.deltas {
				d.deltas = append(d.deltas, *dd)
			}
			delete(d.held, tag)
		case now.Sub(h.since) > digestHold:
			rejected += h.rows
			sample = "conn_tag:" + h.sample + " (seen only in digest text)"
			delete(d.held, tag)
		}
	}
	return rejected, sample
}
