package otlp

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/holdtime/holdtime/collector/internal/attrib"
	"github.com/holdtime/holdtime/collector/internal/source"
	"github.com/holdtime/holdtime/conntag"
)

// conntag's span vocabulary (conntag/hold.go, conntag/instr.go), and
// OpenTelemetry's names of the address a connection dialled.
const (
	SpanHold          = "db.connection.hold"
	AttrConnTag       = "conn_tag"
	AttrOperationName = "db.operation.name"
	AttrActiveSeconds = "holdtime.hold.active_seconds"
	AttrIdleSeconds   = "holdtime.hold.idle_seconds"
	AttrSessionID     = "holdtime.session_id"
	AttrServerAddress = "server.address"
	AttrServerPort    = "server.port"
)

// Sink is where the receiver writes: the store, for the receiver's target
// and source. It is all the receiver knows of it.
type Sink interface {
	// Add adds a batch of per-tag figures.
	Add(batch map[string]*source.TagDelta)
	// Success marks an export received: the app's exporter works.
	Success()
	// Malformed counts n rejected spans or requests.
	Malformed(n int)
}

// Router gives a hold span's session hint to the one target the span went
// through, by the address it names (haveAddr false: it names none).
type Router interface {
	Route(host string, port int64, haveAddr bool, session int64, h source.Hint)
}

// Receiver takes conntag's spans over OTLP/HTTP (/v1/traces, protobuf or
// JSON, optionally gzip): hold spans give app-side hold, active and idle
// seconds per tag; statement spans give statements and errors (the hold
// span's holdtime.hold.statements is not added: it would count them twice). A hold span
// with holdtime.session_id names the tag of that ProxySQL session (or MySQL
// processlist id), which the ProxySQL source uses for sampled hold it could
// not tag. Other spans are ignored: the receiver can sit behind an
// OpenTelemetry Collector that forwards everything.
type Receiver struct {
	Sink   Sink
	Router Router
	// MaxTags bounds the distinct tags of one batch written to Sink.
	MaxTags int
	// MaxBody caps one export request, in bytes.
	MaxBody int64
	// MaxHold rejects a hold span longer than this (0: DefaultMaxHold):
	// a broken clock or a hostile sender, not a borrow.
	MaxHold time.Duration
	// HintsOnly: the app layer's figures come from conntag's counters
	// (MetricsReceiver), so spans only give session hints to the Router
	// and add no figures (they would count every hold twice).
	HintsOnly bool
	// Started is when the receiver began to listen. A hold is credited
	// at most the time since then plus the shortest window (10 s): a
	// counter never takes more hold per connection than the time it has
	// been counting (a 7-day span made one tag hold 14 million
	// connections in a 1-minute window). Zero: no clipping.
	Started time.Time
}

// DefaultMaxHold is the longest hold span believed when MaxHold is unset.
// conntag ends a hold span when the connection goes back to the pool, so
// a leak held a day is still reported, once, a day late.
const DefaultMaxHold = 24 * time.Hour

// clipSlack is added to the receiver's age when a hold is clipped: the
// collector's shortest window.
const clipSlack = 10 * time.Second

// maxFuture is how far past the receiver's clock a span may end: the
// skew between the app's clock and the collector's.
const maxFuture = 5 * time.Minute

// reject is why a conntag span was skipped.
type reject uint8

const (
	accepted  reject = iota
	badTag           // conn_tag outside the tag grammar
	badNumber        // an active/idle/session attribute not a finite, non-negative number
	badTimes         // no start, ends before it starts, or ends in the future
	tooLong          // longer than MaxHold
	numRejects
)

var rejectText = [numRejects]string{
	badTag:    "with a conn_tag outside the tag grammar (1 to 64 of [A-Za-z0-9_.:-])",
	badNumber: "with an active, idle or session attribute that is not a finite, non-negative number",
	badTimes:  "without a valid duration (no start, ending before it starts, or ending more than 5m in the future)",
	tooLong:   "holding longer than the maximum hold believed",
}

// rejects counts the skipped spans of one request by reason, with the
// first bad tag seen as a sample.
type rejects struct {
	n      [numRejects]int64
	sample string
}

func (r *rejects) total() (n int64) {
	for _, v := range r.n[1:] {
		n += v
	}
	return n
}

