package collector

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
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
	if r.Header.Get("Content-Encoding") == "gzip" {
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

// span handles one span; it returns false for a conntag span it had to skip.
func (o *otlpReceiver) span(sp *tracepb.Span, batch map[string]*tagDelta, now time.Time) bool {
	var tag, op string
	var active, idle float64
	var session int64
	var haveActive, haveIdle, haveTag bool
	for _, kv := range sp.GetAttributes() {
		v := kv.GetValue()
		switch kv.GetKey() {
		case attrConnTag:
			tag, haveTag = v.GetStringValue(), true
		case attrOperationName:
			op = v.GetStringValue()
		case attrActiveSeconds:
			active, haveActive = number(v)
		case attrIdleSeconds:
			idle, haveIdle = number(v)
		case attrSessionID:
			n, _ := number(v)
			session = int64(n)
		}
	}
	if !haveTag {
		return true // not conntag's
	}
	if tag == "" || len(tag) > MaxTagLen {
		return false
	}
	d := batch[tag]
	if d == nil {
		if len(batch) >= o.c.cfg.MaxTags {
			tag = OverflowTag // the store caps too; this bounds the batch
		}
		if d = batch[tag]; d == nil {
			d = &tagDelta{}
			batch[tag] = d
		}
	}
	if sp.GetName() != spanHold {
		if op == "" {
			return true
		}
		d.stmts++
		if sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			d.errors++
		}
		return true
	}
	start, end := sp.GetStartTimeUnixNano(), sp.GetEndTimeUnixNano()
	hold := float64(end-start) / 1e9
	if haveActive && haveIdle {
		hold = active + idle
	}
	if end < start || hold < 0 || hold > 7*24*3600 || active < 0 || idle < 0 {
		return false
	}
	d.hold += hold
	if haveActive {
		d.active += active
		d.idle += hold - min(active, hold)
	}
	if session > 0 {
		for _, p := range o.c.proxies {
			p.sessions.hint(session, sessionHint{tag: tag, start: time.Unix(0, int64(start)), end: time.Unix(0, int64(end)), received: now})
		}
	}
	return true
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
