package collector

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Layer names where a connection is held. Each layer is a different scarce
// resource, so a tag has one figure per layer and figures never travel
// between layers:
//
//   - app: a client pool connection borrowed from database/sql (conntag's
//     hold spans, source otlp);
//   - proxy: a ProxySQL backend connection bound to a client session
//     (proxysql_events when an events log is configured, else
//     proxysql_processlist; proxysql_digest is a cross-check);
//   - server: a MySQL server connection busy in a statement or an open
//     transaction (source mysql).
type Layer string

// The layers, in the order views show them.
const (
	LayerApp    Layer = "app"
	LayerProxy  Layer = "proxy"
	LayerServer Layer = "server"
)

// Layers lists every layer in display order.
var Layers = []Layer{LayerApp, LayerProxy, LayerServer}

// LayerMax is the ranking TopQuery.Layer defaults to: each tag ranked by
// the layer where its occupancy is largest, so a hog is first wherever it
// holds.
const LayerMax = "max"

// TopLayers are the values /api/v1/top?layer= and TopQuery.Layer accept.
var TopLayers = []string{string(LayerApp), string(LayerProxy), string(LayerServer), LayerMax}

type targetLayer struct {
	target string
	layer  Layer
}

// setHeadline makes source the headline of (target, its layer) and
// registers it.
func (s *store) setHeadline(target string, source Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.headline[targetLayer{target, source.Layer()}] = source
	s.get(target, source)
}

// setJoinOnly registers a source that exports no figures
// (MySQLConfig.JoinOnly): never a headline, in no layer.
func (s *store) setJoinOnly(target string, source Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(target, source).joinOnly = true
}

// isHeadline reports whether (target, source) is its layer's headline.
// Callers hold mu.
func (s *store) isHeadline(k seriesKey) bool {
	l := k.source.Layer()
	return l != "" && s.headline[targetLayer{k.target, l}] == k.source
}

// Windows that Top accepts.
var topWindows = map[string]time.Duration{"10s": 10 * time.Second, "1m": time.Minute, "5m": 5 * time.Minute}

// TopRow is one tag in the ranking: the figures of the layer the ranking
// used (Layer) at the top level, every layer's figures in Layers, and every
// source's in Sources (cross-checks: sources of one layer are never added).
type TopRow struct {
	Tag string `json:"tag"`
	// Layer is the layer whose figures the fields below are: the one the
	// caller ranked by, or with LayerMax the tag's largest.
	Layer Layer `json:"layer"`
	// Occupancy is hold-seconds per second: the average number of
	// connections the tag kept busy over the covered span.
	Occupancy           float64 `json:"occupancy"`
	IdleShare           float64 `json:"idle_share"`
	HoldSeconds         float64 `json:"hold_seconds"`
	IdleHoldSeconds     float64 `json:"idle_hold_seconds"`
	ActiveSeconds       float64 `json:"active_seconds"`
	Statements          float64 `json:"statements"`
	StatementsPerSecond float64 `json:"statements_per_second"`
	Errors              float64 `json:"errors"`
	// WaitSeconds is the time the tag's statements waited for a
	// connection (proxy: for a ProxySQL backend): what the tag suffers,
	// beside what it holds.
	WaitSeconds    float64 `json:"wait_seconds"`
	Sessions       int     `json:"sessions"`
	PinnedSessions int     `json:"pinned_sessions"`
	// Source is where the figures above come from.
	Source Source `json:"source"`
	// Stale is set when a target of Source is down: the figures are what
	// it reported before it went down.
	Stale bool `json:"stale"`
	// StatementsLowerBound is set when the source lost statements in the
	// window (it could not keep up): Statements is a lower bound.
	StatementsLowerBound bool `json:"statements_lower_bound,omitempty"`
	// Layers has a key per layer that saw the tag; an absent layer is
	// absent, never zeros.
	Layers  map[Layer]*LayerFigures   `json:"layers"`
	Sources map[Source]*SourceFigures `json:"sources"`
}

