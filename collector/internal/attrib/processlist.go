package attrib

import (
	"bufio"
	"cmp"
	"database/sql"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcesslistFormatVersion is the version of the recording layout that
// WriteProcesslist writes and ProcesslistReader reads. RECORDING.md
// describes it.
const ProcesslistFormatVersion = 1

// processlistMagic starts the optional first line of a recording. Files
// without it (such as the captures the layout was modelled on) are read as
// version 1.
const processlistMagic = "# holdtime processlist v"

// ProcesslistRow is one row of ProxySQL's stats_mysql_processlist, with the
// time of the sample it belongs to. Nullable columns use database/sql's Null
// types so the collector can Scan into them directly.
type ProcesslistRow struct {
	SampleTime   time.Time
	ThreadID     int64
	SessionID    int64
	User         sql.NullString
	DB           sql.NullString
	CliHost      sql.NullString
	CliPort      sql.NullInt64
	Hostgroup    sql.NullInt64
	LSrvHost     sql.NullString
	LSrvPort     sql.NullInt64
	SrvHost      sql.NullString // set while the session holds a backend
	SrvPort      sql.NullInt64
	Command      sql.NullString
	TimeMS       int64
	Info         sql.NullString // the running statement; NULL when idle
	StatusFlags  sql.NullInt64
	ExtendedInfo sql.NullString // JSON, with mysql-show_processlist_extended
}

// processlistColumns is the recording's column order, after sample_ts: the
// columns of stats_mysql_processlist as ProxySQL 2.7 returns them.
var processlistColumns = []string{
	"ThreadID", "SessionID", "user", "db", "cli_host", "cli_port", "hostgroup", "l_srv_host", "l_srv_port",
	"srv_host", "srv_port", "command", "time_ms", "info", "status_flags", "extended_info",
}

// ProcesslistWriter writes samples in the recording layout.
type ProcesslistWriter struct {
	w      *bufio.Writer
	header bool
}

// NewProcesslistWriter returns a writer of the recording layout to w. Call
// Flush when done.
func NewProcesslistWriter(w io.Writer) *ProcesslistWriter {
	return &ProcesslistWriter{w: bufio.NewWriter(w)}
}

// Write appends rows, each with its own SampleTime.
func (pw *ProcesslistWriter) Write(rows []ProcesslistRow) error {
	if !pw.header {
		pw.header = true
		fmt.Fprintf(pw.w, "%s%d\n", processlistMagic, ProcesslistFormatVersion)
		pw.w.WriteString("sample_ts\t" + strings.Join(processlistColumns, "\t") + "\n")
	}
	var buf []byte
	for i := range rows {
		r := &rows[i]
		buf = buf[:0]
		buf = r.SampleTime.UTC().AppendFormat(buf, sampleTimeLayout)
		buf = strconv.AppendInt(append(buf, '\t'), r.ThreadID, 10)
		buf = strconv.AppendInt(append(buf, '\t'), r.SessionID, 10)
		for _, f := range []any{r.User, r.DB, r.CliHost, r.CliPort, r.Hostgroup, r.LSrvHost, r.LSrvPort,
			r.SrvHost, r.SrvPort, r.Command, r.TimeMS, r.Info, r.StatusFlags, r.ExtendedInfo} {
			buf = append(buf, '\t')
			switch v := f.(type) {
			case sql.NullString:
				buf = appendTSVString(buf, v)
			case sql.NullInt64:
				if v.Valid {
					buf = strconv.AppendInt(buf, v.Int64, 10)
				} else {
					buf = append(buf, "NULL"...)
				}
			case int64:
				buf = strconv.AppendInt(buf, v, 10)
			}
		}
		buf = append(buf, '\n')
		if _, err := pw.w.Write(buf); err != nil {
			return fmt.Errorf("write processlist recording: %w: check free disk space", err)
		}
	}
	return nil
}

// Flush writes buffered rows.
func (pw *ProcesslistWriter) Flush() error {
	if err := pw.w.Flush(); err != nil {
		return fmt.Errorf("write processlist recording: %w: check free disk space", err)
	}
	return nil
}

// sampleTimeLayout keeps microseconds: the sample clock is what durations
// are computed from.
const sampleTimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// appendTSVString writes v the way `mariadb --batch` does: backslash, tab,
// newline, carriage return and NUL escaped, SQL NULL as NULL. A string that
// is literally NULL is written \NULL so it reads back as a string.
func appendTSVString(buf []byte, v sql.NullString) []byte {
	if !v.Valid {
		return append(buf, "NULL"...)
	}
	if v.String == "NULL" {
		return append(buf, `\NULL`...)
	}
	for i := 0; i < len(v.String); i++ {
		switch c := v.String[i]; c {
		case '\\':
			buf = append(buf, `\\`...)
		case '\t':
			buf = append(buf, `\t`...)
		case '\n':
			buf = append(buf, `\n`...)
		case '\r':
			buf = append(buf, `\r`...)
		case 0:
			buf = append(buf, `\0`...)
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

// UnescapeTSV reverses appendTSVString for one field.
func UnescapeTSV(f string) sql.NullString {
	if f == "NULL" {
		return sql.NullString{}
	}
	if strings.IndexByte(f, '\\') < 0 {
		return sql.NullString{String: f, Valid: true}
	}
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '\\' || i+1 == len(f) {
			b.WriteByte(c)
			continue
		}
		i++
		switch f[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		default:
			b.WriteByte(f[i])
		}
	}
	return sql.NullString{String: b.String(), Valid: true}
}

// ProcesslistReader reads recordings, one or more files in order.
type ProcesslistReader struct {
	paths     []string
	next      int
	file      *os.File
	sc        *bufio.Scanner
	name      string
	lineNo    int64
	cols      []int // recording column -> field index, -1 for unknown columns
	row       ProcesslistRow
	err       error
	malformed int64
	bad       []LineRef
}

// OpenProcesslist returns a reader of the recordings at paths. It fails if
// the first file cannot be opened.
func OpenProcesslist(paths []string) (*ProcesslistReader, error) {
	r := &ProcesslistReader{paths: paths}
	if err := r.openNext(); err != nil {
		return nil, err
	}
	return r, nil
}

// Row returns the row read by the last successful Next.
func (r *ProcesslistReader) Row() *ProcesslistRow { return &r.row }

// Err returns the error that stopped reading, if any.
func (r *ProcesslistReader) Err() error { return r.err }

// Malformed returns how many lines were skipped, and the first of them.
func (r *ProcesslistReader) Malformed() (int64, []LineRef) { return r.malformed, r.bad }

// Close closes the open file.
func (r *ProcesslistReader) Close() error {
	if r.file == nil {
		return nil
	}
	err := r.file.Close()
	r.file = nil
	return err
}

func (r *ProcesslistReader) openNext() error {
	if err := r.Close(); err != nil {
		return err
	}
	if r.next >= len(r.paths) {
		r.sc = nil
		return nil
	}
	path := r.paths[r.next]
	r.next++
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open processlist recording: %w: check the path", err)
	}
	r.file = f
	r.name = path
	r.lineNo = 0
	r.sc = bufio.NewScanner(f)
	r.sc.Buffer(make([]byte, 64<<10), 16<<20)
	return r.readHeader()
}

// readHeader reads the version line, if any, and the column names.
func (r *ProcesslistReader) readHeader() error {
	for r.sc.Scan() {
		r.lineNo++
		line := r.sc.Text()
		if v, ok := strings.CutPrefix(line, processlistMagic); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n != ProcesslistFormatVersion {
				return fmt.Errorf("%s: recording format version %q: this holdtime reads version %d; use the holdtime that recorded it",
					r.name, v, ProcesslistFormatVersion)
			}
			continue
		}
		names := strings.Split(line, "\t")
		if len(names) == 0 || names[0] != "sample_ts" {
			return fmt.Errorf("%s: first column is %q, not sample_ts: give a processlist recording (see RECORDING.md)", r.name, names[0])
		}
		r.cols = r.cols[:0]
		haveSession := false
		for _, n := range names[1:] {
			idx := -1
			for i, c := range processlistColumns {
				if strings.EqualFold(c, n) {
					idx = i
				}
			}
			haveSession = haveSession || idx == 1
			r.cols = append(r.cols, idx)
		}
		if !haveSession {
			return fmt.Errorf("%s: no SessionID column: give a processlist recording (see RECORDING.md)", r.name)
		}
		return nil
	}
	if err := r.sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", r.name, err)
	}
	return nil // empty file
}

