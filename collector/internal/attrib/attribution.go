package attrib

// Tags that name something other than a business process.
const (
	// UntaggedTag is the tag of hold time whose statements carry no tag: the
	// statements were seen and had none. It is conntag's default tag too.
	UntaggedTag = "untagged"
	// UnknownTag is the tag of hold time whose statements were not seen, so
	// its tag cannot be known; Hold.UnknownReason says why.
	UnknownTag = "unknown"
	// OverflowTag collects hold time of tags beyond a cap on distinct tags
	// (AnalyzeConfig.MaxTags, Config.MaxTags).
	OverflowTag = "overflow"
)

// Reasons a hold's tag is unknown.
const (
	ReasonBeganBeforeLog = "transaction began before the log: its statements were not seen"
	ReasonEmptyTxn       = "transaction without statements: only BEGIN/COMMIT, which drivers send untagged"
	ReasonOpenNoStmt     = "transaction open at the end of the input before any statement finished"
)

// HoldKind says what kept a backend attached.
type HoldKind uint8

const (
	// HoldStatement is an autocommit statement, held for its own duration.
	HoldStatement HoldKind = iota
	// HoldTransaction runs from the start of BEGIN (or of the first
	// statement under autocommit=0) to the end of COMMIT or ROLLBACK.
	HoldTransaction
	// HoldLocal is a statement ProxySQL answered itself (hostgroup -1, no
	// backend), such as a cached COM_STMT_PREPARE or SET autocommit: no hold
	// time, reported so that its statements are still counted.
	HoldLocal
)

func (k HoldKind) String() string {
	switch k {
	case HoldTransaction:
		return "transaction"
	case HoldLocal:
		return "local"
	}
	return "statement"
}

// Hold is one interval during which a client session kept a backend
// connection, with what it did meanwhile. Times are Unix microseconds.
type Hold struct {
	SessionID uint64 // ProxySQL SessionID (the events log's thread_id)
	Kind      HoldKind
	// Tag is the tag of the first tagged statement of the hold (BEGIN and
	// COMMIT take the tag of the statements between them), UntaggedTag when
	// none of its statements had one, UnknownTag when none was seen.
	Tag           string
	UnknownReason string // why Tag is UnknownTag
	StartUS       int64
	EndUS         int64
	// ActiveUS is the time spent inside statements; EndUS-StartUS-ActiveUS
	// is idle hold, the backend attached with nothing running.
	ActiveUS int64
	// PinnedIdleUS is idle time after the hold's last statement, until the
	// session's next statement, during which a sticky pin (user variable,
	// lock, temporary table...) kept the backend attached. It is included in
	// EndUS.
	PinnedIdleUS int64
	Statements   int // statements, BEGIN/COMMIT/ROLLBACK and prepares excluded
	Prepares     int // COM_STMT_PREPARE
	Executes     int // COM_STMT_EXECUTE (also counted in Statements)
	Pins         Pin
	Client       string
	User         string
	Hostgroup    int
	// MixedTags is set when statements of more than one tag shared the hold.
	MixedTags bool
	// Truncated is set when the input did not show the hold's start (a
	// COMMIT without its BEGIN) or its end (still open when input ended).
	Truncated bool
	// EndUnknown is set on a hold whose sticky pin (user variable, lock,
	// temporary table...) kept its backend attached after its last
	// statement until the session ended: ProxySQL logs no disconnect, so
	// EndUS is that statement's end and the real end is unknown.
	EndUnknown bool
}

// DurationUS is the hold's length in microseconds.
func (h *Hold) DurationUS() int64 { return h.EndUS - h.StartUS }

// AttributorConfig configures an Attributor. The zero value is the default.
type AttributorConfig struct {
	// SessionTimeoutUS closes the open hold of a session that logged
	// nothing for this long (log time), at its last event, and forgets the
	// session: ProxySQL does not log disconnects, and a client that drops a
	// connection inside a transaction would otherwise hold forever and keep
	// memory. Default 10 minutes.
	SessionTimeoutUS int64
	// MaxTags caps the distinct tags the Attributor keeps: holds of further
	// tags get OverflowTag, counted by Overflow, so that a flood of bogus
	// tags in the log cannot grow memory for the life of the process.
	// Default 10,000.
	MaxTags int
}

