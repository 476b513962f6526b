// Package otlp is the collector's one push source: an http.Handler that
// takes conntag's spans over OTLP/HTTP and writes their per-tag figures to
// a Sink, and gives each hold span's session hint to the one target the
// span went through (Router).
package otlp

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

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
}

// ServeHTTP takes one export request.
func (o *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var unmarshal func([]byte, proto.Message) error
	var marshal func(proto.Message) ([]byte, error)
	switch ct {
	case "application/x-protobuf", "application/protobuf":
		unmarshal, marshal = proto.Unmarshal, proto.Marshal
	case "application/json":
		unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal
		marshal = protojson.Marshal
	default:
		http.Error(w, "Content-Type must be application/x-protobuf or application/json", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, o.MaxBody)
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	switch enc {
	case "", "identity", "gzip":
	default:
		// Decoding it as plain would count the exporter's batches as
		// garbage; 415 tells it what to send instead.
		http.Error(w, "Content-Encoding must be gzip or identity (none)", http.StatusUnsupportedMediaType)
		return
	}
	if enc == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			o.bad(w, "gzip body: "+err.Error())
			return
		}
		defer zr.Close()
		body = io.LimitReader(zr, o.MaxBody+1)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("request larger than %d bytes: export smaller batches", o.MaxBody), http.StatusRequestEntityTooLarge)
			return
		}
		o.bad(w, "read body: "+err.Error())
		return
	}
	if int64(len(b)) > o.MaxBody {
		http.Error(w, fmt.Sprintf("request larger than %d bytes: export smaller batches", o.MaxBody), http.StatusRequestEntityTooLarge)
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := unmarshal(b, &req); err != nil {
		o.bad(w, "decode ExportTraceServiceRequest: "+err.Error())
		return
	}
	rejected := o.ingest(&req)
	// Every accepted export, spans or not, shows the app's exporter works.
	o.Sink.Success()
	resp := &coltrace.ExportTraceServiceResponse{}
	if rejected > 0 {
		resp.PartialSuccess = &coltrace.ExportTracePartialSuccess{RejectedSpans: rejected,
			ErrorMessage: "conntag spans without a valid duration were skipped"}
	}
	out, err := marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Write(out)
}

func (o *Receiver) bad(w http.ResponseWriter, msg string) {
	o.Sink.Malformed(1)
	http.Error(w, msg, http.StatusBadRequest)
}

// ingest adds the request's conntag spans to the store and returns how many
// were rejected.
func (o *Receiver) ingest(req *coltrace.ExportTraceServiceRequest) int64 {
	batch := map[string]*source.TagDelta{}
	var rejected int64
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
				if !o.span(sp, batch, now) {
					rejected++
				}
			}
		}
	}
	o.Sink.Add(batch)
	o.Sink.Malformed(int(rejected))
	return rejected
}

// maxHoldSeconds bounds one hold span: longer is a broken clock or a
// broken exporter, not a borrow.
const maxHoldSeconds = 7 * 24 * 3600

// span handles one span; it returns false for a conntag span it had to skip.
// A span is checked whole before anything of it is added: a rejected span
// leaves no trace but the malformed count.
func (o *Receiver) span(sp *tracepb.Span, batch map[string]*source.TagDelta, now time.Time) bool {
	var tag, op string
	var active, idle float64
	var session, port int64
	var host string
	var haveActive, haveIdle, haveTag, haveHost, ok bool
	for _, kv := range sp.GetAttributes() {
		v := kv.GetValue()
		switch kv.GetKey() {
		case AttrConnTag:
			tag, haveTag = v.GetStringValue(), true
		case AttrOperationName:
			op = v.GetStringValue()
		case AttrActiveSeconds:
			if active, ok = seconds64(v); !ok {
				return !isHoldCandidate(sp)
			}
			haveActive = true
		case AttrIdleSeconds:
			if idle, ok = seconds64(v); !ok {
				return !isHoldCandidate(sp)
			}
			haveIdle = true
		case AttrSessionID:
			if session, ok = sessionID(v); !ok {
				return !isHoldCandidate(sp)
			}
		case AttrServerAddress:
			host, haveHost = v.GetStringValue(), v.GetStringValue() != ""
		case AttrServerPort:
			port = v.GetIntValue()
		}
	}
	if !haveTag {
		return true // not conntag's
	}
	if !conntag.ValidTag(tag) {
		// Every tag passes the one grammar, whatever source it came
		// from: conntag's spans carry SanitizeTag's output.
		return false
	}
	var f source.Figures
	start, end := sp.GetStartTimeUnixNano(), sp.GetEndTimeUnixNano()
	if sp.GetName() != SpanHold {
		if op == "" {
			return true
		}
		f.Stmts = 1
		if sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			f.Errors = 1
		}
	} else {
		// The times bound the session hint even when active and idle
		// give the hold: a span from 1970 would name every pending run.
		if start == 0 || end < start || end > math.MaxInt64 || end-start > maxHoldSeconds*1e9 {
			return false
		}
		hold := float64(end-start) / 1e9
		if haveActive && haveIdle {
			hold = active + idle
		}
		if !(hold >= 0 && hold <= maxHoldSeconds) {
			return false
		}
		f.Hold = hold
		switch {
		case haveActive:
			f.Active = min(active, hold)
			f.Idle = hold - f.Active
		case haveIdle:
			f.Idle = min(idle, hold)
			f.Active = hold - f.Idle
		}
	}
	d := batch[tag]
	if d == nil {
		d = &source.TagDelta{}
		batch[tag] = d
	}
	d.Add(&f)
	d.Obs++
	if session > 0 && sp.GetName() == SpanHold {
		// The session id is the ProxySQL session of the instance the app
		// dialled or, connected directly, the server's connection id (the
		// app↔server join): only that target may read it.
		h := source.Hint{Tag: tag, Start: time.Unix(0, int64(start)), End: time.Unix(0, int64(end)), Received: now}
		o.Router.Route(host, port, haveHost, session, h)
	}
	return true
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
