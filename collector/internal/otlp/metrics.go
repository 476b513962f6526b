package otlp

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/holdtime/holdtime/collector/internal/attrib"
	"github.com/holdtime/holdtime/collector/internal/source"
	"github.com/holdtime/holdtime/conntag"
)

// conntag's per-tag counters (conntag/metrics.go): what the app layer's
// figures are made of. Every series carries conn_tag; statements carry
// error.type when they failed.
const (
	MetricHoldTime   = "holdtime.connection.hold_time"
	MetricActiveTime = "holdtime.connection.active_time"
	MetricIdleTime   = "holdtime.connection.idle_time"
	MetricHolds      = "holdtime.connection.holds"
	MetricOperations = "holdtime.client.operations"
	AttrErrorType    = "error.type"
)

// counterKind is which figure a counter moves.
type counterKind uint8

const (
	kindNone counterKind = iota
	kindHold
	kindActive
	kindIdle
	kindHolds
	kindOps
)

func kindOf(name string) counterKind {
	switch name {
	case MetricHoldTime:
		return kindHold
	case MetricActiveTime:
		return kindActive
	case MetricIdleTime:
		return kindIdle
	case MetricHolds:
		return kindHolds
	case MetricOperations:
		return kindOps
	}
	return kindNone
}

// Defaults of MetricsReceiver's bounds.
const (
	// DefaultMaxConnections bounds how fast a seconds counter may grow:
	// hold-seconds per second is the number of connections held, and no
	// pool of one app holds more than this at once.
	DefaultMaxConnections = 10_000
	// DefaultMaxOpsRate bounds how fast a statement or hold counter of
	// one series may grow, per second.
	DefaultMaxOpsRate = 1_000_000
	// DefaultMaxSeries bounds the series remembered (about 200 bytes
	// each): a counter's first point only sets its baseline, so every
	// series the receiver credits is one it remembers.
	DefaultMaxSeries = 100_000
	// seriesIdle is how long a series unseen is remembered: an app
	// exports every 60 s by default, and one that restarts starts new
	// series (a new start time).
	seriesIdle = 10 * time.Minute
	// The rate bound measures a point's interval on the receiver's clock
	// too, never only on the sender's: a new series' interval is at most
	// the receiver's age plus ageSlack, a known series' at most the time
	// since the receiver last heard of it plus exportSlack (an export
	// delayed by retries arrives late, the next one on time).
	ageSlack    = 10 * time.Second
	exportSlack = time.Minute
)

// MetricsReceiver takes conntag's counters over OTLP/HTTP (/v1/metrics,
// protobuf or JSON, optionally gzip) and writes the per-tag deltas they
// say to the Sink: hold, active and idle seconds, statements and failed
// statements. Its work per export grows with the series exported (tags ×
// pools × operations), never with the holds the app made. Other metrics
// are ignored: it can sit behind an OpenTelemetry Collector that forwards
// everything.
//
// A series is one resource (every attribute of it) × metric × point
// attributes × start time: a counter that restarts (a new start time) is
// a new series, and so are two app replicas whose resources are alike.
// Cumulative points are turned into deltas against the last point of
// their series: the first point of a series that began counting before
// Started, or more than 10 minutes before that point, is only its
// baseline (what it counted before cannot be placed in time, or was
// credited before the receiver forgot the series); one that began after
// Started is credited whole. A point no
// newer than the last one of its series (a retry, a duplicate, an export
// out of order) adds nothing. Delta points are credited as they come,
// unless they overlap the last one of their series. A counter that goes
// down without a new start time, grows faster than physics allows
// (MaxConnections, MaxOpsRate, over its interval as the receiver's own
// clock bounds it: a sender's old timestamps buy nothing), or is not a finite non-negative number is
// rejected, never guessed, and so is a series whose conn_tag is missing or
// outside the tag grammar.
type MetricsReceiver struct {
	Sink Sink
	// MaxTags bounds the distinct tags of one batch written to Sink.
	MaxTags int
	// MaxBody caps one export request, in bytes.
	MaxBody int64
	// Started is when the receiver began to listen; zero: every series'
	// first cumulative point is only a baseline.
	Started time.Time
	// MaxConnections, MaxOpsRate and MaxSeries: zero means the Default.
	MaxConnections float64
	MaxOpsRate     float64
	MaxSeries      int
	// Now is the receiver's clock; nil: time.Now.
	Now func() time.Time

	mu        sync.Mutex
	series    map[seriesKey]*series
	seeds     [2]maphash.Seed
	lastSweep time.Time
}