// DefaultMaxInternedTags is the default cap on the distinct tags the
// Attributor and the SampleAttributor keep: ten times the store's default
// cap, so it only binds under a flood.
const DefaultMaxInternedTags = 10_000

// Attributor turns events, in log order, into holds. It keeps state per open
// session only: memory grows with sessions and tags, never with input length.
// It is not safe for concurrent use.
type Attributor struct {
	cfg      AttributorConfig
	emit     func(*Hold)
	sessions map[uint64]*session
	tags     map[string]*internedTag
	tagBuf   []byte
	nowUS    int64 // latest end time seen
	events   int64
	overflow int64 // tags that went to OverflowTag
	lastGC   int64
	lastGCUS int64 // log time of the last expire
}

// internedTag is one kept tag and the log time it was last used: a tag
// unused for TagIdleUS frees its slot, so the cap bounds the tags in use
// now, not every tag since the start (after 10,000 distinct tags every new
// one went to OverflowTag until the process restarted).
type internedTag struct {
	s      string
	lastUS int64
}

// TagIdleUS is how long a tag kept by an Attributor may go unused before
// its slot is freed: the collector's longest window (5 minutes).
const TagIdleUS = 5 * 60 * 1e6

type session struct {
	client, user  string
	inTxn         bool
	autocommitOff bool
	lockTables    bool
	getLock       bool
	sticky        Pin
	lastEndUS     int64
	sawUntagged   bool
	cur           Hold
	curOpen       bool
	pending       Hold // a finished hold of a pinned session, waiting for the next to know its end
	pendingOpen   bool
}

// NewAttributor returns an Attributor that calls emit for every finished
// hold. The *Hold is reused after emit returns: copy what you keep.
func NewAttributor(cfg AttributorConfig, emit func(*Hold)) *Attributor {
	if cfg.SessionTimeoutUS == 0 {
		cfg.SessionTimeoutUS = 10 * 60 * 1e6
	}
	if cfg.MaxTags == 0 {
		cfg.MaxTags = DefaultMaxInternedTags
	}
	return &Attributor{
		cfg:      cfg,
		emit:     emit,
		sessions: make(map[uint64]*session),
		tags:     make(map[string]*internedTag),
		tagBuf:   make([]byte, 0, MaxTagLen),
	}
}

// OpenSessions is the number of sessions the Attributor keeps state for.
func (a *Attributor) OpenSessions() int { return len(a.sessions) }

// Overflow is how many times a tag went to OverflowTag because
// AttributorConfig.MaxTags distinct tags were already kept.
func (a *Attributor) Overflow() int64 { return a.overflow }

// intern returns a string for b, allocating once per distinct tag, or
// OverflowTag beyond the cap.
func (a *Attributor) intern(b []byte) string {
	if t, ok := a.tags[string(b)]; ok {
		t.lastUS = a.nowUS
		return t.s
	}
	if len(a.tags) >= a.cfg.MaxTags {
		a.overflow++
		return OverflowTag
	}
	s := string(b)
	a.tags[s] = &internedTag{s: s, lastUS: a.nowUS}
	return s
}

// TagOf returns the tag of session id's open hold, if it has one and it is
// known: what a processlist sampler needs for a session seen idle in a
// transaction.
func (a *Attributor) TagOf(id uint64) (string, bool) {
	s, ok := a.sessions[id]
	if !ok {
		return "", false
	}
	switch {
	case s.curOpen && s.cur.Tag != "":
		return s.cur.Tag, true
	case s.curOpen && s.sawUntagged:
		return UntaggedTag, true
	case !s.curOpen && s.pendingOpen:
		return s.pending.Tag, true
	}
	return "", false
}