// LayerFigures are one layer's figures for a tag: its headline source's,
// summed over the layer's targets (two ProxySQL instances are two pools).
type LayerFigures struct {
	Occupancy            float64  `json:"occupancy"`
	IdleShare            float64  `json:"idle_share"`
	HoldSeconds          float64  `json:"hold_seconds"`
	IdleHoldSeconds      float64  `json:"idle_hold_seconds"`
	ActiveSeconds        float64  `json:"active_seconds"`
	Statements           float64  `json:"statements"`
	StatementsPerSecond  float64  `json:"statements_per_second"`
	Errors               float64  `json:"errors"`
	WaitSeconds          float64  `json:"wait_seconds"`
	Sessions             int      `json:"sessions"`
	PinnedSessions       int      `json:"pinned_sessions"`
	Source               Source   `json:"source"`
	Targets              []string `json:"targets"`
	Stale                bool     `json:"stale"`
	StatementsLowerBound bool     `json:"statements_lower_bound,omitempty"`
	// CoveredSeconds is the span Occupancy and StatementsPerSecond divide
	// by: the window, or less while the layer's sources have been running
	// for less than the window.
	CoveredSeconds float64 `json:"covered_seconds"`
}

// SourceFigures are one source's figures for a tag in a TopRow, summed over
// the source's targets.
type SourceFigures struct {
	Occupancy            float64  `json:"occupancy"`
	HoldSeconds          float64  `json:"hold_seconds"`
	IdleHoldSeconds      float64  `json:"idle_hold_seconds"`
	ActiveSeconds        float64  `json:"active_seconds"`
	Statements           float64  `json:"statements"`
	Errors               float64  `json:"errors"`
	WaitSeconds          float64  `json:"wait_seconds"`
	Sessions             int      `json:"sessions"`
	PinnedSessions       int      `json:"pinned_sessions"`
	Targets              []string `json:"targets"`
	Stale                bool     `json:"stale,omitempty"`
	StatementsLowerBound bool     `json:"statements_lower_bound,omitempty"`
	CoveredSeconds       float64  `json:"covered_seconds"`
}

// TopQuery selects and orders a ranking. The zero value is the default:
// the 1m window, every tag ranked by its largest layer, by occupancy.
type TopQuery struct {
	// Window is 10s, 1m or 5m; others are rounded to the nearest of these.
	// Default 1m.
	Window time.Duration
	// Layer is app, proxy, server or max (default): the layer whose figures
	// rank the rows and fill TopRow's top-level fields. With a layer named,
	// tags that layer did not see are left out; a tag seen only by a
	// cross-check source (digests, or the processlist of a target whose
	// headline is its events log) is in no layer ranking: Source shows it.
	Layer string
	// Source, when set, ranks by that one source's figures instead (a
	// cross-check); tags it did not see are left out.
	Source Source
	// Sort is one of TopSortKeys. Default occupancy.
	Sort string
	// Filter keeps the tags containing it.
	Filter string
	// Limit keeps the first Limit rows; 0 keeps all.
	Limit int
}

// TopResponse is a ranking with what a reader needs to trust it: the span
// the figures cover, each layer's headline sources, and every source's
// health. It is the body of GET /api/v1/top.
type TopResponse struct {
	Window string    `json:"window"`
	Sort   string    `json:"sort"`
	Layer  string    `json:"layer"` // the ranking asked for: app, proxy, server or max
	At     time.Time `json:"at"`
	// CoveredSeconds is the longest span any layer's figures cover (the
	// window once the collector has run that long); Layers has each
	// layer's.
	CoveredSeconds float64                `json:"covered_seconds"`
	Layers         map[Layer]*LayerStatus `json:"layers"`
	Rows           []TopRow               `json:"rows"`
	Sources        []SourceStatus         `json:"sources"`
}

// LayerStatus says where a layer's figures come from.
type LayerStatus struct {
	CoveredSeconds float64 `json:"covered_seconds"`
	// Headlines lists the headline source of each target of the layer.
	Headlines []TargetSource `json:"headlines"`
}

// TargetSource is a source of one target.
type TargetSource struct {
	Target string `json:"target"`
	Source Source `json:"source"`
}

// ErrBadTopQuery wraps the errors of a TopQuery that cannot be answered.
var ErrBadTopQuery = errors.New("bad top query")

// Top ranks tags over window (10s, 1m or 5m; others are rounded to the
// nearest of these), each by the layer where it holds most.
func (c *Collector) Top(window time.Duration) []TopRow {
	r, _ := c.TopReport(TopQuery{Window: window})
	return r.Rows
}