// seriesKey is a 128-bit hash of a series' identity (resource, metric,
// point attributes, start time): fixed-size, so a resource with large
// attributes costs its series nothing more (stored whole, one 200 KB
// attribute times thousands of tags was gigabytes).
type seriesKey [2]uint64

// series is what is remembered of one counter series.
type series struct {
	last  uint64  // time of the last point taken, unix nanos
	value float64 // its value (cumulative)
	seen  time.Time
}

// pointReject is why a counter point was skipped.
type pointReject uint8

const (
	pointOK        pointReject = iota
	pointDuplicate             // not newer than the series' last point: not an error
	pointNoTag                 // a conntag counter without conn_tag
	pointBadTag                // conn_tag outside the grammar
	pointBadNumber             // NaN, infinite or negative
	pointBadTimes              // no time, before its start, or in the future
	pointBadKind               // not a monotonic cumulative or delta sum
	pointDown                  // went down without a new start time
	pointTooFast               // grew faster than MaxConnections or MaxOpsRate
	pointTooMany               // past MaxSeries
	numPointRejects
)

var pointRejectText = [numPointRejects]string{
	pointNoTag:     "without conn_tag",
	pointBadTag:    "with a conn_tag outside the tag grammar (1 to 64 of [A-Za-z0-9_.:-])",
	pointBadNumber: "whose value is not a finite, non-negative number",
	pointBadTimes:  "without a valid time (none, before its start, or more than 5m in the future)",
	pointBadKind:   "not a monotonic sum (cumulative or delta)",
	pointDown:      "of a cumulative counter that went down without a new start time",
	pointTooFast:   "growing faster than any pool can (more connections held, or statements per second, than the receiver's bounds)",
	pointTooMany:   "of series past the receiver's bound on series remembered",
}

type pointRejects struct {
	n      [numPointRejects]int64
	sample string
}

func (r *pointRejects) total() (n int64) {
	for _, v := range r.n[pointNoTag:] {
		n += v
	}
	return n
}

func (r *pointRejects) message() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d conntag counter points skipped:", r.total())
	sep := " "
	for why := pointNoTag; why < numPointRejects; why++ {
		if r.n[why] != 0 {
			fmt.Fprintf(&b, "%s%d %s", sep, r.n[why], pointRejectText[why])
			sep = "; "
		}
	}
	if r.sample != "" {
		fmt.Fprintf(&b, "; first bad tag %q", r.sample)
	}
	return b.String()
}

// ServeHTTP takes one export request.
func (m *MetricsReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req colmetrics.ExportMetricsServiceRequest
	codec, ok := readExport(w, r, m.MaxBody, &req, m.Sink)
	if !ok {
		return
	}
	rej := m.ingest(&req)
	m.Sink.Success()
	resp := &colmetrics.ExportMetricsServiceResponse{}
	if n := rej.total(); n > 0 {
		resp.PartialSuccess = &colmetrics.ExportMetricsPartialSuccess{RejectedDataPoints: n, ErrorMessage: rej.message()}
	}
	codec.reply(w, resp)
}