// Next reads the next row, skipping (and counting) malformed lines.
func (r *ProcesslistReader) Next() bool {
	for r.err == nil && r.sc != nil {
		if !r.sc.Scan() {
			if err := r.sc.Err(); err != nil {
				r.err = fmt.Errorf("read %s at line %d: %w", r.name, r.lineNo, err)
				return false
			}
			if err := r.openNext(); err != nil {
				r.err = err
				return false
			}
			continue
		}
		r.lineNo++
		line := r.sc.Text()
		if line == "" {
			continue
		}
		if err := r.parse(line); err != nil {
			r.malformed++
			if len(r.bad) < 20 {
				r.bad = append(r.bad, LineRef{File: r.name, Line: r.lineNo, Reason: err.Error()})
			}
			continue
		}
		return true
	}
	return false
}

func (r *ProcesslistReader) parse(line string) error {
	fields := strings.Split(line, "\t")
	if len(fields) != len(r.cols)+1 {
		return fmt.Errorf("%d columns, header has %d", len(fields), len(r.cols)+1)
	}
	ts, err := parseSampleTime(fields[0])
	if err != nil {
		return err
	}
	r.row = ProcesslistRow{SampleTime: ts}
	row := &r.row
	for i, f := range fields[1:] {
		var err error
		switch r.cols[i] {
		case 0:
			row.ThreadID, err = strconv.ParseInt(f, 10, 64)
		case 1:
			row.SessionID, err = strconv.ParseInt(f, 10, 64)
		case 2:
			row.User = UnescapeTSV(f)
		case 3:
			row.DB = UnescapeTSV(f)
		case 4:
			row.CliHost = UnescapeTSV(f)
		case 5:
			row.CliPort, err = nullInt(f)
		case 6:
			row.Hostgroup, err = nullInt(f)
		case 7:
			row.LSrvHost = UnescapeTSV(f)
		case 8:
			row.LSrvPort, err = nullInt(f)
		case 9:
			row.SrvHost = UnescapeTSV(f)
		case 10:
			row.SrvPort, err = nullInt(f)
		case 11:
			row.Command = UnescapeTSV(f)
		case 12:
			row.TimeMS, err = strconv.ParseInt(f, 10, 64)
		case 13:
			row.Info = UnescapeTSV(f)
		case 14:
			row.StatusFlags, err = nullInt(f)
		case 15:
			row.ExtendedInfo = UnescapeTSV(f)
		}
		if err != nil {
			return fmt.Errorf("column %d: %w", i+2, err)
		}
	}
	return nil
}

