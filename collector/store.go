package collector

import (
	"github.com/holdtime/holdtime/collector/internal/source"
	"math"
	"strings"
	"sync"
	"time"
)

// Source names where a figure came from. It is the `source` label of the
// per-tag metrics and the key of TopRow.Sources.
type Source string

// The sources of per-tag figures.
const (
	SourceProxySQLProcesslist Source = "proxysql_processlist" // sampled stats_mysql_processlist
	SourceProxySQLEvents      Source = "proxysql_events"      // the JSON events log, exact
	SourceProxySQLDigest      Source = "proxysql_digest"      // stats_mysql_query_digest deltas
	SourceMySQL               Source = "mysql"                // the MySQL/MariaDB server itself
	SourceOTLP                Source = "otlp"                 // conntag's spans
	// SourceProxySQLPool labels only holdtime_source_up and
	// holdtime_source_last_success_timestamp_seconds: the poll of
	// stats_mysql_connection_pool and stats_mysql_global has no per-tag figures.
	SourceProxySQLPool Source = "proxysql_pool"
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

// entry is one tag of one (target, source).
type entry struct {
	total      figures
	pinnedSecs map[string]float64 // reason -> seconds pinned idle (processlist)
	fine       [fineBuckets]bucket
	coarse     [coarseBuckets]bucket
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
	tags      map[string]*entry
	overflow  float64 // observations whose tag went to OverflowTag
	malformed float64 // rows counted and skipped
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
	// lowerBound is the last time the source could not keep up and its
	// statement count became a lower bound.
	lowerBound time.Time
}

// gauges are the current-state figures a poll replaces as a whole.
type gauges struct {
	sessions map[string]int        // tag -> sessions holding a connection
	pinned   map[[2]string]int     // (tag, reason) -> pinned sessions
	pool     []PoolServer          // stats_mysql_connection_pool
	global   *proxysqlGlobal       // stats_mysql_global
	trx      map[string]trxFigures // tag -> INNODB_TRX figures
	waits    map[[2]string]int     // (waiter tag, blocker tag) -> lock waits
	waiting  int                   // ProxySQL sessions waiting for a backend now
	locks    *lockFigures          // SourceMySQLLocks: locks, deadlocks, saturation
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
// maxTags tags, counting n observations as overflowed. unknown and untagged
// are never capped: they say what the collector could not attribute and
// must stay visible; overflow itself was counted by whoever chose it.
// Callers hold mu.
func (s *store) entryFor(sr *series, tag string, n float64) *entry {
	if e := sr.tags[tag]; e != nil {
		return e
	}
	if len(sr.tags) >= s.maxTags && tag != UnknownTag && tag != UntaggedTag && tag != OverflowTag {
		sr.overflow += n
		tag = OverflowTag
		if e := sr.tags[tag]; e != nil {
			return e
		}
	}
	// Clone: tag may point into a reused buffer or a large statement text.
	e := &entry{}
	sr.tags[strings.Clone(tag)] = e
	return e
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
		e := s.entryFor(sr, tag, max(d.Obs, 1))
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
	s.entryFor(sr, tag, 1).addAt(s.now().Unix(), f)
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
// overflow once per call. Gauges use it so that their label sets obey the
// same cap as the counters.
func (s *store) capTag(sr *series, tag string) string {
	if _, ok := sr.tags[tag]; ok || tag == UnknownTag || tag == UntaggedTag {
		return tag
	}
	if len(sr.tags) >= s.maxTags {
		sr.overflow++
		return OverflowTag
	}
	sr.tags[strings.Clone(tag)] = &entry{}
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
	for k, sr := range s.series {
		if k.source == except {
			continue
		}
		if _, ok := sr.tags[tag]; ok {
			return true
		}
		if g := sr.gauges; g != nil && g.sessions[tag] > 0 {
			return true
		}
	}
	return false
}
