package analyze

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
)

// Filter selects the holds a report covers. The zero value selects all.
type Filter struct {
	// From and To bound the time window; hold time is clipped to it. A zero
	// value leaves that side open.
	From, To   time.Time
	Tags       []string
	Users      []string
	Hostgroups []int
}

// AnalyzeConfig is what `holdtime analyze` reads and how it reports. The
// zero value reads nothing; set EventsLogs and/or ProcesslistFiles.
type AnalyzeConfig struct {
	EventsLogs       []string // ProxySQL JSON events log files, oldest first
	ProcesslistFiles []string // processlist recordings (see RECORDING.md)
	Filter           Filter
	// LongestHolds is how many of the longest holds to keep per tag and
	// overall. Default 5.
	LongestHolds int
	// MaxTags caps the number of distinct tags; hold time of further tags
	// goes to OverflowTag. Default 1000.
	MaxTags     int
	EventsLog   attrib.EventsLogConfig
	Attributor  attrib.AttributorConfig
	Processlist attrib.ProcesslistConfig
}

// ErrNoInput means there was nothing to analyse.
var ErrNoInput = errors.New("no input: give at least one events log file or processlist recording")

// ErrNothingToReport means the input had nothing the report could show: no
// valid event or sample, or none of the tags, users, hostgroups or time
// window asked for. The error says which.
var ErrNothingToReport = errors.New("nothing to report")

// Analyze reads the configured inputs and returns the per-tag report.
// Partial input (malformed lines, a truncated gzip file) still yields a
// report, with what was skipped in its Sources.
func Analyze(ctx context.Context, cfg AnalyzeConfig) (*Report, error) {
	if len(cfg.EventsLogs) == 0 && len(cfg.ProcesslistFiles) == 0 {
		return nil, ErrNoInput
	}
	agg := NewAggregator(cfg)
	if cfg.Attributor.MaxTags == 0 {
		// Never lump tags the report itself would keep apart.
		cfg.Attributor.MaxTags = max(attrib.DefaultMaxInternedTags, cfg.MaxTags)
	}
	attr := attrib.NewAttributor(cfg.Attributor, agg.AddHold)
	var events *attrib.EventsReader
	if len(cfg.EventsLogs) > 0 {
		events = attrib.OpenEventsLog(ctx, orderByFirstEvent(ctx, cfg.EventsLogs, cfg.EventsLog), cfg.EventsLog)
		defer events.Close()
	}
	var samples *attrib.ProcesslistReader
	var sampler *attrib.SampleAttributor
	if len(cfg.ProcesslistFiles) > 0 {
		var err error
		samples, err = attrib.OpenProcesslist(cfg.ProcesslistFiles)
		if err != nil {
			return nil, err
		}
		defer samples.Close()
		var tagOf func(uint64) (string, bool)
		if events != nil {
			tagOf = attr.TagOf
		}
		sampler = attrib.NewSampleAttributor(cfg.Processlist, tagOf, agg.AddSample)
	}

	// Feed both inputs in time order, so a sample sees the events log's
	// state of its session at the sample time.
	haveEvent := events != nil && events.Next()
	haveRow := samples != nil && samples.Next()
	for haveEvent || haveRow {
		if haveRow && (!haveEvent || samples.Row().SampleTime.UnixMicro() <= events.Event().EndUS) {
			sampler.Add(samples.Row())
			haveRow = samples.Next()
			continue
		}
		attr.Add(events.Event())
		haveEvent = events.Next()
	}
	interrupted := false
	if events != nil {
		if err := events.Err(); err != nil {
			if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
				return nil, err
			}
			// Ctrl-C on an endless input: report what was read, marked.
			interrupted = true
		}
	}
	if samples != nil {
		if err := samples.Err(); err != nil {
			return nil, err
		}
		sampler.Flush()
	}
	attr.Flush()
	var es *attrib.ReadStats
	if events != nil {
		st := events.Stats()
		es = &st
	}
	var ps *attrib.ProcesslistStats
	if samples != nil {
		st := sampler.Stats()
		st.Malformed, st.MalformedLines = samples.Malformed()
		ps = &st
	}
	rep := agg.Report(es, ps)
	if err := agg.nothing(rep, es, ps); err != nil {
		if interrupted {
			return nil, fmt.Errorf("interrupted before any hold was read: %w", ctx.Err())
		}
		return nil, err
	}
	if interrupted {
		rep.Partial = true
		rep.Notes = append([]string{fmt.Sprintf("PARTIAL: interrupted after %d events; the report covers the input read until then", es.Events)}, rep.Notes...)
	}
	return rep, nil
}