// message names every reason with its count: the exporter's log then says
// what to fix, not only that something was wrong.
func (r *rejects) message(maxHold time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d conntag spans skipped:", r.total())
	sep := " "
	for why := badTag; why < numRejects; why++ {
		if r.n[why] == 0 {
			continue
		}
		text := rejectText[why]
		if why == tooLong {
			text += " (" + maxHold.String() + ")"
		}
		fmt.Fprintf(&b, "%s%d %s", sep, r.n[why], text)
		sep = "; "
	}
	if r.sample != "" {
		fmt.Fprintf(&b, "; first bad tag %q", r.sample)
	}
	return b.String()
}

// ServeHTTP takes one export request.
func (o *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req coltrace.ExportTraceServiceRequest
	codec, ok := readExport(w, r, o.MaxBody, &req, o.Sink)
	if !ok {
		return
	}
	rej := o.ingest(&req)
	// Every accepted export, spans or not, shows the app's exporter works.
	o.Sink.Success()
	resp := &coltrace.ExportTraceServiceResponse{}
	if n := rej.total(); n > 0 {
		resp.PartialSuccess = &coltrace.ExportTracePartialSuccess{RejectedSpans: n, ErrorMessage: rej.message(o.maxHold())}
	}
	codec.reply(w, resp)
}

func (o *Receiver) maxHold() time.Duration { return cmp.Or(o.MaxHold, DefaultMaxHold) }

// ingest adds the request's conntag spans to the store and says which were
// rejected, and why.
func (o *Receiver) ingest(req *coltrace.ExportTraceServiceRequest) rejects {
	batch := map[string]*source.TagDelta{}
	var rej rejects
	now := time.Now()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				if len(batch) >= o.MaxTags {
					// Bound the batch's memory; the store decides what
					// overflows, span by span.
					o.Sink.Add(batch)
					clear(batch)
				}
				if why := o.span(sp, batch, now, &rej); why != accepted {
					rej.n[why]++
				}
			}
		}
	}
	o.Sink.Add(batch)
	o.Sink.Malformed(int(rej.total()))
	return rej
}

// maxHoldSeconds bounds any duration attribute, whatever MaxHold says.
const maxHoldSeconds = 7 * 24 * 3600

// span handles one span; it says why a conntag span had to be skipped
// (accepted otherwise). A span is checked whole before anything of it is
// added: a rejected span leaves no trace but the malformed count.
func (o *Receiver) span(sp *tracepb.Span, batch map[string]*source.TagDelta, now time.Time, rej *rejects) reject {
	a, ok := readSpanAttrs(sp)
	if !ok {
		return rejectIf(isHoldCandidate(sp), badNumber)
	}
	if !a.haveTag {
		return accepted // not conntag's
	}
	if !conntag.ValidTag(a.tag) {
		// Every tag passes the one grammar, whatever source it came
		// from: conntag's spans carry SanitizeTag's output. The sample
		// is cut and quoted where it is shown; never stored as a tag.
		if rej.sample == "" {
			rej.sample = attrib.Truncate(a.tag, 80)
		}
		return badTag
	}
	var f source.Figures
	if sp.GetName() != SpanHold {
		if a.op == "" {
			return accepted
		}
		f.Stmts = 1
		if sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			f.Errors = 1
		}
	} else if why := o.holdFigures(sp, &a, now, &f); why != accepted {
		return why
	}
	if !o.HintsOnly {
		d := batch[a.tag]
		if d == nil {
			d = &source.TagDelta{}
			batch[a.tag] = d
		}
		d.Add(&f)
		d.Obs++
	}
	if a.session > 0 && sp.GetName() == SpanHold {
		// The session id is the ProxySQL session of the instance the app
		// dialled or, connected directly, the server's connection id (the
		// app↔server join): only that target may read it.
		h := source.Hint{Tag: a.tag, Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())),
			End: time.Unix(0, int64(sp.GetEndTimeUnixNano())), Received: now}
		o.Router.Route(a.host, a.port, a.haveHost, a.session, h)
	}
	return accepted
}

// spanAttrs are the attributes of a span the receiver reads.
type spanAttrs struct {
	tag, op, host        string
	active, idle         float64 // seconds
	session, port        int64
	haveTag, haveHost    bool
	haveActive, haveIdle bool
}

