package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/holdtime/holdtime/collector"
)

// `holdtime top --replay DIR` plays a `holdtime collect --record DIR`
// recording back. The recording is read once, through the same attribution
// the collector runs live (the events log's Attributor, the processlist's
// SampleAttributor, the tag of a session idle in a transaction from the
// events log), into per-second figures per target, source and tag: the
// collector's own window resolution. A ranking at any recorded instant is
// then the collector's window arithmetic over those seconds, so the console
// can step, jump and play at any speed, and shows what /api/v1/top said at
// that instant for the layer a recording has (proxy). The MySQL and OTLP
// sources are not recorded.

// replayFigures are one tag's additive figures over one second.
type replayFigures struct{ hold, idle, active, stmts, errors, wait float64 }

func (f *replayFigures) add(g *replayFigures) {
	f.hold += g.hold
	f.idle += g.idle
	f.active += g.active
	f.stmts += g.stmts
	f.errors += g.errors
	f.wait += g.wait
}

type replayKey struct {
	target string
	source collector.Source
}

// replaySeries is what one source of one target credited, by the Unix
// second the live collector would have credited it in.
type replaySeries struct {
	since time.Time // the first sample: when the live source began
	last  time.Time // the last sample
	secs  map[int64]map[string]*replayFigures
	// tags seen, capped at replayMaxTags as the live collector caps them
	// (--max-tags' default): further tags go to collector.OverflowTag,
	// counted in overflowed.
	tags       map[string]bool
	overflowed int
}

// replayMaxTags is the live collector's default --max-tags: a recording
// with more tags is shown as the collector showed it, and its memory stays
// bounded by tags, not by what a hostile or broken recording holds.
const replayMaxTags = 1000

func newReplaySeries() *replaySeries {
	return &replaySeries{secs: map[int64]map[string]*replayFigures{}, tags: map[string]bool{}}
}

func (s *replaySeries) credit(at time.Time, tag string, f replayFigures) {
	if !s.tags[tag] {
		if len(s.tags) >= replayMaxTags {
			tag = collector.OverflowTag
			s.overflowed++
		}
		s.tags[tag] = true
	}
	sec := at.Unix()
	m := s.secs[sec]
	if m == nil {
		m = map[string]*replayFigures{}
		s.secs[sec] = m
	}
	e := m[tag]
	if e == nil {
		e = &replayFigures{}
		m[tag] = e
	}
	e.add(&f)
}

// replayGauge is what one sample of a target showed held now: sessions and
// pinned sessions per tag.
type replayGauge struct {
	at       time.Time
	sessions map[string]int
	pinned   map[string]int
}

// replayRecording is a recording read whole.
type replayRecording struct {
	dir        string
	start, end time.Time
	samples    []time.Time // every sample of every target, in order
	targets    []string
	headline   map[string]collector.Source // per target: events when the recording has its log
	series     map[replayKey]*replaySeries
	gauges     map[string][]replayGauge // per target, in time order
	notes      []string                 // what the reader should know (malformed lines skipped)
}

// errNotRecording says what a recording is and how to make one.
var errNotRecording = errors.New("not a `holdtime collect --record` recording: it has no processlist.tsv " +
	"(DIR/TARGET/processlist.tsv, or DIR/processlist.tsv): record one with holdtime collect --proxysql NAME=DSN --record DIR")

