package collector

import (
	"github.com/holdtime/holdtime/collector/internal/source"
	"math"
	"strings"
	"sync"
	"time"
)

// figures and tagDelta are what sources write (package source); the store
// keeps them per tag.
type (
	figures  = source.Figures
	tagDelta = source.TagDelta
)

// Window resolution: 1 s buckets for the 10 s window, 5 s buckets for the
// 1 m and 5 m windows. Two small rings instead of one 300-slot ring keep an
// entry near 3 KiB, so MaxTags entries per source stay a few MiB.
const (
	fineBuckets   = 10
	coarseBuckets = 60
	coarseSpan    = 5 // seconds per coarse bucket
)

type bucket struct {
	sec int64 // start of the bucket, Unix seconds
	f   figures
}

// tagTTL is how long a tag keeps its slot unseen: the longest window
// (5 m, the coarse ring). A tag unseen for longer has nothing in any
// window, so dropping it changes no ranking; it frees the slot for a tag
// that holds connections now, so that OverflowTag holds only what does not
// fit now, not every tag that came after a flood of junk.
const tagTTL = coarseBuckets * coarseSpan * time.Second

// entry is one tag of one (target, source).
type entry struct {
	total      figures
	pinnedSecs map[string]float64 // reason -> seconds pinned idle (processlist)
	// longest are the tag's longest completed holds (longest.go).
	longest []DetailHold
	// stmts are the tag's digests by time in the window (statements.go).
	stmts  []*stmtFigures
	fine   [fineBuckets]bucket
	coarse [coarseBuckets]bucket

	// tag is the entry's key in series.tags, for expire to delete it; ""
	// for the collector's own tags (UnknownTag, UntaggedTag, OverflowTag),
	// which never age out: they are at most three and their counters must
	// stay whole.
	tag string
	// seen is the Unix second the tag was last added to or capped
	// (capTag); older and newer link the series' aging tags in the order
	// they were last seen, oldest first, so that expiring costs one
	// comparison plus one step per tag it drops.
	seen         int64
	older, newer *entry
}

func (e *entry) addAt(sec int64, f *figures) {
	e.total.Add(f)
	b := &e.fine[sec%fineBuckets]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	b.f.Add(f)
	cs := sec - sec%coarseSpan
	c := &e.coarse[(sec/coarseSpan)%coarseBuckets]
	if c.sec != cs {
		*c = bucket{sec: cs}
	}
	c.f.Add(f)
}

// window sums the buckets covering the last w seconds before now and
// returns the span in seconds they cover.
func (e *entry) window(now time.Time, w time.Duration) (figures, float64) {
	var sum figures
	nowSec := now.Unix()
	var oldest int64
	if w <= fineBuckets*time.Second {
		oldest = nowSec - int64(w/time.Second) + 1
		for i := range e.fine {
			if b := &e.fine[i]; b.sec >= oldest && b.sec <= nowSec {
				sum.Add(&b.f)
			}
		}
	} else {
		cur := nowSec - nowSec%coarseSpan
		oldest = cur - int64(w/time.Second) + coarseSpan
		for i := range e.coarse {
			if b := &e.coarse[i]; b.sec >= oldest && b.sec <= cur {
				sum.Add(&b.f)
			}
		}
	}
	return sum, now.Sub(time.Unix(oldest, 0)).Seconds()
}

type seriesKey struct {
	target string
	source Source
}

// series is everything one source of one target reported.
type series struct {
	tags map[string]*entry
	// oldest and newest are the ends of the aging list of tags (entry.older,
	// entry.newer): every entry of tags but the collector's own.
	oldest, newest *entry
	overflow       float64 // observations whose tag went to OverflowTag
	malformed      float64 // rows counted and skipped
	// malformedSample is the latest rejected input, cut short, for a
	// reader to see what was rejected (no credentials: statement text).
	malformedSample string
	up              bool
	lastSuccess     time.Time
	lastError       string  // scrubbed of the DSN's password; "" while up
	failure         Failure // the kind of lastError
	gauges          *gauges // nil while the source is down: stale, not zero
	// since is when the source's figures begin: its first success (a poll
	// source credits from its first poll on), or the collector's start for
	// a push source, whose first export may carry holds from before it.
	since time.Time
	// degraded lists why an up source's figures are incomplete; nil when
	// they are not.
	degraded []Degradation
	// joinHold is the hold the proxy↔server join named, by quality
	// (exact, inferred, unknown).
	joinHold map[string]float64
	// lowerBound is the last time the source could not keep up and its
	// statement count became a lower bound.
	lowerBound time.Time
	// joinOnly marks a MySQL source that reads only for the proxy↔server
	// join (MySQLConfig.JoinOnly): it has no figures and no layer.
	joinOnly bool
}

// gauges are the current-state figures a poll replaces as a whole.
type gauges struct {
	sessions map[string]int        // tag -> sessions holding a connection
	pinned   map[[2]string]int     // (tag, reason) -> pinned sessions
	trx      map[string]trxFigures // tag -> INNODB_TRX figures
	waits    map[[2]string]int     // (waiter tag, blocker tag) -> lock waits
	locks    *lockFigures          // SourceMySQLLocks: locks and deadlocks per tag
}