func nullInt(f string) (sql.NullInt64, error) {
	if f == "NULL" {
		return sql.NullInt64{}, nil
	}
	v, err := strconv.ParseInt(f, 10, 64)
	return sql.NullInt64{Int64: v, Valid: err == nil}, err
}

// parseSampleTime reads RFC 3339 times; without a zone they are UTC, as in
// the captures the layout comes from.
func parseSampleTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	t, err := time.ParseInLocation("2006-01-02T15:04:05.999999999", s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("sample_ts %q is not an RFC 3339 time", s)
	}
	return t, nil
}

// TagFrom says where a sampled hold got its tag.
type TagFrom uint8

const (
	TagFromUnknown   TagFrom = iota // no source knew it
	TagFromInfo                     // the statement running at the sample
	TagFromEventsLog                // the session's open hold in the events log
	// TagFromCarried is the last tag the processlist showed for the
	// session, kept while the session holds its backend and no new
	// transaction begins.
	TagFromCarried
)

// ReasonIdleUnseen is why an idle-holding sampled session's tag is unknown.
const ReasonIdleUnseen = "idle holding a backend (transaction or pin) and none of its statements was seen"

// SampledHold is the backend hold one processlist row stands for: the
// session held a backend from this sample to the next.
type SampledHold struct {
	At            time.Time
	SessionID     int64
	Tag           string
	TagFrom       TagFrom
	UnknownReason string
	User          string
	Hostgroup     int
	Seconds       float64
	Pinned        bool // idle with a backend attached
	// Waiting is set on a session waiting for a backend connection (no
	// backend, command Connect: ProxySQL shows neither the statement nor
	// its tag meanwhile). Seconds is then wait, not hold.
	Waiting            bool
	AutoIncrementDelay bool // extended info shows an auto-increment delay token
	// Backend names the backend held, for the proxy↔server join; Borrow
	// is its myconnpoll_get/put counters (zero without extended_info):
	// when they change, the backend was returned and taken again.
	Backend BackendKey
	Borrow  [2]int64
	// Carried is set with TagFrom TagFromCarried: the tag is the last one
	// a sample showed for the same borrow, inference that exact evidence
	// (events log, server join, app span) overrides when it comes.
	Carried bool
}

