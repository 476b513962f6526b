package locks

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdtime/holdtime/conntag"
)

// Deadlock is the server's LATEST DETECTED DEADLOCK: the transactions of
// the cycle, what each held and waited for, and which one the server rolled
// back.
type Deadlock struct {
	// At is when the server detected it, in the server's local time as
	// printed ("2026-12-02 16:14:51"); "" when the text did not say. Zone
	// is that local time's offset from UTC ("+01:00"), read from the server
	// (its system time zone, which the status text uses), "" when unknown;
	// Time is At in that zone.
	At           string                `json:"at"`
	Zone         string                `json:"zone,omitempty"`
	Time         *time.Time            `json:"time,omitempty"`
	Transactions []DeadlockTransaction `json:"transactions"`
	// Victim is the number (1, 2, ...) of the transaction rolled back, 0
	// when the text does not say.
	Victim int `json:"victim"`
}

// DeadlockTransaction is one transaction of a deadlock.
type DeadlockTransaction struct {
	N        int    `json:"n"` // its number in the report: (1), (2), ...
	TrxID    string `json:"trx_id"`
	ThreadID int64  `json:"thread_id"`
	// Tag is the conn_tag of the statement it ran (set by the Reader or
	// ResolveTags); "untagged" when the statement carries none, "unknown"
	// when the text showed no statement.
	Tag string `json:"tag"`
	// Statement is the statement it was running, normalised (no literal
	// values).
	Statement string `json:"statement"`
	// Held are the locks it held that the others waited for (MySQL: HOLDS
	// THE LOCK(S); MariaDB: the CONFLICTING WITH locks bearing its trx id).
	Held []Lock `json:"held,omitempty"`
	// WaitedFor is the lock it waited for.
	WaitedFor *Lock `json:"waited_for,omitempty"`
	Victim    bool  `json:"victim"`

	query string // as printed, with literals: never exported
}

// Key identifies a deadlock: two reads of the same LATEST DETECTED DEADLOCK
// have the same key; a new deadlock has another (its time or its
// transactions differ).
func (d *Deadlock) Key() string {
	var b strings.Builder
	b.WriteString(d.At)
	for _, t := range d.Transactions {
		b.WriteString("|")
		b.WriteString(t.TrxID)
		b.WriteString("/")
		b.WriteString(strconv.FormatInt(t.ThreadID, 10))
	}
	return b.String()
}

// VictimTag is the tag of the transaction rolled back, "unknown" when the
// text did not say which.
func (d *Deadlock) VictimTag() string {
	for _, t := range d.Transactions {
		if t.Victim {
			return orUnknown(t.Tag)
		}
	}
	return UnknownTag
}

// OtherTag is the tags of the transactions that were not rolled back, as one
// label: sorted, distinct, joined by "," ("unknown" when none is known). A
// deadlock of three or more transactions is one deadlock: counted once,
// under this one label, never once per other tag.
func (d *Deadlock) OtherTag() string {
	tags := d.OtherTags()
	if len(tags) == 0 {
		return UnknownTag
	}
	slices.Sort(tags)
	return strings.Join(slices.Compact(tags), ",")
}

// setZone sets Zone and Time from the server's UTC offset in seconds.
func (d *Deadlock) setZone(offset int) {
	if d == nil || d.At == "" {
		return
	}
	sign, o := '+', offset
	if o < 0 {
		sign, o = '-', -o
	}
	d.Zone = fmt.Sprintf("%c%02d:%02d", sign, o/3600, o%3600/60)
	if t, err := time.ParseInLocation(time.DateTime, d.At, time.FixedZone(d.Zone, offset)); err == nil {
		d.Time = &t
	}
}

// OtherTags are the tags of the transactions that were not rolled back.
func (d *Deadlock) OtherTags() []string {
	var out []string
	for _, t := range d.Transactions {
		if !t.Victim {
			out = append(out, orUnknown(t.Tag))
		}
	}
	return out
}

func orUnknown(tag string) string {
	if tag == "" {
		return UnknownTag
	}
	return tag
}

// atSectionEnd reports whether the next lines are a rule and a section
// title: where the deadlock section ends.
func atSectionEnd(r *lineReader) bool {
	line, ok := r.peek()
	if !ok || !isRule(line) {
		return false
	}
	p := r.pos
	r.next()
	title, _ := r.next()
	r.pos = p
	return sectionTitles[title]
}

// deadlockMarker parses "*** (2) HOLDS THE LOCK(S):" into 2 and the rest.
func deadlockMarker(line string) (n int, what string) {
	rest := strings.TrimPrefix(line, "*** ")
	if strings.HasPrefix(rest, "(") {
		if end := strings.IndexByte(rest, ')'); end > 0 {
			if v, err := strconv.Atoi(rest[1:end]); err == nil {
				n = v
			}
			rest = strings.TrimSpace(rest[end+1:])
		}
	}
	return n, rest
}