// nothing says why rep is empty, or returns nil when it is not.
func (a *Aggregator) nothing(rep *Report, es *attrib.ReadStats, ps *attrib.ProcesslistStats) error {
	var events, rows, malformed int64
	var first string
	if es != nil {
		events, malformed = es.Events, es.Malformed
		if len(es.MalformedLines) > 0 {
			first = es.MalformedLines[0].String()
		}
	}
	if ps != nil {
		rows, malformed = ps.Rows, malformed+ps.Malformed
		if first == "" && len(ps.MalformedLines) > 0 {
			first = ps.MalformedLines[0].String()
		}
	}
	if events == 0 && rows == 0 {
		why := ""
		if malformed > 0 {
			why = fmt.Sprintf(" (%d malformed lines skipped; first: %s): is it ProxySQL's JSON events log (mysql-eventslog_format=2)?", malformed, first)
		}
		return fmt.Errorf("%w: the input has no valid event or sample%s", ErrNothingToReport, why)
	}
	if f := a.cfg.Filter.Tags; len(f) > 0 {
		var missing []string
		for _, tag := range f {
			if rep.Tag(tag) == nil {
				missing = append(missing, tag)
			}
		}
		if len(missing) == len(f) {
			return fmt.Errorf("%w: no hold of tag %s in the input%s (tags seen: %s)", ErrNothingToReport,
				strings.Join(missing, ", "), a.windowText(), a.seenTags(10))
		}
	}
	if len(rep.Tags) == 0 {
		return fmt.Errorf("%w: no hold in the input%s matches the filter (tags seen: %s)", ErrNothingToReport, a.windowText(), a.seenTags(10))
	}
	return nil
}

func (a *Aggregator) windowText() string {
	f := &a.cfg.Filter
	if f.From.IsZero() && f.To.IsZero() {
		return ""
	}
	return " between " + fmtTime(f.From) + " and " + fmtTime(f.To)
}

// seenTags lists up to n tags the input had, before any filter.
func (a *Aggregator) seenTags(n int) string {
	tags := slices.Sorted(maps.Keys(a.seen))
	if len(tags) == 0 {
		return "none"
	}
	if len(tags) > n {
		return strings.Join(tags[:n], ", ") + fmt.Sprintf(" and %d more", len(tags)-n)
	}
	return strings.Join(tags, ", ")
}

// Aggregator sums holds and samples per tag in bounded memory.
type Aggregator struct {
	cfg     AnalyzeConfig
	seen    map[string]struct{} // tags of the input, before the filter (at most MaxTags)
	fromUS  int64
	toUS    int64
	tags    map[string]*tagAgg
	longest []HoldReport
	firstUS int64
	lastUS  int64
}

type tagAgg struct {
	hold, active, idle, pinnedIdle      int64 // microseconds, clipped to the window
	maxUS                               int64 // the longest hold of known length
	holds, txns, stmts, prepares, execs int64
	mixed, truncated                    int64
	pins                                map[string]int64
	reasons                             map[string]int64
	hist                                histogram
	longest                             []HoldReport
	sampled                             SampledReport
	openPins                            []HoldReport // pinned until the session ended
	openPinCount                        int64
}