// Add processes one event. Events of a session must come in the order
// ProxySQL logged them.
func (a *Attributor) Add(e *Event) {
	a.events++
	if e.EndUS > a.nowUS {
		a.nowUS = e.EndUS
	}
	if a.events-a.lastGC >= 1<<16 || a.nowUS-a.lastGCUS >= 60e6 {
		a.lastGC, a.lastGCUS = a.events, a.nowUS
		a.expire()
	}
	s := a.sessions[e.ThreadID]
	if s == nil {
		s = &session{client: string(e.Client), user: string(e.Username)}
		a.sessions[e.ThreadID] = s
	}
	s.lastEndUS = e.EndUS

	class, pins, lockTables := classOther, Pin(0), false
	if e.Type == EventQuery {
		class, pins, lockTables = Classify(e.Query)
	}
	tag, tagged := AppendTag(a.tagBuf[:0], e.Query)
	a.tagBuf = tag[:0]
	if a.boundary(e, s, class, tag, tagged) {
		return
	}
	if e.Hostgroup < 0 && len(e.Server) == 0 && !s.curOpen && !s.inTxn {
		a.local(e, s, tag, tagged)
		return
	}
	a.statement(e, s, tag, tagged, pins, lockTables)
}

// boundary handles the statements that begin or end a transaction or
// change autocommit, and reports whether the event was one of them. UNLOCK
// TABLES drops the table lock's pin and goes on as a statement.
func (a *Attributor) boundary(e *Event, s *session, class StmtClass, tag []byte, tagged bool) bool {
	switch class {
	case ClassBegin:
		if s.inTxn {
			// MySQL commits the open transaction when a new one begins.
			a.closeHold(e.ThreadID, s)
		}
		a.extend(e.ThreadID, s, e)
		s.inTxn = true
		s.cur.Kind = HoldTransaction
		s.cur.Pins |= PinTransaction
		a.noteTag(s, tag, tagged, false)
		return true
	case ClassCommit:
		if !s.curOpen && !s.inTxn {
			// A COMMIT whose transaction began before the input did.
			a.extend(e.ThreadID, s, e)
			s.cur.Truncated = true
		} else {
			a.extend(e.ThreadID, s, e)
		}
		s.cur.Kind = HoldTransaction
		s.cur.Pins |= PinTransaction
		a.noteTag(s, tag, tagged, false)
		s.inTxn = false
		a.closeHold(e.ThreadID, s)
		return true
	case ClassAutocommitOff:
		s.autocommitOff = true
		if s.curOpen {
			a.extend(e.ThreadID, s, e)
		}
		return true
	case ClassAutocommitOn:
		s.autocommitOff = false
		if s.curOpen {
			// Turning autocommit on commits the open transaction.
			a.extend(e.ThreadID, s, e)
			s.inTxn = false
			a.closeHold(e.ThreadID, s)
		}
		return true
	case classUnlockTables:
		s.lockTables = false
		if !s.getLock {
			s.sticky &^= PinLock
		}
	}
	return false
}

// local emits a statement ProxySQL answered without a backend, outside any
// hold: nothing was held.
func (a *Attributor) local(e *Event, s *session, tag []byte, tagged bool) {
	h := Hold{SessionID: e.ThreadID, Kind: HoldLocal, StartUS: e.StartUS, EndUS: e.StartUS,
		Client: s.client, User: s.user, Hostgroup: e.Hostgroup}
	a.countStatement(&h, e)
	h.Tag = UntaggedTag
	if tagged {
		h.Tag = a.intern(tag)
	}
	a.emit(&h)
}

// statement adds a statement to the session's hold, opening one (a
// transaction under autocommit=0), and closes it outside a transaction.
func (a *Attributor) statement(e *Event, s *session, tag []byte, tagged bool, pins Pin, lockTables bool) {
	if s.autocommitOff && !s.inTxn {
		// Under autocommit=0 the first statement opens a transaction that
		// lasts until COMMIT or ROLLBACK.
		a.extend(e.ThreadID, s, e)
		s.inTxn = true
		s.cur.Kind = HoldTransaction
		s.cur.Pins |= PinTransaction | PinAutocommitOff
	} else {
		a.extend(e.ThreadID, s, e)
	}
	a.countStatement(&s.cur, e)
	a.noteTag(s, tag, tagged, true)
	if lockTables {
		s.lockTables = true
	} else if pins&PinLock != 0 {
		s.getLock = true // GET_LOCK pins until the session ends
	}
	s.sticky |= pins
	s.cur.Pins |= pins
	if !s.inTxn {
		a.closeHold(e.ThreadID, s)
	}
}