// TopReport answers q: the ranking, the span it covers, the headline of
// each layer, and the health of every source.
func (c *Collector) TopReport(q TopQuery) (TopResponse, error) {
	q.Layer = cmp.Or(q.Layer, LayerMax)
	q.Sort = cmp.Or(q.Sort, "occupancy")
	if !slices.Contains(TopLayers, q.Layer) {
		return TopResponse{}, fmt.Errorf("%w: layer %q: use one of %s", ErrBadTopQuery, q.Layer, strings.Join(TopLayers, ", "))
	}
	if !slices.Contains(TopSortKeys, q.Sort) {
		return TopResponse{}, fmt.Errorf("%w: sort %q: use one of %s", ErrBadTopQuery, q.Sort, strings.Join(TopSortKeys, ", "))
	}
	if q.Source != "" && q.Source.Layer() == "" {
		return TopResponse{}, fmt.Errorf("%w: source %q has no per-tag figures: use one of %s", ErrBadTopQuery, q.Source, strings.Join(tagSources(), ", "))
	}
	if q.Limit < 0 {
		return TopResponse{}, fmt.Errorf("%w: limit %d is negative", ErrBadTopQuery, q.Limit)
	}
	w := roundWindow(cmp.Or(q.Window, time.Minute))
	rows, layers := c.st.top(w)
	resp := TopResponse{Window: windowName(w), Sort: q.Sort, Layer: q.Layer, At: c.st.now().UTC(),
		Layers: layers, Rows: rank(rows, q), Sources: c.Sources()}
	for _, l := range layers {
		resp.CoveredSeconds = max(resp.CoveredSeconds, l.CoveredSeconds)
	}
	return resp, nil
}

// rank picks each row's figures for q, drops the rows q does not select,
// sorts and cuts them. q is valid and has its defaults.
func rank(rows []TopRow, q TopQuery) []TopRow {
	out := rows[:0]
	for _, r := range rows {
		if q.Filter != "" && !strings.Contains(r.Tag, q.Filter) {
			continue
		}
		if !r.pick(Layer(cmp.Or(q.Layer, LayerMax)), q.Source) {
			continue
		}
		out = append(out, r)
	}
	sortTop(out, cmp.Or(q.Sort, "occupancy"))
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out
}

func windowName(w time.Duration) string {
	for name, d := range topWindows {
		if d == w {
			return name
		}
	}
	return w.String()
}

// pick fills the row's top-level fields from layer l (LayerMax: the largest
// occupancy; ties go to the first in Layers) or, with src set, from that
// source. It reports false when the row has no such figures.
func (r *TopRow) pick(l Layer, src Source) bool {
	if src != "" {
		sf := r.Sources[src]
		if sf == nil {
			return false
		}
		r.Layer, r.Source = src.Layer(), src
		r.set(&LayerFigures{Occupancy: sf.Occupancy, HoldSeconds: sf.HoldSeconds, IdleHoldSeconds: sf.IdleHoldSeconds,
			ActiveSeconds: sf.ActiveSeconds, Statements: sf.Statements, Errors: sf.Errors, WaitSeconds: sf.WaitSeconds, Sessions: sf.Sessions,
			PinnedSessions: sf.PinnedSessions, Source: src, Stale: sf.Stale, StatementsLowerBound: sf.StatementsLowerBound,
			IdleShare: share(sf.IdleHoldSeconds, sf.HoldSeconds), StatementsPerSecond: sf.Statements / divisor(sf.CoveredSeconds)})
		return true
	}
	if l == LayerMax {
		for _, cand := range Layers {
			if lf := r.Layers[cand]; lf != nil && (l == LayerMax || lf.Occupancy > r.Layers[l].Occupancy) {
				l = cand
			}
		}
	}
	lf := r.Layers[l]
	if lf == nil {
		return false
	}
	r.Layer = l
	r.set(lf)
	return true
}

func (r *TopRow) set(lf *LayerFigures) {
	r.Occupancy, r.IdleShare, r.HoldSeconds, r.IdleHoldSeconds = lf.Occupancy, lf.IdleShare, lf.HoldSeconds, lf.IdleHoldSeconds
	r.ActiveSeconds, r.Statements, r.StatementsPerSecond, r.Errors = lf.ActiveSeconds, lf.Statements, lf.StatementsPerSecond, lf.Errors
	r.WaitSeconds = lf.WaitSeconds
	r.Sessions, r.PinnedSessions, r.Source, r.Stale = lf.Sessions, lf.PinnedSessions, lf.Source, lf.Stale
	r.StatementsLowerBound = lf.StatementsLowerBound
}

func share(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return part / whole
}

// divisor is a covered span to divide by: never zero.
func divisor(covered float64) float64 { return max(covered, 1e-3) }

