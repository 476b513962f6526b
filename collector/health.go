package collector

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Source states, the `state` of SourceStatus and of
// holdtime_source_state.
const (
	// StateUp: the source answers and its figures are complete.
	StateUp = "up"
	// StateDegraded: the source answers but some of its figures are
	// missing or a lower bound (SourceStatus.Degraded says which, and the
	// fix).
	StateDegraded = "degraded"
	// StateDown: its last poll failed; its counters keep their last values
	// and its gauges are absent (stale, never zero).
	StateDown = "down"
	// StateWaiting: nothing to report yet: a poll source before its first
	// poll, or the OTLP receiver before the first export or after none for
	// PushIdle. An app that sends no spans is not a failure the collector
	// can see.
	StateWaiting = "waiting"
)

// SourceStates lists the states in the order holdtime_source_state has
// them.
var SourceStates = []string{StateUp, StateDegraded, StateDown, StateWaiting}

// PushIdle is how long after its last export a push source (OTLP) goes
// back to waiting: its figures are then not stale, there is only nothing
// new, which is what an idle app looks like too.
const PushIdle = 2 * time.Minute

// Degradation is one reason an up source's figures are incomplete.
type Degradation struct {
	// Reason is a stable snake_case code, the `reason` label of
	// holdtime_source_degraded.
	Reason string `json:"reason"`
	// Detail says what is missing, in a sentence.
	Detail string `json:"detail"`
	// Fix says what to do.
	Fix string `json:"fix"`
}

// SourceStatus is the health of one source of one target.
type SourceStatus struct {
	Target string `json:"target"`
	Source Source `json:"source"`
	// Layer is the layer the source's figures describe ("" for
	// proxysql_pool); Headline is set when they are that layer's figures
	// for this target.
	Layer    Layer `json:"layer,omitempty"`
	Headline bool  `json:"headline"`
	// JoinOnly is set on a MySQL source that reads the server only for
	// the proxy↔server join (MySQLConfig.JoinOnly): it exports no figures
	// and has no Layer; another collector exports the server's.
	JoinOnly bool `json:"join_only,omitempty"`
	// Up is set while the source answers (up or degraded).
	Up    bool   `json:"up"`
	State string `json:"state"`
	// Reason, Detail and Fix explain a state other than up: a code, what it
	// means, and what to do.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	Fix    string `json:"fix,omitempty"`
	// Degraded lists every reason of a degraded source, worst first.
	Degraded    []Degradation `json:"degraded,omitempty"`
	LastSuccess time.Time     `json:"last_success,omitzero"`
	// LastError says why the source is down (no credentials in it).
	LastError string `json:"last_error,omitempty"`
	// Failure is the kind of LastError: whether waiting can help, and what
	// to fix when it cannot.
	Failure Failure `json:"failure,omitempty"`
	// Malformed counts rows and lines the source rejected (a digest row
	// whose tag only corrupt text shows, a line that does not parse);
	// MalformedSample is the latest of them, cut short.
	Malformed       float64 `json:"malformed,omitempty"`
	MalformedSample string  `json:"malformed_sample,omitempty"`
	// ServerJoin is the ProxySQL processlist's idle hold the proxy↔server
	// join answered, in seconds by quality: exact (the server's thread and
	// event order name the tag), inferred (time broke a tie the evidence
	// left), unknown (nothing the server shows names it).
	ServerJoin map[string]float64 `json:"server_join_hold_seconds,omitempty"`
}

