package collector

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

	"github.com/holdtime/holdtime/conntag"
)

// conntag's span vocabulary (conntag/hold.go, conntag/instr.go).
const (
	spanHold          = "db.connection.hold"
	attrConnTag       = "conn_tag"
	attrOperationName = "db.operation.name"
	attrActiveSeconds = "holdtime.hold.active_seconds"
	attrIdleSeconds   = "holdtime.hold.idle_seconds"
	attrSessionID     = "holdtime.session_id"
)

// otlpReceiver takes conntag's spans over OTLP/HTTP (/v1/traces, protobuf or
// JSON, optionally gzip): hold spans give app-side hold, active and idle
// seconds per tag; statement spans give statements and errors (the hold
// span's holdtime.hold.statements is not added: it would count them twice). A hold span
// with holdtime.session_id names the tag of that ProxySQL session (or MySQL
// processlist id), which the ProxySQL source uses for sampled hold it could
// not tag. Other spans are ignored: the receiver can sit behind an
// OpenTelemetry Collector that forwards everything.
type otlpReceiver struct {
	c       *Collector
	target  string
	maxBody int64
	router  *spanRouter
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	var body io.Reader = http.MaxBytesReader(w, r.Body, o.maxBody)
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
		body = io.LimitReader(zr, o.maxBody+1)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("request larger than %d bytes: export smaller batches", o.maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		o.bad(w, "read body: "+err.Error())
		return
	}
	if int64(len(b)) > o.maxBody {
		http.Error(w, fmt.Sprintf("request larger than %d bytes: export smaller batches", o.maxBody), http.StatusRequestEntityTooLarge)
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := unmarshal(b, &req); err != nil {
		o.bad(w, "decode ExportTraceServiceRequest: "+err.Error())
		return
	}
	rejected := o.ingest(&req)
	// Every accepted export, spans or not, shows the app's exporter works.
	o.c.st.success(o.target, SourceOTLP)
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

func (o *otlpReceiver) bad(w http.ResponseWriter, msg string) {
	o.c.st.malformed(o.target, SourceOTLP, 1)
	http.Error(w, msg, http.StatusBadRequest)
}

// ingest adds the request's conntag spans to the store and returns how many
// were rejected.
func (o *otlpReceiver) ingest(req *coltrace.ExportTraceServiceRequest) int64 {
	batch := map[string]*tagDelta{}
	var rejected int64
	now := time.Now()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				if len(batch) >= o.c.cfg.MaxTags {
					// Bound the batch's memory; the store decides what
					// overflows, span by span.
					o.c.st.add(o.target, SourceOTLP, batch)
					clear(batch)
				}
				if !o.span(sp, batch, now) {
					rejected++
				}
			}
		}
	}
	o.c.st.add(o.target, SourceOTLP, batch)
	o.c.st.malformed(o.target, SourceOTLP, int(rejected))
	return rejected
}

// maxHoldSeconds bounds one hold span: longer is a broken clock or a
// broken exporter, not a borrow.
const maxHoldSeconds = 7 * 24 * 3600

// span handles one span; it returns false for a conntag span it had to skip.
// A span is checked whole before anything of it is added: a rejected span
// leaves no trace but the malformed count.
func (o *otlpReceiver) span(sp *tracepb.Span, batch map[string]*tagDelta, now time.Time) bool {
	var tag, op string
	var active, idle float64
	var session, port int64
	var host string
	var haveActive, haveIdle, haveTag, haveHost, ok bool
	for _, kv := range sp.GetAttributes() {
		v := kv.GetValue()
		switch kv.GetKey() {
		case attrConnTag:
			tag, haveTag = v.GetStringValue(), true
		case attrOperationName:
			op = v.GetStringValue()
		case attrActiveSeconds:
			if active, ok = seconds64(v); !ok {
				return !isHoldCandidate(sp)
			}
			haveActive = true
		case attrIdleSeconds:
			if idle, ok = seconds64(v); !ok {
				return !isHoldCandidate(sp)
			}
			haveIdle = true
		case attrSessionID:
			if session, ok = sessionID(v); !ok {
				return !isHoldCandidate(sp)
			}
		case attrServerAddress:
			host, haveHost = v.GetStringValue(), v.GetStringValue() != ""
		case attrServerPort:
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
	var f figures
	start, end := sp.GetStartTimeUnixNano(), sp.GetEndTimeUnixNano()
	if sp.GetName() != spanHold {
		if op == "" {
			return true
		}
		f.stmts = 1
		if sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			f.errors = 1
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
		f.hold = hold
		switch {
		case haveActive:
			f.active = min(active, hold)
			f.idle = hold - f.active
		case haveIdle:
			f.idle = min(idle, hold)
			f.active = hold - f.idle
		}
	}
	d := batch[tag]
	if d == nil {
		d = &tagDelta{}
		batch[tag] = d
	}
	d.add(&f)
	d.obs++
	if session > 0 && sp.GetName() == spanHold {
		// The session id is the ProxySQL session of the instance the app
		// dialled or, connected directly, the server's connection id (the
		// app↔server join): only that target may read it.
		h := sessionHint{tag: tag, start: time.Unix(0, int64(start)), end: time.Unix(0, int64(end)), received: now}
		o.router.route(host, port, haveHost, session, h)
	}
	return true
}

// isHoldCandidate says whether a span with a bad holdtime attribute is
// conntag's, and so counts as rejected; others are not the receiver's
// business.
func isHoldCandidate(sp *tracepb.Span) bool {
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == attrConnTag {
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