// loadReplay reads the recording at dir: DIR/TARGET/processlist.tsv per
// ProxySQL target (or DIR/processlist.tsv, the target then named after
// DIR), and any events log copied beside it (events*, *.json, *.json.gz),
// which makes that target's proxy figures the events log's, as the
// collector's headline is when it tails one.
func loadReplay(ctx context.Context, dir string) (*replayRecording, error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("--replay %s: no such directory: give the directory `holdtime collect --record` wrote", dir)
	case err != nil:
		return nil, fmt.Errorf("--replay %s: %w: check the path and that this user can read it", dir, err)
	case !st.IsDir():
		return nil, fmt.Errorf("--replay %s: a file, %w", dir, errNotRecording)
	}
	type input struct {
		target      string
		processlist string
		events      []string
	}
	var inputs []input
	addDir := func(d, target string) {
		pl := filepath.Join(d, "processlist.tsv")
		if fi, err := os.Stat(pl); err != nil || fi.IsDir() {
			return
		}
		in := input{target: target, processlist: pl}
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			n := e.Name()
			if !e.IsDir() && (strings.HasPrefix(n, "events") || strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".json.gz")) {
				in.events = append(in.events, filepath.Join(d, n))
			}
		}
		sort.Strings(in.events) // ProxySQL numbers its files: oldest first
		inputs = append(inputs, in)
	}
	addDir(dir, filepath.Base(filepath.Clean(dir)))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("--replay %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			addDir(filepath.Join(dir, e.Name()), e.Name())
		}
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("--replay %s: %w", dir, errNotRecording)
	}
	rec := &replayRecording{dir: dir, headline: map[string]collector.Source{}, series: map[replayKey]*replaySeries{},
		gauges: map[string][]replayGauge{}}
	for _, in := range inputs {
		if err := rec.readTarget(ctx, in.target, in.processlist, in.events); err != nil {
			return nil, err
		}
	}
	if len(rec.samples) == 0 {
		return nil, fmt.Errorf("--replay %s: the recording has no samples (a collector stopped before its first poll?)", dir)
	}
	slices.SortFunc(rec.samples, func(a, b time.Time) int { return a.Compare(b) })
	rec.samples = slices.CompactFunc(rec.samples, func(a, b time.Time) bool { return a.Equal(b) })
	rec.start, rec.end = rec.samples[0], rec.samples[len(rec.samples)-1]
	return rec, nil
}

// readTarget runs one target's samples (and events log) through the
// collector's attribution, sample by sample, as the daemon fed them.
func (rec *replayRecording) readTarget(ctx context.Context, target, processlist string, events []string) error {
	pr, err := collector.OpenProcesslist([]string{processlist})
	if err != nil {
		return fmt.Errorf("--replay: %w", err)
	}
	defer pr.Close()
	rec.targets = append(rec.targets, target)
	pl := newReplaySeries()
	rec.series[replayKey{target, collector.SourceProxySQLProcesslist}] = pl
	rec.headline[target] = collector.SourceProxySQLProcesslist

	var ev *replaySeries
	var attr *collector.Attributor
	var er *collector.EventsReader
	haveEvent := false
	var creditAt time.Time // the sample that reads the holds the log completed
	if len(events) > 0 {
		ev = newReplaySeries()
		rec.series[replayKey{target, collector.SourceProxySQLEvents}] = ev
		rec.headline[target] = collector.SourceProxySQLEvents
		attr = collector.NewAttributor(collector.AttributorConfig{}, func(h *collector.Hold) {
			f := replayFigures{stmts: float64(h.Statements)}
			if h.Kind != collector.HoldLocal {
				dur := float64(h.DurationUS()) / 1e6
				active := float64(min(h.ActiveUS, h.DurationUS())) / 1e6
				f.hold, f.active, f.idle = dur, active, dur-active
			}
			ev.credit(creditAt, h.Tag, f)
		})
		er = collector.OpenEventsLog(ctx, events, collector.EventsLogConfig{})
		defer er.Close()
		haveEvent = er.Next()
	}

	// The live source's gauges: sessions per tag of the sample just
	// credited; pinned ones among them. Waits are the wait of whatever the
	// session ran next, as the live source names them.
	var gauge *replayGauge
	waits := map[int64]float64{}
	var tagOf func(uint64) (string, bool)
	if attr != nil {
		tagOf = attr.TagOf
	}
	sampler := collector.NewSampleAttributor(collector.ProcesslistConfig{}, tagOf, func(h *collector.SampledHold) {
		if h.Waiting {
			waits[h.SessionID] += h.Seconds
			return
		}
		f := replayFigures{hold: h.Seconds}
		if h.Pinned {
			f.idle = h.Seconds
		} else {
			f.active = h.Seconds
		}
		if w := waits[h.SessionID]; w > 0 && h.Tag != collector.UnknownTag {
			f.wait = w
			delete(waits, h.SessionID)
		}
		pl.credit(creditAt, h.Tag, f)
		gauge.sessions[h.Tag]++
		if h.Pinned {
			gauge.pinned[h.Tag]++
		}
	})

	var first time.Time
	var rows []collector.ProcesslistRow
	var at time.Time
	sample := func() {
		if first.IsZero() {
			first, pl.since = at, at
			if ev != nil {
				ev.since = at
			}
		}
		creditAt = at
		// Events the log completed by this sample are read with it; those
		// from before the recording began belong to another run.
		for haveEvent && er.Event().EndUS <= at.UnixMicro() {
			// The live collector tails the log from its end when it starts:
			// a hold begun before the first sample is not its.
			if er.Event().StartUS >= first.UnixMicro() {
				attr.Add(er.Event())
			}
			haveEvent = er.Next()
		}
		rec.gauges[target] = append(rec.gauges[target], replayGauge{at: at, sessions: map[string]int{}, pinned: map[string]int{}})
		gauge = &rec.gauges[target][len(rec.gauges[target])-1]
		sampler.Sample(at) // credits the sample before through the callback
		for i := range rows {
			sampler.Add(&rows[i])
		}
		rec.samples = append(rec.samples, at)
		pl.last = at
		if ev != nil {
			ev.last = at
		}
		rows = rows[:0]
	}
	backwards := 0
	for pr.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := *pr.Row()
		if !at.IsZero() && r.SampleTime.Before(at) {
			backwards++ // the collector writes samples in time order: not one of its
			continue
		}
		if !r.SampleTime.Equal(at) && !at.IsZero() {
			sample()
		}
		at = r.SampleTime
		rows = append(rows, r)
	}
	if err := pr.Err(); err != nil {
		return fmt.Errorf("--replay: %s: %w", processlist, err)
	}
	if at.IsZero() {
		return nil // no rows: no samples from this target
	}
	sample()
	if backwards > 0 {
		rec.notes = append(rec.notes, fmt.Sprintf("%s: %d rows dated before the sample they follow skipped", processlist, backwards))
	}
	for _, s := range []*replaySeries{pl, ev} {
		if s != nil && s.overflowed > 0 {
			rec.notes = append(rec.notes, fmt.Sprintf("%s: more than %d tags: %d credits of further tags shown as %s, as the collector would",
				target, replayMaxTags, s.overflowed, collector.OverflowTag))
		}
	}
	if n, lines := pr.Malformed(); n > 0 {
		where := ""
		if len(lines) > 0 {
			where = " (first: " + lines[0].String() + ")"
		}
		rec.notes = append(rec.notes, fmt.Sprintf("%s: %d malformed lines skipped%s", processlist, n, where))
	}
	if er != nil {
		if err := er.Err(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("--replay: events log of %s: %w", target, err)
		}
	}
	return nil
}