// readSpanAttrs reads sp's attributes; false when an active, idle or
// session attribute is not a number it may be (the first such ends the
// reading).
func readSpanAttrs(sp *tracepb.Span) (a spanAttrs, ok bool) {
	for _, kv := range sp.GetAttributes() {
		v := kv.GetValue()
		switch kv.GetKey() {
		case AttrConnTag:
			a.tag, a.haveTag = v.GetStringValue(), true
		case AttrOperationName:
			a.op = v.GetStringValue()
		case AttrActiveSeconds:
			if a.active, ok = seconds64(v); !ok {
				return a, false
			}
			a.haveActive = true
		case AttrIdleSeconds:
			if a.idle, ok = seconds64(v); !ok {
				return a, false
			}
			a.haveIdle = true
		case AttrSessionID:
			if a.session, ok = sessionID(v); !ok {
				return a, false
			}
		case AttrServerAddress:
			a.host, a.haveHost = v.GetStringValue(), v.GetStringValue() != ""
		case AttrServerPort:
			a.port = v.GetIntValue()
		}
	}
	return a, true
}

// holdFigures sets f to a hold span's hold, active and idle seconds, and
// says why the span had to be skipped (accepted otherwise).
func (o *Receiver) holdFigures(sp *tracepb.Span, a *spanAttrs, now time.Time, f *source.Figures) reject {
	// The times bound the session hint even when active and idle
	// give the hold: a span from 1970 would name every pending run.
	start, end := sp.GetStartTimeUnixNano(), sp.GetEndTimeUnixNano()
	if start == 0 || end < start || end > math.MaxInt64 || end-start > maxHoldSeconds*1e9 ||
		time.Unix(0, int64(end)).After(now.Add(maxFuture)) {
		return badTimes
	}
	hold := float64(end-start) / 1e9
	if a.haveActive && a.haveIdle {
		hold = a.active + a.idle
	}
	if !(hold >= 0 && hold <= maxHoldSeconds) {
		return badTimes
	}
	if hold > o.maxHold().Seconds() {
		return tooLong
	}
	active, idle := a.active, a.idle
	// Physics: the counters take no more of a hold than the time the
	// receiver has been counting, plus the shortest window (a span is
	// exported seconds after it ends, and a window covers at least
	// its nominal length, so one span adds at most about one
	// connection to any window). active and idle shrink in
	// proportion.
	if !o.Started.IsZero() {
		if limit := (now.Sub(o.Started) + clipSlack).Seconds(); hold > limit {
			active, idle = active*limit/hold, idle*limit/hold
			hold = limit
		}
	}
	f.Hold = hold
	switch {
	case a.haveActive:
		f.Active = min(active, hold)
		f.Idle = hold - f.Active
	case a.haveIdle:
		f.Idle = min(idle, hold)
		f.Active = hold - f.Idle
	}
	return accepted
}

func rejectIf(conntags bool, why reject) reject {
	if conntags {
		return why
	}
	return accepted
}

// isHoldCandidate says whether a span with a bad holdtime attribute is
// conntag's, and so counts as rejected; others are not the receiver's
// business.
func isHoldCandidate(sp *tracepb.Span) bool {
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == AttrConnTag {
			return true
		}
	}
	return false
}

// seconds64 reads a duration attribute in seconds: finite, not negative,
// at most maxHoldSeconds.
func seconds64(v *commonpb.AnyValue) (float64, bool) {
	x, ok := number(v)
	return x, ok && x >= 0 && x <= maxHoldSeconds // false for NaN too
}

// sessionID reads holdtime.session_id: a non-negative integer (conntag
// writes an int; a double must be a whole number an int64 holds).
func sessionID(v *commonpb.AnyValue) (int64, bool) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_IntValue:
		return x.IntValue, x.IntValue >= 0
	case *commonpb.AnyValue_DoubleValue:
		d := x.DoubleValue
		if d >= 0 && d < 1<<63 && d == math.Trunc(d) {
			return int64(d), true
		}
	}
	return 0, false
}

// number reads a numeric attribute, whatever numeric type the exporter
// chose.
func number(v *commonpb.AnyValue) (float64, bool) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue, true
	case *commonpb.AnyValue_IntValue:
		return float64(x.IntValue), true
	}
	return 0, false
}