// carriedTag is the last tag the processlist showed for a session, with
// the backend it then held: the tag is carried only while the session holds
// that same borrow of that same backend and nothing ran on it unseen.
type carriedTag struct {
	tag     string
	seen    time.Time
	backend backendState
}

// backendState is what one processlist row says of a session's backend.
// With mysql-show_processlist_extended, extended_info names the backend
// exactly (its server thread id) and counts its borrows (myconnpoll_get,
// myconnpoll_put) and statements (questions); without it only the local
// address ProxySQL connected from is known.
type backendState struct {
	key       BackendKey
	get, put  int64
	questions int64
	extended  bool
}

// backendOf reads a row's backend state from the row and its parsed
// extended_info (nil without one); the zero value without a backend.
func backendOf(row *ProcesslistRow, ext *ExtInfo) backendState {
	var b backendState
	if !row.SrvHost.Valid {
		return b
	}
	if row.LSrvHost.Valid && row.LSrvPort.Valid {
		b.key.Local = HostPort{row.LSrvHost.String, row.LSrvPort.Int64}
	}
	if ext != nil {
		// ProxySQL sorts the keys: a backend's "conn" object (thread_id
		// under "mysql", the connection's own borrow and statement
		// counters) comes before its "stream".
		var ok1, ok2, ok3 bool
		b.key.Thread, _ = ext.Int(ExtThreadID)
		b.get, ok1 = ext.Int(ExtConnpollGet)
		b.put, ok2 = ext.Int(ExtConnpollPut)
		b.questions, ok3 = ext.Int(ExtQuestions)
		b.extended = ok1 && ok2 && ok3
	}
	return b
}

// sameBorrow reports whether a carried tag still describes the backend a
// row shows: same backend, not returned to the pool and taken again since,
// and (with extended_info) no statement ran on it that no sample showed.
func (c *carriedTag) sameBorrow(b backendState) bool {
	if c.backend.key != b.key {
		return false
	}
	if c.backend.extended != b.extended {
		return false
	}
	return !b.extended || c.backend.get == b.get && c.backend.put == b.put && c.backend.questions == b.questions
}

// ProcesslistConfig configures a SampleAttributor. The zero value is the
// default.
type ProcesslistConfig struct {
	// MaxSampleGap caps the time one row stands for, so a gap in sampling
	// is not counted as hold. Default 1s.
	MaxSampleGap time.Duration
	// ForgetAfter is how long the last tag of a session that left the
	// processlist is kept. Default 10 minutes.
	ForgetAfter time.Duration
}

// ProcesslistStats says what the samples contributed.
type ProcesslistStats struct {
	Rows           int64     `json:"rows"`
	Samples        int64     `json:"samples"`
	HeldRows       int64     `json:"held_rows"`
	HeldSeconds    float64   `json:"held_seconds"`
	FromInfo       float64   `json:"tag_from_info_seconds"`
	FromEventsLog  float64   `json:"tag_from_events_log_seconds"`
	Carried        float64   `json:"tag_carried_seconds"`
	Unknown        float64   `json:"tag_unknown_seconds"`
	WaitSeconds    float64   `json:"wait_seconds"`
	Malformed      int64     `json:"malformed_lines"`
	MalformedLines []LineRef `json:"first_malformed_lines,omitempty"`
}

// SampleAttributor turns processlist rows into sampled holds per tag. Its
// state is per session and per sample.
type SampleAttributor struct {
	cfg        ProcesslistConfig
	tagOf      func(uint64) (string, bool)
	emit       func(*SampledHold)
	carried    map[int64]carriedTag
	cur        time.Time
	lastForget time.Time
	held       []SampledHold // rows of the current sample, waiting for the next sample's time
	lastGap    time.Duration
	stats      ProcesslistStats
	tagBuf     []byte
	tags       map[string]string
}