func (a *Attributor) countStatement(h *Hold, e *Event) {
	switch e.Type {
	case EventStmtPrepare:
		h.Prepares++
	case EventStmtExecute:
		h.Executes++
		h.Statements++
	default:
		h.Statements++
	}
}

// noteTag records a statement's tag on the open hold: the first tag wins.
func (a *Attributor) noteTag(s *session, tag []byte, tagged, statement bool) {
	switch {
	case tagged && s.cur.Tag == "":
		s.cur.Tag = a.intern(tag)
	case tagged && string(tag) != s.cur.Tag && s.cur.Tag != OverflowTag:
		s.cur.MixedTags = true
	case !tagged && statement:
		s.sawUntagged = true
	}
}

// extend adds e to the session's open hold, opening one if needed.
func (a *Attributor) extend(id uint64, s *session, e *Event) {
	if !s.curOpen {
		if s.pendingOpen {
			// The pinned backend stayed attached until this statement.
			if e.StartUS > s.pending.EndUS {
				s.pending.PinnedIdleUS += e.StartUS - s.pending.EndUS
				s.pending.EndUS = e.StartUS
			}
			s.pendingOpen = false
			a.emit(&s.pending)
		}
		s.cur = Hold{SessionID: id, StartUS: e.StartUS, EndUS: e.EndUS, Client: s.client, User: s.user, Hostgroup: -1}
		s.curOpen = true
		s.sawUntagged = false
	}
	if e.EndUS > s.cur.EndUS {
		s.cur.EndUS = e.EndUS
	}
	s.cur.ActiveUS += e.EndUS - e.StartUS
	if s.cur.Hostgroup < 0 && e.Hostgroup >= 0 {
		s.cur.Hostgroup = e.Hostgroup
	}
}

// closeHold finishes the session's open hold: emitted now, or kept pending
// while a sticky pin keeps the backend attached after it.
func (a *Attributor) closeHold(id uint64, s *session) {
	if !s.curOpen {
		return
	}
	s.curOpen = false
	a.finishTag(s)
	if s.sticky != 0 {
		s.pending = s.cur
		s.pendingOpen = true
		return
	}
	a.emit(&s.cur)
}

func (a *Attributor) finishTag(s *session) {
	h := &s.cur
	switch {
	case h.Tag != "":
	case s.sawUntagged:
		h.Tag = UntaggedTag
	case h.Truncated:
		h.Tag, h.UnknownReason = UnknownTag, ReasonBeganBeforeLog
	default:
		h.Tag, h.UnknownReason = UnknownTag, ReasonEmptyTxn
	}
}

// expire closes sessions silent for longer than the session timeout and
// frees the slots of tags unused for TagIdleUS. It runs every 65,536 events
// or every minute of log time, whichever comes first: the scan of at most
// MaxTags tags costs a fraction of a map lookup per event.
func (a *Attributor) expire() {
	for k, t := range a.tags {
		if a.nowUS-t.lastUS > TagIdleUS {
			delete(a.tags, k)
		}
	}
	for id, s := range a.sessions {
		if a.nowUS-s.lastEndUS < a.cfg.SessionTimeoutUS {
			continue
		}
		a.flushSession(id, s)
		delete(a.sessions, id)
	}
}

func (a *Attributor) flushSession(id uint64, s *session) {
	if s.curOpen {
		s.cur.Truncated = true
		if s.cur.Tag == "" && !s.sawUntagged {
			s.cur.Tag, s.cur.UnknownReason = UnknownTag, ReasonOpenNoStmt
		}
		s.sticky = 0
		a.closeHold(id, s)
	}
	if s.pendingOpen {
		s.pendingOpen = false
		s.pending.EndUnknown = true
		a.emit(&s.pending)
	}
}

// Flush emits every open hold, ended at its session's last event, and
// forgets all sessions: call it at the end of the input.
func (a *Attributor) Flush() {
	for id, s := range a.sessions {
		a.flushSession(id, s)
		delete(a.sessions, id)
	}
}