// replayWindow is the span of window w before now the live store sums: its
// 1 s buckets for the 10 s window, its 5 s buckets for longer ones.
func replayWindow(now time.Time, w time.Duration) (oldest, newest int64, span float64) {
	nowSec := now.Unix()
	if w <= 10*time.Second {
		oldest = nowSec - int64(w/time.Second) + 1
	} else {
		cur := nowSec - nowSec%5
		oldest = cur - int64(w/time.Second) + 5
	}
	return oldest, nowSec, now.Sub(time.Unix(oldest, 0)).Seconds()
}

// roundReplayWindow rounds as the collector does: to the nearest of 10s,
// 1m and 5m.
func roundReplayWindow(w time.Duration) time.Duration {
	switch {
	case w <= 0:
		return time.Minute
	case w < 35*time.Second:
		return 10 * time.Second
	case w < 3*time.Minute:
		return time.Minute
	}
	return 5 * time.Minute
}

// topAt answers q as the live collector's /api/v1/top would have at the
// instant now of the recording.
func (rec *replayRecording) topAt(now time.Time, q collector.TopQuery) collector.TopResponse {
	w := roundReplayWindow(q.Window)
	oldest, newest, span := replayWindow(now, w)
	layer := cmp.Or(q.Layer, collector.LayerMax)
	sortKey := cmp.Or(q.Sort, "occupancy")
	resp := collector.TopResponse{Window: windowName(w), Sort: sortKey, Layer: layer, At: now.UTC(),
		Layers: map[collector.Layer]*collector.LayerStatus{}}
	cov := func(since time.Time) float64 {
		if since.IsZero() || now.Before(since) {
			return 0
		}
		return max(min(span, now.Sub(since).Seconds()), 0)
	}
	rows := map[string]*collector.TopRow{}
	row := func(tag string) *collector.TopRow {
		r := rows[tag]
		if r == nil {
			r = &collector.TopRow{Tag: tag, Layers: map[collector.Layer]*collector.LayerFigures{}, Sources: map[collector.Source]*collector.SourceFigures{}}
			rows[tag] = r
		}
		return r
	}
	// The proxy layer: every target's headline, summed over targets.
	var layerSince time.Time
	proxy := &collector.LayerStatus{}
	for _, t := range rec.targets {
		proxy.Headlines = append(proxy.Headlines, collector.TargetSource{Target: t, Source: rec.headline[t]})
		if s := rec.series[replayKey{t, rec.headline[t]}]; s != nil && !now.Before(s.since) {
			if layerSince.IsZero() || s.since.Before(layerSince) {
				layerSince = s.since
			}
		}
	}
	proxy.CoveredSeconds = cov(layerSince)
	resp.Layers[collector.LayerProxy] = proxy
	resp.CoveredSeconds = proxy.CoveredSeconds
	gauges := map[string]*replayGauge{}
	for _, t := range rec.targets {
		gs := rec.gauges[t]
		i := sort.Search(len(gs), func(i int) bool { return gs[i].at.After(now) })
		if i > 0 {
			gauges[t] = &gs[i-1]
		}
	}
	keys := slices.SortedFunc(func(yield func(replayKey) bool) {
		for k := range rec.series {
			if !yield(k) {
				return
			}
		}
	}, func(a, b replayKey) int {
		return cmp.Or(strings.Compare(a.target, b.target), strings.Compare(string(a.source), string(b.source)))
	})
	for _, k := range keys {
		s := rec.series[k]
		if now.Before(s.since) {
			continue
		}
		sums := map[string]*replayFigures{}
		for sec := oldest; sec <= newest; sec++ {
			for tag, f := range s.secs[sec] {
				sum := sums[tag]
				if sum == nil {
					sum = &replayFigures{}
					sums[tag] = sum
				}
				sum.add(f)
			}
		}
		var g *replayGauge
		if k.source == collector.SourceProxySQLProcesslist {
			g = gauges[k.target]
			if g != nil {
				for tag, n := range g.sessions {
					if n > 0 && sums[tag] == nil {
						sums[tag] = &replayFigures{}
					}
				}
			}
		}
		c := cov(s.since)
		headline := rec.headline[k.target] == k.source
		for tag, sum := range sums {
			sessions, pinned := 0, 0
			if g != nil {
				sessions, pinned = g.sessions[tag], g.pinned[tag]
			}
			if *sum == (replayFigures{}) && sessions == 0 {
				continue
			}
			r := row(tag)
			sf := r.Sources[k.source]
			if sf == nil {
				sf = &collector.SourceFigures{}
				r.Sources[k.source] = sf
			}
			sf.HoldSeconds += sum.hold
			sf.IdleHoldSeconds += sum.idle
			sf.ActiveSeconds += sum.active
			sf.Statements += sum.stmts
			sf.Errors += sum.errors
			sf.WaitSeconds += sum.wait
			sf.Occupancy += sum.hold / max(c, 1e-3)
			sf.Sessions += sessions
			sf.PinnedSessions += pinned
			sf.CoveredSeconds = max(sf.CoveredSeconds, c)
			sf.Targets = append(sf.Targets, k.target)
			if !headline || *sum == (replayFigures{}) {
				continue
			}
			lf := r.Layers[collector.LayerProxy]
			if lf == nil {
				lf = &collector.LayerFigures{Source: k.source}
				r.Layers[collector.LayerProxy] = lf
			} else if lf.Source != k.source {
				lf.Source = "mixed"
			}
			lf.HoldSeconds += sum.hold
			lf.IdleHoldSeconds += sum.idle
			lf.ActiveSeconds += sum.active
			lf.Statements += sum.stmts
			lf.Errors += sum.errors
			lf.WaitSeconds += sum.wait
			lf.Targets = append(lf.Targets, k.target)
		}
	}
	// Sessions and pins now are the processlist's, whatever the headline.
	for t, g := range gauges {
		for tag, n := range g.sessions {
			if n == 0 {
				continue
			}
			r := row(tag)
			lf := r.Layers[collector.LayerProxy]
			if lf == nil {
				lf = &collector.LayerFigures{Source: rec.headline[t]}
				r.Layers[collector.LayerProxy] = lf
			}
			lf.Sessions += n
			lf.PinnedSessions += g.pinned[tag]
		}
	}
	for _, r := range rows {
		if lf := r.Layers[collector.LayerProxy]; lf != nil {
			lf.CoveredSeconds = proxy.CoveredSeconds
			lf.Occupancy = lf.HoldSeconds / max(lf.CoveredSeconds, 1e-3)
			lf.StatementsPerSecond = lf.Statements / max(lf.CoveredSeconds, 1e-3)
			if lf.HoldSeconds > 0 {
				lf.IdleShare = lf.IdleHoldSeconds / lf.HoldSeconds
			}
			sort.Strings(lf.Targets)
			lf.Targets = slices.Compact(lf.Targets)
		}
		for _, sf := range r.Sources {
			sort.Strings(sf.Targets)
		}
		if q.Filter != "" && !strings.Contains(r.Tag, q.Filter) {
			continue
		}
		// Only the proxy layer is recorded: it is every tag's largest.
		lf := r.Layers[collector.LayerProxy]
		if lf == nil || (layer != collector.LayerMax && layer != string(collector.LayerProxy)) {
			continue
		}
		r.Layer = collector.LayerProxy
		r.Occupancy, r.IdleShare, r.HoldSeconds, r.IdleHoldSeconds = lf.Occupancy, lf.IdleShare, lf.HoldSeconds, lf.IdleHoldSeconds
		r.ActiveSeconds, r.Statements, r.StatementsPerSecond, r.Errors = lf.ActiveSeconds, lf.Statements, lf.StatementsPerSecond, lf.Errors
		r.WaitSeconds, r.Sessions, r.PinnedSessions, r.Source = lf.WaitSeconds, lf.Sessions, lf.PinnedSessions, lf.Source
		resp.Rows = append(resp.Rows, *r)
	}
	collector.SortTop(resp.Rows, sortKey)
	if q.Limit > 0 && len(resp.Rows) > q.Limit {
		resp.Rows = resp.Rows[:q.Limit]
	}
	resp.Sources = rec.sourcesAt(now)
	return resp
}