// NewAggregator returns an empty aggregator for cfg's filter and limits.
func NewAggregator(cfg AnalyzeConfig) *Aggregator {
	if cfg.LongestHolds == 0 {
		cfg.LongestHolds = 5
	}
	if cfg.MaxTags == 0 {
		cfg.MaxTags = 1000
	}
	a := &Aggregator{cfg: cfg, tags: make(map[string]*tagAgg), seen: map[string]struct{}{}, toUS: 1<<63 - 1}
	if !cfg.Filter.From.IsZero() {
		a.fromUS = cfg.Filter.From.UnixMicro()
	}
	if !cfg.Filter.To.IsZero() {
		a.toUS = cfg.Filter.To.UnixMicro()
	}
	return a
}

func (a *Aggregator) tag(name string) *tagAgg {
	t := a.tags[name]
	if t != nil {
		return t
	}
	if len(a.tags) >= a.cfg.MaxTags && name != attrib.UnknownTag && name != attrib.UntaggedTag {
		name = attrib.OverflowTag
		if t = a.tags[name]; t != nil {
			return t
		}
	}
	t = &tagAgg{pins: make(map[string]int64), reasons: make(map[string]int64)}
	a.tags[name] = t
	return t
}

func (a *Aggregator) selected(tag, user string, hostgroup int) bool {
	if _, ok := a.seen[tag]; !ok && len(a.seen) < a.cfg.MaxTags {
		a.seen[tag] = struct{}{}
	}
	f := &a.cfg.Filter
	return (len(f.Tags) == 0 || slices.Contains(f.Tags, tag)) &&
		(len(f.Users) == 0 || slices.Contains(f.Users, user)) &&
		(len(f.Hostgroups) == 0 || slices.Contains(f.Hostgroups, hostgroup))
}

// AddHold adds one hold; it is the Attributor's emit function.
func (a *Aggregator) AddHold(h *attrib.Hold) {
	if !a.selected(h.Tag, h.User, h.Hostgroup) {
		return
	}
	start, end := max(h.StartUS, a.fromUS), min(h.EndUS, a.toUS)
	if end < start || (end == start && (h.StartUS < a.fromUS || h.StartUS >= a.toUS)) {
		return
	}
	if a.firstUS == 0 || start < a.firstUS {
		a.firstUS = start
	}
	a.lastUS = max(a.lastUS, end)
	t := a.tag(h.Tag)
	t.stmts += int64(h.Statements)
	t.prepares += int64(h.Prepares)
	t.execs += int64(h.Executes)
	if h.Kind == attrib.HoldLocal {
		return
	}
	clipped := end - start
	frac := 1.0
	if d := h.DurationUS(); d > 0 {
		frac = float64(clipped) / float64(d)
	}
	active := min(h.ActiveUS, h.DurationUS())
	t.hold += clipped
	t.active += int64(float64(active) * frac)
	t.idle += int64(float64(h.DurationUS()-active) * frac)
	t.pinnedIdle += int64(float64(h.PinnedIdleUS) * frac)
	t.holds++
	if h.Kind == attrib.HoldTransaction {
		t.txns++
	}
	if h.MixedTags {
		t.mixed++
	}
	if h.Truncated {
		t.truncated++
	}
	for _, pin := range attrib.AllPins {
		if h.Pins&pin != 0 {
			t.pins[pin.Name()]++
		}
	}
	if h.UnknownReason != "" {
		t.reasons[h.UnknownReason] += clipped
	}
	d := h.DurationUS()
	if h.EndUnknown {
		// Its length is unknown: not a short hold for the percentiles, a
		// caveat of its own.
		t.openPinCount++
		if len(t.openPins) < a.cfg.LongestHolds {
			t.openPins = append(t.openPins, a.holdReport(h, d, active))
		}
		return
	}
	t.hist.add(d)
	t.maxUS = max(t.maxUS, d)
	if !makesList(t.longest, d, a.cfg.LongestHolds) && !makesList(a.longest, d, a.cfg.LongestHolds) {
		return // most holds: no need to build the report entry
	}
	hr := a.holdReport(h, d, active)
	t.longest = keepLongest(t.longest, hr, a.cfg.LongestHolds)
	a.longest = keepLongest(a.longest, hr, a.cfg.LongestHolds)
}