// covered is the span of window w before now that a source running since
// `since` has figures for: the window's buckets, cut to the source's life.
func covered(now, since time.Time, windowSpan float64) float64 {
	if since.IsZero() {
		return 0
	}
	return max(min(windowSpan, now.Sub(since).Seconds()), 0)
}

// top builds every tag's row over window w, with every layer's and
// source's figures and no top-level figures yet (pick chooses them), and
// the status of every layer.
func (s *store) top(w time.Duration) ([]TopRow, map[Layer]*LayerStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &topBuilder{s: s, now: s.now(), w: w, rows: map[string]*TopRow{}}
	b.layerStatus()
	for k, sr := range s.series {
		sr.expire(b.now.Unix()) // as a scrape does: what /metrics shows, top ranks
		if l := k.source.Layer(); l != "" {
			b.addSeries(k, l, sr)
		}
	}
	if b.winSpan == 0 {
		_, b.winSpan = (&entry{}).window(b.now, w)
	}
	for l, ls := range b.layers {
		ls.CoveredSeconds = covered(b.now, b.layerSince[l], b.winSpan)
		sort.Slice(ls.Headlines, func(i, j int) bool { return ls.Headlines[i].Target < ls.Headlines[j].Target })
	}
	b.addGauges()
	return b.finish(), b.layers
}

// topBuilder is one top call's rows in the making. Its methods run under
// the store's lock.
type topBuilder struct {
	s          *store
	now        time.Time
	w          time.Duration
	rows       map[string]*TopRow
	layers     map[Layer]*LayerStatus
	layerSince map[Layer]time.Time
	winSpan    float64 // seconds the window's buckets cover
}

func (b *topBuilder) row(tag string) *TopRow {
	r := b.rows[tag]
	if r == nil {
		r = &TopRow{Tag: tag, Layers: map[Layer]*LayerFigures{}, Sources: map[Source]*SourceFigures{}}
		b.rows[tag] = r
	}
	return r
}

// layerStatus lists each layer's headlines and the covered span of each
// layer: the earliest start among its headline series, the window's
// buckets at most.
func (b *topBuilder) layerStatus() {
	s := b.s
	b.layers, b.layerSince = map[Layer]*LayerStatus{}, map[Layer]time.Time{}
	for tl, src := range s.headline {
		ls := b.layers[tl.layer]
		if ls == nil {
			ls = &LayerStatus{}
			b.layers[tl.layer] = ls
		}
		ls.Headlines = append(ls.Headlines, TargetSource{Target: tl.target, Source: src})
		if sr := s.series[seriesKey{tl.target, src}]; sr != nil {
			since := cmp.Or(sr.since, s.started)
			if t := b.layerSince[tl.layer]; t.IsZero() || since.Before(t) {
				b.layerSince[tl.layer] = since
			}
		}
	}
}

// addSeries adds one series' window to its tags' source figures and, for a
// headline series, to their layer figures.
func (b *topBuilder) addSeries(k seriesKey, l Layer, sr *series) {
	headline := b.s.isHeadline(k)
	for tag, e := range sr.tags {
		sum, ws := e.window(b.now, b.w)
		b.winSpan = ws
		lowerBound := !sr.lowerBound.IsZero() && b.now.Sub(sr.lowerBound).Seconds() < ws
		var sessions, pinned int
		if g := sr.gauges; g != nil {
			sessions = g.sessions[tag]
			for tr, n := range g.pinned {
				if tr[0] == tag {
					pinned += n
				}
			}
		}
		if sum == (figures{}) && sessions == 0 && pinned == 0 {
			continue
		}
		r := b.row(tag)
		cov := covered(b.now, cmp.Or(sr.since, b.s.started), ws)
		sf := r.Sources[k.source]
		if sf == nil {
			sf = &SourceFigures{}
			r.Sources[k.source] = sf
		}
		sf.add(&sum, cov, sessions, pinned)
		sf.Targets = append(sf.Targets, k.target)
		sf.Stale = sf.Stale || !sr.up
		sf.StatementsLowerBound = sf.StatementsLowerBound || lowerBound
		if !headline || sum == (figures{}) {
			continue
		}
		lf := r.Layers[l]
		if lf == nil {
			lf = &LayerFigures{Source: k.source}
			r.Layers[l] = lf
		} else if lf.Source != k.source {
			lf.Source = "mixed" // targets of one layer with different headlines
		}
		lf.add(&sum)
		lf.Targets = append(lf.Targets, k.target)
		lf.Stale = lf.Stale || !sr.up
		lf.StatementsLowerBound = lf.StatementsLowerBound || lowerBound
	}
}