// sourcesAt is every recorded source's state at now: up from its first
// sample to its last, waiting before, DOWN after (the recording stopped).
func (rec *replayRecording) sourcesAt(now time.Time) []collector.SourceStatus {
	var out []collector.SourceStatus
	for _, t := range rec.targets {
		for _, src := range []collector.Source{collector.SourceProxySQLEvents, collector.SourceProxySQLProcesslist} {
			s := rec.series[replayKey{t, src}]
			if s == nil {
				continue
			}
			st := collector.SourceStatus{Target: t, Source: src, Layer: collector.LayerProxy, Headline: rec.headline[t] == src}
			switch {
			case now.Before(s.since):
				st.State, st.Reason = collector.StateWaiting, "not recorded yet"
			case now.Sub(s.last) > 2*time.Second:
				st.State, st.Reason = collector.StateDown, "the recording of this target ended"
				st.LastSuccess = s.last
			default:
				st.Up, st.State = true, collector.StateUp
				st.LastSuccess = now
			}
			out = append(out, st)
		}
	}
	return out
}

func windowName(w time.Duration) string {
	switch w {
	case 10 * time.Second:
		return "10s"
	case 5 * time.Minute:
		return "5m"
	}
	return "1m"
}

// replaySpeeds are the playback speeds + and - step through.
var replaySpeeds = []int{1, 4, 16, 64}