// PoolServer is one row of stats_mysql_connection_pool.
type PoolServer struct {
	Hostgroup  int64
	Server     string // host:port
	Status     string
	ConnUsed   int64
	ConnFree   int64
	ConnOK     int64
	ConnERR    int64
	Queries    int64
	LatencyUS  int64
	SampleTime time.Time
}

type proxysqlGlobal struct {
	clientConnections  float64
	activeTransactions float64
	getConnFailures    float64
}

type trxFigures struct {
	count      int
	maxAge     float64
	rowsLocked int64
}

// store holds every figure the sources report, per (target, source, tag),
// with a cap on distinct tags per (target, source). It is the one place the
// Prometheus collector and Top read.
type store struct {
	mu      sync.Mutex
	maxTags int
	started time.Time
	now     func() time.Time
	series  map[seriesKey]*series
	// headline names the source whose figures are each (target, layer)'s,
	// fixed by the configuration so that layer counters never switch
	// sources (and jump) between polls.
	headline map[targetLayer]Source
	// otlpMetrics is set (by New, before Run) when the OTLP receiver also
	// serves /v1/metrics: its status messages name both paths.
	otlpMetrics bool
}

func newStore(maxTags int, now func() time.Time) *store {
	return &store{maxTags: maxTags, now: now, started: now(), series: make(map[seriesKey]*series),
		headline: make(map[targetLayer]Source)}
}

// get returns the series of (target, source), creating it. Callers hold mu.
func (s *store) get(target string, source Source) *series {
	k := seriesKey{target, source}
	sr := s.series[k]
	if sr == nil {
		sr = &series{tags: make(map[string]*entry)}
		s.series[k] = sr
	}
	return sr
}

// entryFor returns tag's entry, or the overflow entry once the series has
// maxTags tags, counting n observations as overflowed, and marks it seen at
// sec. unknown and untagged are never capped: they say what the collector
// could not attribute and must stay visible; overflow itself was counted by
// whoever chose it. Tags unseen for longer than tagTTL are dropped first,
// so their slots go to new tags. Callers hold mu.
func (s *store) entryFor(sr *series, tag string, n float64) *entry {
	return s.entryAt(sr, tag, n, s.now().Unix())
}

// entryAt is entryFor at sec (Unix seconds): a batch reads the clock once.
func (s *store) entryAt(sr *series, tag string, n float64, sec int64) *entry {
	sr.expire(sec)
	if e := sr.tags[tag]; e != nil {
		sr.touch(e, sec)
		return e
	}
	if len(sr.tags) >= s.maxTags && !ownTag(tag) {
		sr.overflow += n
		tag = OverflowTag
		if e := sr.tags[tag]; e != nil {
			return e
		}
	}
	return sr.newEntry(tag, sec)
}

// ownTag reports whether tag is one of the names the collector gives
// (unknown, untagged, overflow): never capped, never aged out.
func ownTag(tag string) bool { return tag == UnknownTag || tag == UntaggedTag || tag == OverflowTag }

// newEntry adds tag to the series, seen at sec. Callers hold mu.
func (sr *series) newEntry(tag string, sec int64) *entry {
	// Clone: tag may point into a reused buffer or a large statement text.
	tag = strings.Clone(tag)
	e := &entry{}
	sr.tags[tag] = e
	if !ownTag(tag) {
		e.tag = tag
		sr.touch(e, sec)
	}
	return e
}

// touch marks an aging entry seen at sec: it becomes the newest. An own
// tag's entry is not in the list and stays out. Callers hold mu.
func (sr *series) touch(e *entry, sec int64) {
	if e.tag == "" {
		return
	}
	e.seen = sec
	if sr.newest == e {
		return
	}
	sr.unlink(e)
	e.older, e.newer = sr.newest, nil
	if sr.newest != nil {
		sr.newest.newer = e
	} else {
		sr.oldest = e
	}
	sr.newest = e
}

// unlink takes e out of the aging list; e may be in it or not yet.
func (sr *series) unlink(e *entry) {
	if e.older != nil {
		e.older.newer = e.newer
	} else if sr.oldest == e {
		sr.oldest = e.newer
	}
	if e.newer != nil {
		e.newer.older = e.older
	} else if sr.newest == e {
		sr.newest = e.older
	}
	e.older, e.newer = nil, nil
}

// expire drops the tags unseen for longer than tagTTL at now (Unix
// seconds): their series leave /metrics and their slots are free. It walks
// from the oldest and stops at the first tag still fresh, so its cost is
// one comparison plus one step per tag dropped, whatever the number of
// tags. The list is in the order tags were seen: should the wall clock
// step back, a tag seen after the step waits behind older ones and keeps
// its slot longer, never shorter. Callers hold mu.
func (sr *series) expire(now int64) {
	for e := sr.oldest; e != nil && now-e.seen > int64(tagTTL/time.Second); e = sr.oldest {
		sr.unlink(e)
		delete(sr.tags, e.tag)
	}
}