func (a *Aggregator) holdReport(h *attrib.Hold, d, active int64) HoldReport {
	return HoldReport{
		Tag: h.Tag, SessionID: h.SessionID, Client: h.Client, User: h.User, Hostgroup: h.Hostgroup,
		Kind: h.Kind.String(), Start: time.UnixMicro(h.StartUS).UTC(), Seconds: seconds(d),
		IdleSeconds: seconds(d - active), Statements: h.Statements, Pins: h.Pins.Names(),
		UnknownReason: h.UnknownReason, Truncated: h.Truncated, EndUnknown: h.EndUnknown,
	}
}

// makesList reports whether a hold of durUS would enter a longest list.
func makesList(list []HoldReport, durUS int64, n int) bool {
	return len(list) < n || seconds(durUS) > list[n-1].Seconds
}

// keepLongest inserts h into list, sorted longest first, kept to n entries.
// It allocates only when a hold makes the list.
func keepLongest(list []HoldReport, h HoldReport, n int) []HoldReport {
	if len(list) == n && h.Seconds <= list[n-1].Seconds {
		return list
	}
	i := sort.Search(len(list), func(i int) bool { return list[i].Seconds < h.Seconds })
	if len(list) < n {
		list = append(list, HoldReport{})
	}
	copy(list[i+1:], list[i:])
	list[i] = h
	return list
}

// AddSample adds the hold time one processlist row stands for.
func (a *Aggregator) AddSample(s *attrib.SampledHold) {
	if !a.selected(s.Tag, s.User, s.Hostgroup) {
		return
	}
	at := s.At.UnixMicro()
	if at < a.fromUS || at >= a.toUS {
		return
	}
	t := a.tag(s.Tag)
	sec := s.Seconds
	t.sampled.Seconds += sec
	t.sampled.Rows++
	switch s.TagFrom {
	case attrib.TagFromInfo:
		t.sampled.FromInfo += sec
	case attrib.TagFromEventsLog:
		t.sampled.FromEventsLog += sec
	case attrib.TagFromCarried:
		t.sampled.Carried += sec
	default:
		t.sampled.Unknown += sec
		if s.UnknownReason != "" {
			t.reasons[s.UnknownReason] += int64(sec * 1e6)
		}
	}
	if s.Pinned {
		t.sampled.Pinned += sec
	}
	if s.AutoIncrementDelay {
		t.sampled.AutoIncrementDelay += sec
	}
}