// NewSampleAttributor returns a SampleAttributor. tagOf, if not nil, gives
// the events log's tag of a session's open hold; emit receives every sampled
// hold (reused after it returns).
func NewSampleAttributor(cfg ProcesslistConfig, tagOf func(uint64) (string, bool), emit func(*SampledHold)) *SampleAttributor {
	if cfg.MaxSampleGap == 0 {
		cfg.MaxSampleGap = time.Second
	}
	if cfg.ForgetAfter == 0 {
		cfg.ForgetAfter = 10 * time.Minute
	}
	return &SampleAttributor{cfg: cfg, tagOf: tagOf, emit: emit, carried: make(map[int64]carriedTag),
		tags: make(map[string]string)}
}

// Pending returns the rows of the latest sample, credited only when the
// next sample gives them their time. The caller must not keep or change
// them past its next call on s.
func (s *SampleAttributor) Pending() []SampledHold { return s.held }

// SampleGap is the latest time between two samples (MaxSampleGap before
// the second sample): the slack of anything matched to the samples' times.
func (s *SampleAttributor) SampleGap() time.Duration {
	return cmp.Or(s.lastGap, s.cfg.MaxSampleGap)
}

// Stats returns what the samples contributed so far.
func (s *SampleAttributor) Stats() ProcesslistStats { return s.stats }

// Sample starts the sample taken at `at`, crediting the rows of the previous
// one with the time between them. Add calls it when a row's SampleTime
// changes; a live sampler calls it for every sample, so that a sample with
// no rows still ends the one before it.
func (s *SampleAttributor) Sample(at time.Time) {
	if at.Equal(s.cur) {
		return
	}
	if !s.cur.IsZero() {
		s.lastGap = at.Sub(s.cur)
		s.credit(s.lastGap)
	}
	s.cur = at
	s.stats.Samples++
	if s.cur.Sub(s.lastForget) >= s.cfg.ForgetAfter/4 {
		// Forget sessions gone from the processlist, so memory follows
		// live sessions, not all sessions ever seen.
		s.lastForget = s.cur
		for id, c := range s.carried {
			if s.cur.Sub(c.seen) > s.cfg.ForgetAfter {
				delete(s.carried, id)
			}
		}
	}
}

// NeedsExtInfo reports whether the sampler reads a row's extended_info:
// only a session holding a backend (srv_host set) or waiting for one
// (command Connect) needs it. The processlist query selects it for those
// rows only (see collector's queryProcesslist).
func NeedsExtInfo(row *ProcesslistRow) bool {
	return row.ExtendedInfo.Valid && (row.SrvHost.Valid || row.Command.Valid && row.Command.String == "Connect")
}

// Add processes one row. Rows come sample by sample, in time order.
func (s *SampleAttributor) Add(row *ProcesslistRow) {
	if NeedsExtInfo(row) {
		ext := ParseExtInfo(row.ExtendedInfo.String)
		s.AddExt(row, &ext)
		return
	}
	s.AddExt(row, nil)
}

// AddExt is Add with the row's extended_info already parsed by
// ParseExtInfo; ext is nil when NeedsExtInfo is false.
func (s *SampleAttributor) AddExt(row *ProcesslistRow, ext *ExtInfo) {
	s.stats.Rows++
	s.Sample(row.SampleTime)
	var tag string
	from := TagFromUnknown
	begins := false
	if row.Info.Valid {
		q := []byte(row.Info.String)
		class, _, _ := Classify(q)
		begins = class == ClassBegin
		if class != ClassBegin && class != ClassCommit {
			t, ok := AppendTag(s.tagBuf[:0], q)
			s.tagBuf = t[:0]
			switch {
			case ok:
				tag, from = s.intern(t), TagFromInfo
			case MayBeTruncated(q):
				// Cut short, its tag may have been cut off: unknown, and
				// whatever was carried is stale (a statement ran).
				delete(s.carried, row.SessionID)
			default:
				tag, from = UntaggedTag, TagFromInfo
			}
		}
	}
	backend := backendOf(row, ext)
	switch {
	case from == TagFromInfo && row.SrvHost.Valid:
		s.carried[row.SessionID] = carriedTag{tag, row.SampleTime, backend}
	case !row.SrvHost.Valid || begins || from == TagFromInfo:
		// The backend went back to the pool, or a new transaction begins:
		// with an app connection pool, the session's next hold may belong
		// to another tag, so the last one seen says nothing about it.
		delete(s.carried, row.SessionID)
	default:
		if c, ok := s.carried[row.SessionID]; ok {
			if !c.sameBorrow(backend) {
				// Released and taken again, another backend, or a
				// statement ran unseen: the tag may be another's.
				delete(s.carried, row.SessionID)
				break
			}
			c.seen = row.SampleTime
			s.carried[row.SessionID] = c
		}
	}
	if !row.SrvHost.Valid {
		if waitingForBackend(row, ext) {
			s.held = append(s.held, SampledHold{At: row.SampleTime, SessionID: row.SessionID, Tag: UnknownTag,
				UnknownReason: ReasonWaitUnseen, User: row.User.String, Hostgroup: int(row.Hostgroup.Int64), Waiting: true})
		}
		return
	}
	if from == TagFromUnknown && s.tagOf != nil {
		if t, ok := s.tagOf(uint64(row.SessionID)); ok {
			tag, from = t, TagFromEventsLog
		}
	}
	if from == TagFromUnknown {
		if c, ok := s.carried[row.SessionID]; ok {
			tag, from = c.tag, TagFromCarried
		}
	}
	h := SampledHold{At: row.SampleTime, SessionID: row.SessionID, Tag: tag, TagFrom: from,
		User: row.User.String, Hostgroup: int(row.Hostgroup.Int64), Pinned: !row.Info.Valid,
		Backend: backend.key, Borrow: [2]int64{backend.get, backend.put}, Carried: from == TagFromCarried}
	if from == TagFromUnknown {
		h.Tag, h.UnknownReason = UnknownTag, ReasonIdleUnseen
	}
	if ext != nil {
		h.AutoIncrementDelay = ext.Has(ExtAutoIncrementDelay)
	}
	s.held = append(s.held, h)
}