// storeSink is the write-only view of the store that one source of one
// target gets (the OTLP receiver's Sink): it adds figures and reports how
// the source is, and reads nothing back.
type storeSink struct {
	st     *store
	target string
	source Source
}

func (s storeSink) Add(batch map[string]*tagDelta) { s.st.add(s.target, s.source, batch) }
func (s storeSink) Success()                       { s.st.success(s.target, s.source) }
func (s storeSink) Malformed(n int)                { s.st.malformed(s.target, s.source, n) }

// add adds a batch of per-tag figures at the collector's current time. A
// delta that would move a counter backwards or make it NaN is dropped and
// counted as malformed: sources validate their input, this is the last
// line that keeps every counter monotonic and finite.
func (s *store) add(target string, source Source, batch map[string]*tagDelta) {
	if len(batch) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.now().Unix()
	sr := s.get(target, source)
	for tag, d := range batch {
		if !d.Sane() || !saneSeconds(d.PinnedSecs) {
			sr.malformed++
			continue
		}
		if d.Figures == (figures{}) && len(d.PinnedSecs) == 0 {
			continue // nothing to add: no series for it
		}
		e := s.entryAt(sr, tag, max(d.Obs, 1), sec)
		e.addAt(sec, &d.Figures)
		for reason, v := range d.PinnedSecs {
			if e.pinnedSecs == nil {
				e.pinnedSecs = make(map[string]float64)
			}
			e.pinnedSecs[reason] += v
		}
	}
}

// addOne adds figures for one tag: the path of sources that see one hold at
// a time (events log, OTLP).
func (s *store) addOne(target string, source Source, tag string, f *figures) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.get(target, source)
	if !f.Sane() {
		sr.malformed++
		return
	}
	sec := s.now().Unix()
	s.entryAt(sr, tag, 1, sec).addAt(sec, f)
}

func saneSeconds(m map[string]float64) bool {
	for _, v := range m {
		if !(v >= 0 && v <= math.MaxFloat64) {
			return false
		}
	}
	return true
}

// capTag maps tag to the name the store would keep it under, counting an
// overflow once per call, and marks it seen now: a tag that holds sessions
// keeps its slot. Gauges use it so that their label sets obey the same cap
// as the counters.
func (s *store) capTag(sr *series, tag string) string {
	sec := s.now().Unix()
	sr.expire(sec)
	if e, ok := sr.tags[tag]; ok {
		sr.touch(e, sec)
		return tag
	}
	if tag == UnknownTag || tag == UntaggedTag {
		return tag
	}
	if len(sr.tags) >= s.maxTags {
		sr.overflow++
		return OverflowTag
	}
	sr.newEntry(tag, sec)
	return tag
}

// setGauges replaces the current-state figures of a source after a
// successful poll, capping their tags like the counters'.
func (s *store) setGauges(target string, source Source, update func(sr *series, g *gauges)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.get(target, source)
	g := &gauges{}
	if sr.gauges != nil {
		*g = *sr.gauges
	}
	update(sr, g)
	sr.gauges = g
}

// success marks a poll of (target, source) as done now.
func (s *store) success(target string, source Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.get(target, source)
	sr.up = true
	sr.lastSuccess = s.now()
	sr.lastError, sr.failure = "", ""
	if sr.since.IsZero() {
		sr.since = sr.lastSuccess
	}
}

// failure marks (target, source) down and drops its gauges: a dead source's
// sessions are unknown, not zero, so its series disappear until it is back.
// why is the error, already scrubbed of secrets; kind its classification.
func (s *store) failure(target string, source Source, why string, kind Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.get(target, source)
	sr.up = false
	sr.gauges = nil
	sr.lastError, sr.failure = why, kind
	sr.degraded = nil
}

// register makes (target, source) known, down until its first success.
func (s *store) register(target string, source Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(target, source)
}

// overflowed counts n observations a source already sent to OverflowTag.
func (s *store) overflowed(target string, source Source, n int64) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(target, source).overflow += float64(n)
}

// joined counts sec of hold the proxy↔server join answered with quality.
func (s *store) joined(target string, source Source, quality string, sec float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.get(target, source)
	if sr.joinHold == nil {
		sr.joinHold = map[string]float64{}
	}
	sr.joinHold[quality] += sec
}

func (s *store) malformed(target string, source Source, n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(target, source).malformed += float64(n)
}

// malformedWith counts n rejected rows and keeps sample as the latest.
func (s *store) malformedWith(target string, source Source, n int, sample string) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.get(target, source)
	sr.malformed += float64(n)
	sr.malformedSample = sample
}

// seenElsewhere reports whether a source other than except has figures or
// sessions for tag: what a tag read from digest text needs to be believed.
func (s *store) seenElsewhere(tag string, except Source) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().Unix()
	for k, sr := range s.series {
		if k.source == except {
			continue
		}
		sr.expire(now)
		if _, ok := sr.tags[tag]; ok {
			return true
		}
		if g := sr.gauges; g != nil && g.sessions[tag] > 0 {
			return true
		}
	}
	return false
}