// parseDeadlock reads the LATEST DETECTED DEADLOCK section, from the rule
// line under its title to the next section.
func parseDeadlock(r *lineReader, st *Status) *Deadlock {
	d := &Deadlock{}
	const (
		modeNone = iota
		modeHeader
		modeWaiting
		modeHolds
		modeConflicting
	)
	mode := modeNone
	var cur *DeadlockTransaction // the transaction the header or lock lines belong to
	var lock *lockLine
	var lockRows, lockSupremum int
	var conflicting []Lock // MariaDB: attributed by trx id at the end
	var conflictingTrx []string
	var query strings.Builder
	inQuery := false
	byN := func(n int) *DeadlockTransaction {
		for i := range d.Transactions {
			if d.Transactions[i].N == n {
				return &d.Transactions[i]
			}
		}
		return nil
	}
	// flush files the lock whose rows were being counted.
	flush := func() {
		if lock == nil {
			return
		}
		rows := lockRows
		if !lock.record {
			rows = 1
		}
		var out []Lock
		if lock.record && lockSupremum > 0 {
			out = append(out, lock.lock(true, lockSupremum))
		}
		if !lock.record || rows-lockSupremum > 0 || len(out) == 0 {
			out = append(out, lock.lock(false, rows-lockSupremum))
		}
		for _, l := range out {
			switch {
			case mode == modeWaiting && cur != nil && cur.WaitedFor == nil:
				w := l
				cur.WaitedFor = &w
			case mode == modeHolds && cur != nil:
				var s lockSet
				for _, h := range cur.Held {
					s.add(h)
				}
				s.add(l)
				cur.Held = s.locks
			case mode == modeConflicting:
				conflicting = append(conflicting, l)
				conflictingTrx = append(conflictingTrx, lock.trxID)
			}
		}
		lock, lockRows, lockSupremum = nil, 0, 0
	}
	endQuery := func() {
		if cur != nil && inQuery {
			cur.query = strings.TrimSpace(query.String())
		}
		inQuery = false
		query.Reset()
	}
	first := true
	for !atSectionEnd(r) {
		line, ok := r.next()
		if !ok {
			break
		}
		if line == "... truncated..." {
			st.Truncated = true
			continue
		}
		if first && strings.TrimSpace(line) != "" && !isRule(line) {
			first = false
			if len(line) >= 19 && line[4] == '-' && line[7] == '-' && line[13] == ':' {
				d.At = line[:19]
				continue
			}
		}
		switch {
		case strings.HasPrefix(line, "*** "):
			flush()
			endQuery()
			n, what := deadlockMarker(line)
			switch {
			case what == "TRANSACTION:":
				d.Transactions = append(d.Transactions, DeadlockTransaction{N: n})
				cur = &d.Transactions[len(d.Transactions)-1]
				mode = modeHeader
			case strings.HasPrefix(what, "WAITING FOR THIS LOCK"):
				if n > 0 {
					cur = byN(n)
				}
				mode = modeWaiting
			case strings.HasPrefix(what, "HOLDS THE LOCK"):
				if n > 0 {
					cur = byN(n)
				}
				mode = modeHolds
			case strings.HasPrefix(what, "CONFLICTING WITH"):
				mode = modeConflicting
			case strings.HasPrefix(what, "WE ROLL BACK TRANSACTION"):
				if vn, _ := deadlockMarker("*** " + strings.TrimSpace(strings.TrimPrefix(what, "WE ROLL BACK TRANSACTION"))); vn > 0 {
					d.Victim = vn
				}
				mode = modeNone
			default:
				mode = modeNone
			}
		case strings.HasPrefix(line, "TABLE LOCK ") || strings.HasPrefix(line, "RECORD LOCKS "):
			flush()
			endQuery()
			l, ok := parseLockLine(line)
			if !ok {
				st.Unparsed++
				continue
			}
			lock = &l
		case strings.HasPrefix(line, "Record lock, heap no "):
			if lock == nil {
				continue
			}
			lockRows++
			if heap, ok := parseHeapNo(line); ok && heap == 1 {
				lockSupremum++
			}
		case mode == modeHeader && cur != nil && strings.HasPrefix(line, "TRANSACTION "):
			id, _, _ := strings.Cut(strings.TrimPrefix(line, "TRANSACTION "), ",")
			cur.TrxID = strings.TrimSpace(id)
		case mode == modeHeader && cur != nil &&
			(strings.HasPrefix(line, "MariaDB thread id ") || strings.HasPrefix(line, "MySQL thread id ")):
			cur.ThreadID = parseThreadID(line)
			inQuery = true
		case mode == modeHeader && inQuery && line != "":
			if query.Len() < maxQueryLen {
				if query.Len() > 0 {
					query.WriteByte('\n')
				}
				query.WriteString(line[:min(len(line), maxQueryLen-query.Len())])
			}
		}
	}
	flush()
	endQuery()
	for i, l := range conflicting {
		for j := range d.Transactions {
			if t := &d.Transactions[j]; t.TrxID != "" && t.TrxID == conflictingTrx[i] {
				var s lockSet
				for _, h := range t.Held {
					s.add(h)
				}
				s.add(l)
				t.Held = s.locks
			}
		}
	}
	if len(d.Transactions) == 0 && d.At == "" {
		return nil
	}
	for i := range d.Transactions {
		t := &d.Transactions[i]
		t.Victim = t.N == d.Victim && d.Victim > 0
		t.Statement = Normalize(t.query)
		sortLocks(t.Held)
	}
	return d
}