// ingest writes one export's per-tag deltas to the Sink and says which
// points it rejected, and why.
func (m *MetricsReceiver) ingest(req *colmetrics.ExportMetricsServiceRequest) pointRejects {
	now := time.Now()
	if m.Now != nil {
		now = m.Now()
	}
	maxTags := cmp.Or(m.MaxTags, 1000)
	batch := map[string]*source.TagDelta{}
	var rej pointRejects
	var key []byte
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.series == nil {
		m.series = map[seriesKey]*series{}
		m.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	}
	for _, rm := range req.GetResourceMetrics() {
		key = appendAttrs(key[:0], rm.GetResource().GetAttributes())
		resLen := len(key)
		for _, sm := range rm.GetScopeMetrics() {
			for _, mt := range sm.GetMetrics() {
				kind := kindOf(mt.GetName())
				if kind == kindNone {
					continue
				}
				sum := mt.GetSum()
				if sum == nil || !sum.GetIsMonotonic() || (sum.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE &&
					sum.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA) {
					rej.n[pointBadKind] += int64(dataPoints(mt))
					continue
				}
				cumulative := sum.GetAggregationTemporality() == metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
				key = append(append(key[:resLen], 0xff), mt.GetName()...)
				metLen := len(key)
				for _, p := range sum.GetDataPoints() {
					if len(batch) >= maxTags {
						m.Sink.Add(batch)
						clear(batch)
					}
					key = appendAttrs(key[:metLen], p.GetAttributes())
					if cumulative {
						key = strconv.AppendUint(append(key, 0xff), p.GetStartTimeUnixNano(), 10)
					}
					if why := m.point(key, kind, cumulative, p, batch, now, &rej); why != pointOK {
						rej.n[why]++
					}
				}
			}
		}
	}
	m.Sink.Add(batch)
	m.Sink.Malformed(int(rej.total()))
	m.sweep(now)
	return rej
}

// point takes one data point of a conntag counter: it reads the point,
// moves its series and credits what the point adds to its tag in batch.
func (m *MetricsReceiver) point(key []byte, kind counterKind, cumulative bool, p *metricspb.NumberDataPoint,
	batch map[string]*source.TagDelta, now time.Time, rej *pointRejects) pointReject {
	if p.GetFlags()&uint32(metricspb.DataPointFlags_DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK) != 0 {
		return pointOK // a gap the exporter marked: nothing to add
	}
	r := reading{kind: kind, cumulative: cumulative, received: now}
	if why := r.read(p, rej); why != pointOK {
		return why
	}
	delta, why := m.advance(seriesKey{maphash.Bytes(m.seeds[0], key), maphash.Bytes(m.seeds[1], key)}, &r)
	if why == pointOK && delta != 0 {
		credit(batch, &r, delta)
	}
	return why
}

// reading is one data point of a conntag counter as the receiver took it.
type reading struct {
	kind       counterKind
	cumulative bool
	received   time.Time // the receiver's clock
	tag        string
	failed     bool    // the point counts failed statements (error.type)
	v          float64 // the point's value
	start, t   uint64  // its start time and time, unix nanos
}

// read takes p's tag, value and times into r, and says why they cannot
// be credited (pointOK if they can), checked in that order.
func (r *reading) read(p *metricspb.NumberDataPoint, rej *pointRejects) pointReject {
	var haveTag bool
	for _, kv := range p.GetAttributes() {
		switch kv.GetKey() {
		case AttrConnTag:
			r.tag, haveTag = kv.GetValue().GetStringValue(), true
		case AttrErrorType:
			r.failed = true
		}
	}
	switch {
	case !haveTag:
		return pointNoTag
	case !conntag.ValidTag(r.tag):
		if rej.sample == "" {
			rej.sample = attrib.Truncate(r.tag, 80)
		}
		return pointBadTag
	}
	var ok bool
	if r.v, ok = pointValue(p); !ok {
		return pointBadNumber
	}
	r.start, r.t = p.GetStartTimeUnixNano(), p.GetTimeUnixNano()
	if r.t == 0 || r.t < r.start || r.t > math.MaxInt64 || time.Unix(0, int64(r.t)).After(r.received.Add(maxFuture)) ||
		!r.cumulative && r.t == r.start { // a delta covers an interval: an empty one would be credited at every replay
		return pointBadTimes
	}
	return pointOK
}