// replayPlayer is the playback clock: where in the recording the console
// is, and how fast it moves. Safe for concurrent use (the console reads it
// from its fetch goroutine).
type replayPlayer struct {
	rec   *replayRecording
	mu    sync.Mutex
	at    time.Time
	speed int
}

func newReplayPlayer(rec *replayRecording) *replayPlayer {
	return &replayPlayer{rec: rec, at: rec.start, speed: 1}
}

func (p *replayPlayer) now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at
}

// seek moves to t, kept within the recording; it reports whether the end
// was reached.
func (p *replayPlayer) seek(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case t.Before(p.rec.start):
		t = p.rec.start
	case !t.Before(p.rec.end):
		t = p.rec.end
	}
	p.at = t
	return t.Equal(p.rec.end)
}

// advance moves d of real time forward at the player's speed.
func (p *replayPlayer) advance(d time.Duration) bool {
	return p.seek(p.now().Add(d * time.Duration(p.speedNow())))
}

func (p *replayPlayer) step(d time.Duration) bool { return p.seek(p.now().Add(d)) }

func (p *replayPlayer) speedNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.speed
}

// faster and slower step through replaySpeeds.
func (p *replayPlayer) faster(up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(replaySpeeds, p.speed)
	if up {
		i = min(i+1, len(replaySpeeds)-1)
	} else {
		i = max(i-1, 0)
	}
	p.speed = replaySpeeds[i]
}

func (p *replayPlayer) top(_ context.Context, q collector.TopQuery) (collector.TopResponse, error) {
	return p.rec.topAt(p.now(), q), nil
}