// ResolveTags sets the Tag of every deadlock transaction from its statement
// with parse (nil: conntag.ParseTag). The server prints at most
// DeadlockTextLimit bytes of each statement: one that long without a tag
// lost its end, and its tag is unknown, not untagged.
func (d *Deadlock) ResolveTags(parse func(string) (string, bool)) {
	if d == nil {
		return
	}
	if parse == nil {
		parse = conntag.ParseTag
	}
	for i := range d.Transactions {
		t := &d.Transactions[i]
		switch tag, cut := statementTag(parse, t.query, DeadlockTextLimit); {
		case tag != "":
			t.Tag = tag
		case strings.TrimSpace(t.query) == "" || cut:
			t.Tag = UnknownTag
		default:
			t.Tag = UntaggedTag
		}
	}
}

// Deadlocks reports each deadlock of one server once. The server keeps only
// the latest; read it more often than deadlocks happen, and compare
// Observe's unnamed count (from the server's deadlock counter) with the
// deadlocks named. It is not safe for concurrent use: give each target its
// own.
type Deadlocks struct {
	keep    int
	primed  bool
	lastKey string
	// Since the baseline: the server's count, the deadlocks named, and
	// the unnamed ones reported. A deadlock named by a read whose counter
	// was read before it happened is counted by the next counter: the
	// balance keeps it from being reported again as unnamed.
	baseCount, named, unnamed int64
	lastCount                 int64
	haveCount                 bool
	recent                    []Deadlock
}

// NewDeadlocks returns a tracker that remembers the keep most recent
// deadlocks (default 10).
func NewDeadlocks(keep int) *Deadlocks {
	if keep <= 0 {
		keep = 10
	}
	return &Deadlocks{keep: keep}
}

// Observe takes a snapshot's latest deadlock and deadlock counter and
// returns the deadlocks that are new since the previous call (at most one:
// the server keeps only the latest), and unnamed: how many more deadlocks
// the server counted meanwhile that no read showed (each overwrote the
// previous one before it was read). The first call only sets the baseline:
// what happened before it is not new, though Recent lists it.
func (t *Deadlocks) Observe(s *Snapshot) (fresh []Deadlock, unnamed int64) {
	var key string
	if s.LatestDeadlock != nil {
		key = s.LatestDeadlock.Key()
	}
	if !t.primed {
		t.primed = true
		t.lastKey = key
		t.rebase(s)
		if s.LatestDeadlock != nil {
			t.remember(*s.LatestDeadlock)
		}
		return nil, 0
	}
	if key != "" && key != t.lastKey {
		fresh = append(fresh, *s.LatestDeadlock)
		t.remember(*s.LatestDeadlock)
		t.lastKey = key
		t.named++
	}
	if !s.DeadlockCountKnown {
		return fresh, 0
	}
	if !t.haveCount || s.DeadlockCount < t.lastCount {
		// No counter before, or it went down (the server restarted):
		// start the balance again.
		t.rebase(s)
		return fresh, 0
	}
	t.lastCount = s.DeadlockCount
	// The counter is read before the status text: every deadlock it
	// counted either shows now or was overwritten and never will.
	if owed := s.DeadlockCount - t.baseCount - t.named - t.unnamed; owed > 0 {
		unnamed = owed
		t.unnamed += owed
	}
	return fresh, unnamed
}

func (t *Deadlocks) rebase(s *Snapshot) {
	t.baseCount, t.lastCount, t.haveCount = s.DeadlockCount, s.DeadlockCount, s.DeadlockCountKnown
	t.named, t.unnamed = 0, 0
}

func (t *Deadlocks) remember(d Deadlock) {
	t.recent = append(t.recent, d)
	if len(t.recent) > t.keep {
		t.recent = slices.Delete(t.recent, 0, len(t.recent)-t.keep)
	}
}

// Recent returns the deadlocks seen, oldest first (at most keep).
func (t *Deadlocks) Recent() []Deadlock { return slices.Clone(t.recent) }