// Report builds the report from what was added.
func (a *Aggregator) Report(events *attrib.ReadStats, samples *attrib.ProcesslistStats) *Report {
	r := &Report{FormatVersion: ReportVersion, Longest: a.longest}
	if a.firstUS != 0 {
		r.From = time.UnixMicro(a.firstUS).UTC()
		r.To = time.UnixMicro(a.lastUS).UTC()
	}
	if !a.cfg.Filter.From.IsZero() {
		r.From = a.cfg.Filter.From.UTC()
	}
	if !a.cfg.Filter.To.IsZero() {
		r.To = a.cfg.Filter.To.UTC()
	}
	if events != nil {
		r.EventsLog = events
	}
	r.Processlist = samples
	useSamples := events == nil
	var total float64
	for name, t := range a.tags {
		tr := TagReport{
			Tag: name, Holds: t.holds, Transactions: t.txns, Statements: t.stmts,
			Prepares: t.prepares, Executes: t.execs,
			HoldSeconds: seconds(t.hold), ActiveSeconds: seconds(t.active), IdleSeconds: seconds(t.idle),
			PinnedIdleSeconds: seconds(t.pinnedIdle), MixedTagHolds: t.mixed, TruncatedHolds: t.truncated,
			// A percentile is its bucket's middle: never more than the
			// longest hold itself.
			P50Seconds: seconds(min(t.hist.quantile(0.5), t.maxUS)), P99Seconds: seconds(min(t.hist.quantile(0.99), t.maxUS)),
			MaxSeconds: seconds(t.maxUS), Longest: t.longest,
			PinnedUntilDisconnect: t.openPinCount, OpenPins: t.openPins,
		}
		if t.hold > 0 {
			tr.IdleShare = float64(t.idle) / float64(t.hold)
		}
		if len(t.pins) > 0 {
			tr.Pins = t.pins
		}
		for reason, us := range t.reasons {
			tr.UnknownReasons = append(tr.UnknownReasons, ReasonSeconds{Reason: reason, Seconds: seconds(us)})
		}
		sort.Slice(tr.UnknownReasons, func(i, j int) bool {
			return tr.UnknownReasons[i].Seconds > tr.UnknownReasons[j].Seconds
		})
		if samples != nil {
			s := t.sampled
			tr.Sampled = &s
			if useSamples {
				tr.HoldSeconds = s.Seconds
			}
		}
		total += tr.HoldSeconds
		r.Tags = append(r.Tags, tr)
	}
	r.TotalHoldSeconds = total
	for i := range r.Tags {
		if total > 0 {
			r.Tags[i].Share = r.Tags[i].HoldSeconds / total
		}
	}
	sort.Slice(r.Tags, func(i, j int) bool {
		if r.Tags[i].HoldSeconds != r.Tags[j].HoldSeconds {
			return r.Tags[i].HoldSeconds > r.Tags[j].HoldSeconds
		}
		return r.Tags[i].Tag < r.Tags[j].Tag
	})
	r.Notes = notes(events, samples)
	return r
}

func notes(events *attrib.ReadStats, samples *attrib.ProcesslistStats) []string {
	var n []string
	if events != nil {
		n = append(n, "events log: exact start and end of every statement; hold = BEGIN start to COMMIT end, or a statement's own duration outside transactions (misses the client<->ProxySQL round trip, so short statements read a few percent low)")
		n = append(n, "auto-increment multiplexing delay: not visible in the events log (it carries no insert id); processlist recordings with extended info show it")
	}
	if samples != nil {
		msg := fmt.Sprintf("processlist samples: %d samples, %.1f s of sampled backend hold", samples.Samples, samples.HeldSeconds)
		if events != nil {
			msg += "; hold seconds come from the events log, samples cross-check them and say where tags came from"
		} else {
			msg += "; hold seconds are estimated from samples (sampling error about ±20% on short transactions)"
		}
		n = append(n, msg)
	}
	return n
}

func seconds(us int64) float64 { return float64(us) / 1e6 }

// orderByFirstEvent sorts events log files by the start of their first
// event, so that rotated files given in any order (a shell glob sorts
// events.json.00000010 before .00000002 only sometimes) are read oldest
// first, as attribution needs. Files whose first event cannot be read go
// last, in the order given, and report their problem when read.
func orderByFirstEvent(ctx context.Context, paths []string, cfg attrib.EventsLogConfig) []string {
	if len(paths) < 2 {
		return paths
	}
	first := make(map[string]int64, len(paths))
	for _, p := range paths {
		r := attrib.OpenEventsLog(ctx, []string{p}, cfg)
		if r.Next() {
			first[p] = r.Event().StartUS
		}
		r.Close()
	}
	out := slices.Clone(paths)
	slices.SortStableFunc(out, func(a, b string) int {
		fa, oka := first[a]
		fb, okb := first[b]
		switch {
		case !oka && !okb:
			return 0
		case !oka:
			return 1
		case !okb:
			return -1
		}
		return cmp.Compare(fa, fb)
	})
	return out
}