// pointValue reads a point's value: a finite, non-negative number,
// whichever numeric type the exporter chose.
func pointValue(p *metricspb.NumberDataPoint) (float64, bool) {
	var v float64
	switch x := p.GetValue().(type) {
	case *metricspb.NumberDataPoint_AsDouble:
		v = x.AsDouble
	case *metricspb.NumberDataPoint_AsInt:
		v = float64(x.AsInt)
	default:
		return 0, false
	}
	return v, v >= 0 && v <= math.MaxFloat64 // false for NaN too
}

// advance moves series k to the point r and says what r adds to it: 0
// with pointOK for a baseline or a counter that did not move.
func (m *MetricsReceiver) advance(k seriesKey, r *reading) (float64, pointReject) {
	s := m.series[k]
	if s == nil {
		return m.first(k, r)
	}
	prevSeen := s.seen // when the receiver last heard of the series
	var delta float64
	var from uint64 // where the delta's interval begins
	switch {
	case r.cumulative && r.t <= s.last, !r.cumulative && r.start < s.last:
		s.seen = r.received
		return 0, pointDuplicate
	case r.cumulative && r.v < s.value:
		s.seen = r.received
		if r.start != 0 {
			s.last, s.value = r.t, r.v
			return 0, pointDown
		}
		// No start time to tell a restart by: a counter that went down
		// restarted, and counts from zero (Prometheus' rule).
		delta, from = r.v, s.last
		s.last, s.value = r.t, r.v
	case r.cumulative:
		delta, from = r.v-s.value, s.last
	default:
		delta, from = r.v, r.start
	}
	return m.take(s, r, delta, from, prevSeen)
}

// first remembers a new series from its first point r, and says what r
// adds: nothing if r is only the series' baseline.
func (m *MetricsReceiver) first(k seriesKey, r *reading) (float64, pointReject) {
	if len(m.series) >= cmp.Or(m.MaxSeries, DefaultMaxSeries) {
		return 0, pointTooMany
	}
	s := &series{last: r.t, value: r.v, seen: r.received}
	m.series[k] = s
	// A baseline: what it counted before is not placed in time. So is
	// the first point of a series older than seriesIdle: it may be one
	// this receiver forgot after seriesIdle without a point, and
	// crediting it whole would count its past twice.
	if r.cumulative && (r.start == 0 || m.Started.IsZero() || time.Unix(0, int64(r.start)).Before(m.Started) ||
		r.t-r.start >= uint64(seriesIdle)) {
		return 0, pointOK
	}
	if !r.cumulative {
		s.value = 0
	}
	return m.take(s, r, r.v, r.start, time.Time{})
}

// take moves series s to the point r, which adds delta over the interval
// that begins at from, unless that is faster than physics allows.
func (m *MetricsReceiver) take(s *series, r *reading, delta float64, from uint64, prevSeen time.Time) (float64, pointReject) {
	if delta > m.maxGrowth(r, from, prevSeen) {
		// Keep the last good point: a spike is rejected and what follows
		// is measured from before it.
		s.seen = r.received
		return 0, pointTooFast
	}
	s.last, s.seen = r.t, r.received
	if r.cumulative {
		s.value = r.v
	}
	return delta, pointOK
}

// maxGrowth is the most a counter of r's kind can grow between from and
// r's time, that interval bounded by the receiver's own clock (prevSeen:
// when it last heard of the series; zero: never).
func (m *MetricsReceiver) maxGrowth(r *reading, from uint64, prevSeen time.Time) float64 {
	if from == 0 || from > r.t {
		from = r.t
	}
	span := float64(r.t-from) / 1e9
	if !m.Started.IsZero() {
		span = min(span, r.received.Sub(m.Started).Seconds()+ageSlack.Seconds())
	}
	if !prevSeen.IsZero() {
		span = min(span, r.received.Sub(prevSeen).Seconds()+exportSlack.Seconds())
	}
	elapsed := max(span, 0) + 1 // a second of slack for clock granularity
	limit := cmp.Or(m.MaxOpsRate, DefaultMaxOpsRate)
	if r.kind == kindHold || r.kind == kindActive || r.kind == kindIdle {
		limit = cmp.Or(m.MaxConnections, DefaultMaxConnections)
	}
	return elapsed * limit
}