// parseReplayTime reads a time in the recording: an offset from its start
// (+90s, +1m30s), a clock time on the recording's day (15:04:05, with
// fractions; the recording's zone, shown in the console, is local time),
// or an RFC 3339 time.
func (rec *replayRecording) parseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "+"); ok {
		d, err := time.ParseDuration(rest)
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("%q: an offset from the recording's start is +DURATION, such as +90s or +1m30s", s)
		}
		return rec.start.Add(d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"15:04:05.999999999", "15:04:05", "15:04"} {
		c, err := time.ParseInLocation(layout, s, time.Local)
		if err != nil {
			continue
		}
		// On the day of the recording (its start's, else its end's, for a
		// recording across midnight).
		for _, day := range []time.Time{rec.start.Local(), rec.end.Local()} {
			t := time.Date(day.Year(), day.Month(), day.Day(), c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), time.Local)
			if !t.Before(rec.start.Truncate(time.Second)) && !t.After(rec.end) {
				return t, nil
			}
		}
		d := rec.start.Local()
		return time.Date(d.Year(), d.Month(), d.Day(), c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), time.Local), nil
	}
	return time.Time{}, fmt.Errorf("%q: give a time as 15:04:05 (the recording's day, local time), an RFC 3339 time, or +DURATION from the start", s)
}

// describeAt says where in the recording t is: clock time, offset and
// length.
func (rec *replayRecording) describeAt(t time.Time) string {
	return fmt.Sprintf("%s (+%s of %s)", t.Local().Format("2006-01-02 15:04:05.0"), shortDuration(t.Sub(rec.start)),
		shortDuration(rec.end.Sub(rec.start)))
}

func shortDuration(d time.Duration) string {
	return d.Round(100 * time.Millisecond).String()
}

// runReplay plays the recording at t.replayDir back: in the console on a
// terminal, else as tables (one at --at, or one every --interval of the
// recording).
func (t *topCmd) runReplay(ctx context.Context) error {
	rec, err := loadReplay(ctx, t.replayDir)
	if err != nil {
		return err
	}
	t.replay = newReplayPlayer(rec)
	if t.at != "" {
		at, err := rec.parseTime(t.at)
		if err != nil {
			return fmt.Errorf("--at %w", err)
		}
		if at.Before(rec.start.Truncate(time.Second)) || at.After(rec.end.Add(time.Second)) {
			return fmt.Errorf("--at %s is outside the recording, which runs from %s to %s", t.at,
				rec.start.Local().Format("2006-01-02 15:04:05.0"), rec.end.Local().Format("15:04:05.0"))
		}
		t.replay.seek(at)
		t.replayPaused = true // the instant asked for stays on screen
	}
	term := isTerminal(t.out)
	color := t.color == "always" || t.color == "auto" && term
	if term && !t.once && !t.jsonOut {
		if f, ok := t.in.(*os.File); ok && isTerminal(f) {
			return t.runInteractive(ctx, t.replay, "recording", f, color)
		}
	}
	for _, n := range rec.notes {
		fmt.Fprintln(t.out, "# "+n)
	}
	print := func() error {
		resp, _ := t.replay.top(ctx, t.query())
		var b strings.Builder
		if t.jsonOut {
			resp.Rows = t.arrange(resp.Rows)
			resp.Window, resp.Sort = t.window, t.sortKey
			doc, err := json.Marshal(resp)
			if err != nil {
				return err
			}
			b.Write(append(doc, '\n'))
		} else {
			t.render(&b, resp, 0, color, false)
			b.WriteString("\n")
		}
		_, err := io.WriteString(t.out, b.String())
		return err
	}
	if t.once || t.at != "" {
		if t.at == "" {
			t.replay.seek(rec.end)
		}
		return print()
	}
	for at := rec.start; ; at = rec.nextPrint(at, t.interval) {
		if err := ctx.Err(); err != nil {
			return nil // Ctrl-C: what was printed stands
		}
		end := t.replay.seek(at)
		if err := print(); err != nil {
			return err
		}
		if end {
			return nil
		}
	}
}

// replayMaxGap is the longest stretch without samples a printed replay
// steps through interval by interval; past it (the collector was stopped,
// or a sample is misdated) it goes on at the next sample, so a gap of
// days is not printed a table per second.
const replayMaxGap = 5 * time.Minute

// nextPrint is the instant after at that a printed replay shows next.
func (rec *replayRecording) nextPrint(at time.Time, interval time.Duration) time.Time {
	next := at.Add(interval)
	i, _ := slices.BinarySearchFunc(rec.samples, next, func(s, t time.Time) int { return s.Compare(t) })
	if i < len(rec.samples) && rec.samples[i].Sub(next) > replayMaxGap {
		return rec.samples[i]
	}
	return next
}