// status is the health of one series now. Callers hold mu.
func (s *store) status(k seriesKey, sr *series, now time.Time) SourceStatus {
	st := SourceStatus{Target: k.target, Source: k.source, Layer: k.source.Layer(), Headline: s.isHeadline(k),
		LastSuccess: sr.lastSuccess.UTC(), LastError: sr.lastError, Failure: sr.failure,
		Malformed: sr.malformed, MalformedSample: sr.malformedSample, ServerJoin: maps.Clone(sr.joinHold), JoinOnly: sr.joinOnly}
	if sr.joinOnly {
		st.Layer = ""
	}
	if sr.lastSuccess.IsZero() {
		st.LastSuccess = time.Time{}
	}
	switch {
	case push(k.source) && sr.lastSuccess.IsZero():
		st.State, st.Reason = StateWaiting, "no_spans_yet"
		st.Detail = "no OTLP export has arrived since the collector started"
		st.Fix = "point the app's OTLP/HTTP trace exporter at this collector's /v1/traces and give conntag the tracer provider (conntag.WithTracerProvider)"
		if s.otlpMetrics {
			st.Fix = "point the app's OTLP/HTTP metric exporter at this collector's /v1/metrics (conntag's counters: the app layer's figures) and its trace exporter at /v1/traces (conntag.WithTracerProvider: hold spans name ProxySQL sessions)"
		}
	case push(k.source) && now.Sub(sr.lastSuccess) > PushIdle:
		st.State, st.Reason = StateWaiting, "no_spans_recently"
		st.Detail = fmt.Sprintf("no OTLP export for %.0f s: the app holds no connection, or its exporter fails", now.Sub(sr.lastSuccess).Seconds())
		st.Fix = "if the app is busy, check its OpenTelemetry exporter's errors and that it can reach /v1/traces"
		if s.otlpMetrics {
			st.Detail = fmt.Sprintf("no OTLP export for %.0f s: the app holds no connection, or its exporters fail", now.Sub(sr.lastSuccess).Seconds())
			st.Fix = "check the app's OpenTelemetry exporters' errors and that they can reach /v1/metrics (conntag's counters) and /v1/traces"
		}
	case !sr.up && sr.lastError == "":
		st.State, st.Reason = StateWaiting, "first_poll"
		st.Detail = "no poll has finished yet"
	case !sr.up:
		st.State, st.Reason, st.Detail, st.Fix = StateDown, cmpOr(string(sr.failure), "poll_failed"), sr.lastError, downFix(k.source, sr.failure)
	case len(sr.degraded) > 0:
		st.Up, st.State = true, StateDegraded
		st.Degraded = slices.Clone(sr.degraded)
		st.Reason, st.Detail, st.Fix = sr.degraded[0].Reason, sr.degraded[0].Detail, sr.degraded[0].Fix
	default:
		st.Up, st.State = true, StateUp
	}
	return st
}

// downFix says what to do about a source that is down, by its failure.
func downFix(s Source, f Failure) string {
	k := s.kind()
	if k.fix != "" {
		return k.fix
	}
	what := cmpOr(k.reads, "its DSN")
	switch f {
	case FailureRefused, FailureUnknownHost, FailureNoSocket:
		return "check the address in " + what + ": nothing answers there"
	case FailureNotMySQL:
		return "the address in " + what + " does not speak the MySQL protocol: check the port"
	case FailureAccessDenied:
		return "check the user and password in " + what
	case FailureUnknownDB:
		return "remove the database from " + what + " or create it"
	case FailurePrivilege:
		return cmpOr(k.privilege, "check the privileges of the account in "+what)
	}
	return "the collector retries with backoff; if it lasts, check the network to " + what + " and that it answers"
}

// Sources lists every source and its health, sorted by target and source.
func (c *Collector) Sources() []SourceStatus {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	now := c.st.now()
	out := make([]SourceStatus, 0, len(c.st.series))
	for k, sr := range c.st.series {
		out = append(out, c.st.status(k, sr, now))
	}
	slices.SortFunc(out, func(a, b SourceStatus) int {
		return strings.Compare(a.Target+"/"+string(a.Source), b.Target+"/"+string(b.Source))
	})
	return out
}

// Ready reports whether every polled source has succeeded at least once
// and is up now, and lists those that are not. A push source (OTLP) is
// ready from the start: it waits for the app, which a probe must not
// wait for.
func (c *Collector) Ready() (bool, []string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	var down []string
	for k, sr := range c.st.series {
		if !sr.up && !push(k.source) {
			down = append(down, k.target+"/"+string(k.source))
		}
	}
	slices.Sort(down)
	return len(down) == 0, down
}

// degrade replaces the degradations of (target, source), logging a change.
func (s *store) degrade(target string, source Source, d []Degradation) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.get(target, source)
	if slices.Equal(sr.degraded, d) {
		return false
	}
	sr.degraded = slices.Clone(d)
	return true
}

// markLowerBound notes that the source's statement count lost some now.
func (s *store) markLowerBound(target string, source Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(target, source).lowerBound = s.now()
}