// add adds a window's figures, covering cov seconds, and gauges.
func (sf *SourceFigures) add(sum *figures, cov float64, sessions, pinned int) {
	sf.HoldSeconds += sum.Hold
	sf.IdleHoldSeconds += sum.Idle
	sf.ActiveSeconds += sum.Active
	sf.Statements += sum.Stmts
	sf.Errors += sum.Errors
	sf.WaitSeconds += sum.Wait
	sf.Occupancy += sum.Hold / divisor(cov)
	sf.Sessions += sessions
	sf.PinnedSessions += pinned
	sf.CoveredSeconds = max(sf.CoveredSeconds, cov)
}

// add adds a headline series' window figures.
func (lf *LayerFigures) add(sum *figures) {
	lf.HoldSeconds += sum.Hold
	lf.IdleHoldSeconds += sum.Idle
	lf.ActiveSeconds += sum.Active
	lf.Statements += sum.Stmts
	lf.Errors += sum.Errors
	lf.WaitSeconds += sum.Wait
}

// addGauges adds sessions and pins now, from each layer's gauge source, for
// the layers that have figures or sessions.
func (b *topBuilder) addGauges() {
	s := b.s
	for k, sr := range s.series {
		l := k.source.Layer()
		if l == "" || gaugeSource(l) != k.source || sr.gauges == nil || s.headline[targetLayer{k.target, l}] == "" {
			continue
		}
		for tag, n := range sr.gauges.sessions {
			if n == 0 {
				continue
			}
			lf := b.row(tag).layer(l, s.headline[targetLayer{k.target, l}])
			lf.Sessions += n
		}
		for tr, n := range sr.gauges.pinned {
			if n == 0 {
				continue
			}
			b.row(tr[0]).layer(l, s.headline[targetLayer{k.target, l}]).PinnedSessions += n
		}
	}
}

// finish computes each row's per-layer rates and returns the rows.
func (b *topBuilder) finish() []TopRow {
	out := make([]TopRow, 0, len(b.rows))
	for _, r := range b.rows {
		for l, lf := range r.Layers {
			lf.CoveredSeconds = b.layers[l].CoveredSeconds
			lf.Occupancy = lf.HoldSeconds / divisor(lf.CoveredSeconds)
			lf.StatementsPerSecond = lf.Statements / divisor(lf.CoveredSeconds)
			lf.IdleShare = share(lf.IdleHoldSeconds, lf.HoldSeconds)
			sort.Strings(lf.Targets)
			lf.Targets = slices.Compact(lf.Targets)
		}
		for _, sf := range r.Sources {
			sort.Strings(sf.Targets)
		}
		out = append(out, *r)
	}
	return out
}

// layer returns the row's figures of layer l, creating them (with the
// layer's headline source) for a tag that holds sessions but has no figures
// yet.
func (r *TopRow) layer(l Layer, headline Source) *LayerFigures {
	lf := r.Layers[l]
	if lf == nil {
		lf = &LayerFigures{Source: headline}
		r.Layers[l] = lf
	}
	return lf
}

// TopSortKeys are the keys SortTop and /api/v1/top?sort= accept.
var TopSortKeys = []string{"occupancy", "hold", "idle", "idle_share", "active", "statements", "errors", "wait", "sessions", "pinned", "tag"}

// SortTop orders rows by key, largest first (tag: alphabetical; ties by
// tag). An unknown key sorts by occupancy.
func SortTop(rows []TopRow, key string) { sortTop(rows, key) }

func sortTop(rows []TopRow, key string) {
	val := func(r *TopRow) float64 {
		switch key {
		case "hold":
			return r.HoldSeconds
		case "idle":
			return r.IdleHoldSeconds
		case "idle_share":
			return r.IdleShare
		case "active":
			return r.ActiveSeconds
		case "statements":
			return r.Statements
		case "errors":
			return r.Errors
		case "wait":
			return r.WaitSeconds
		case "sessions":
			return float64(r.Sessions)
		case "pinned":
			return float64(r.PinnedSessions)
		}
		return r.Occupancy
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if key == "tag" {
			return rows[i].Tag < rows[j].Tag
		}
		if vi, vj := val(&rows[i]), val(&rows[j]); vi != vj {
			return vi > vj
		}
		return rows[i].Tag < rows[j].Tag
	})
}