// credit adds delta to the figure r's kind moves, for r's tag.
func credit(batch map[string]*source.TagDelta, r *reading, delta float64) {
	d := batch[r.tag]
	if d == nil {
		d = &source.TagDelta{}
		batch[r.tag] = d
	}
	switch r.kind {
	case kindHold:
		d.Hold += delta
	case kindActive:
		d.Active += delta
	case kindIdle:
		d.Idle += delta
	case kindHolds:
		d.Obs += delta
	case kindOps:
		d.Stmts += delta
		if r.failed {
			d.Errors += delta
		}
	}
}

// sweep forgets series unseen for seriesIdle, at most once a minute.
func (m *MetricsReceiver) sweep(now time.Time) {
	if now.Sub(m.lastSweep) < time.Minute {
		return
	}
	m.lastSweep = now
	for k, s := range m.series {
		if now.Sub(s.seen) > seriesIdle {
			delete(m.series, k)
		}
	}
}

// Series says how many series the receiver remembers (about 200 bytes
// each, at most MaxSeries): what the receiver keeps, for a gauge read at
// scrape time. A scrape that comes during an export waits for its end.
func (m *MetricsReceiver) Series() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.series)
}

func dataPoints(mt *metricspb.Metric) int {
	switch d := mt.GetData().(type) {
	case *metricspb.Metric_Gauge:
		return len(d.Gauge.GetDataPoints())
	case *metricspb.Metric_Sum:
		return len(d.Sum.GetDataPoints())
	case *metricspb.Metric_Histogram:
		return len(d.Histogram.GetDataPoints())
	case *metricspb.Metric_ExponentialHistogram:
		return len(d.ExponentialHistogram.GetDataPoints())
	case *metricspb.Metric_Summary:
		return len(d.Summary.GetDataPoints())
	}
	return 0
}

// appendAttrs appends an unambiguous encoding of attrs, in key order, to
// b: the identity of a resource or a point.
func appendAttrs(b []byte, attrs []*commonpb.KeyValue) []byte {
	sorted := slices.IsSortedFunc(attrs, func(x, y *commonpb.KeyValue) int { return strings.Compare(x.GetKey(), y.GetKey()) })
	if !sorted {
		attrs = slices.SortedFunc(slices.Values(attrs), func(x, y *commonpb.KeyValue) int { return strings.Compare(x.GetKey(), y.GetKey()) })
	}
	for _, kv := range attrs {
		b = strconv.AppendInt(append(b, 0xfe), int64(len(kv.GetKey())), 10)
		b = append(append(b, ':'), kv.GetKey()...)
		b = appendValue(b, kv.GetValue())
	}
	return b
}

func appendValue(b []byte, v *commonpb.AnyValue) []byte {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		b = strconv.AppendInt(append(b, 's'), int64(len(x.StringValue)), 10)
		return append(append(b, ':'), x.StringValue...)
	case *commonpb.AnyValue_IntValue:
		return strconv.AppendInt(append(b, 'i'), x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.AppendFloat(append(b, 'd'), x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		return strconv.AppendBool(append(b, 'b'), x.BoolValue)
	case *commonpb.AnyValue_BytesValue:
		b = strconv.AppendInt(append(b, 'y'), int64(len(x.BytesValue)), 10)
		return append(append(b, ':'), x.BytesValue...)
	case *commonpb.AnyValue_ArrayValue:
		b = append(b, '[')
		for _, e := range x.ArrayValue.GetValues() {
			b = appendValue(append(b, ','), e)
		}
		return append(b, ']')
	case *commonpb.AnyValue_KvlistValue:
		return append(appendAttrs(append(b, '{'), x.KvlistValue.GetValues()), '}')
	}
	return append(b, 'n')
}