// ReasonWaitUnseen is why a waiting session's tag is unknown.
const ReasonWaitUnseen = "waiting for a backend: ProxySQL shows no statement while a session waits"

// waitingForBackend reports whether a row is a session waiting for a
// backend connection. Measured on ProxySQL 2.7.1 with a hostgroup at its
// max_connections: such a session shows command Connect, no backend, info
// NULL, and in extended_info the session status CONNECTING_SERVER (1); its
// statement is not shown until a backend is free.
func waitingForBackend(row *ProcesslistRow, ext *ExtInfo) bool {
	if row.SrvHost.Valid || !row.Command.Valid || row.Command.String != "Connect" {
		return false
	}
	if ext != nil {
		// The session's own "status" (keys are sorted: it follows the
		// nested "status" objects, which are not numbers).
		st, ok := ext.Int(ExtStatus)
		return !ok || st == 1
	}
	return true
}

// AutoIncrementDelay reports a positive auto_increment_delay_token in the
// extended JSON: ProxySQL keeps the backend for the next statements after
// an insert id. ProxySQL pretty-prints the JSON ("key": value), so spaces
// after the colon are skipped.
func AutoIncrementDelay(ext string) bool {
	return JSONValue(ext, `"auto_increment_delay_token"`, func(v string) bool {
		return len(v) > 0 && v[0] >= '1' && v[0] <= '9'
	})
}

func (s *SampleAttributor) intern(b []byte) string {
	if t, ok := s.tags[string(b)]; ok {
		return t
	}
	if len(s.tags) >= DefaultMaxInternedTags {
		return string(b) // keep memory bounded under a flood of bogus tags
	}
	t := string(b)
	s.tags[t] = t
	return t
}

// credit gives the waiting rows of the current sample their duration. A
// sample time that went back (a clock step, recordings out of order)
// credits nothing: held seconds never go backwards.
func (s *SampleAttributor) credit(gap time.Duration) {
	sec := min(max(gap, 0), s.cfg.MaxSampleGap).Seconds()
	for i := range s.held {
		h := &s.held[i]
		h.Seconds = sec
		if h.Waiting {
			s.stats.WaitSeconds += sec
			s.emit(h)
			continue
		}
		s.stats.HeldRows++
		s.stats.HeldSeconds += sec
		switch h.TagFrom {
		case TagFromInfo:
			s.stats.FromInfo += sec
		case TagFromEventsLog:
			s.stats.FromEventsLog += sec
		case TagFromCarried:
			s.stats.Carried += sec
		default:
			s.stats.Unknown += sec
		}
		s.emit(h)
	}
	s.held = s.held[:0]
}

// Flush credits the last sample with the previous sampling interval.
func (s *SampleAttributor) Flush() {
	s.credit(s.lastGap)
}
