package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdtime/holdtime/collector"
)

// `holdtime top --prometheus URL` reads the collectors' figures from a
// Prometheus that scrapes them, so that one console covers a fleet of
// collectors (each owning a shard of the targets). It asks for the layer
// figures (holdtime_collector_layer_*: each target's headline source, never
// a sum of one layer's sources) and sums them per tag and layer over
// targets and collectors, counting each target once:
//
//   - a polled target (ProxySQL, MySQL: layers proxy and server) is an
//     instance whose holds are the same whichever collector reads them, so
//     two collectors that watch the same target (an overlap while shards
//     move, a pair kept for availability) give one figure: the largest of
//     theirs (max by target), then a sum over targets;
//   - the app layer comes from spans and counters an app pushes to one
//     collector: each collector's are its own, summed as they are.
//
// Per-source figures (the drill-down's cross-checks) follow the same rule
// and are never summed over sources.

// promTop answers top's queries from a Prometheus.
type promTop struct {
	base  string // the URL as given
	shown string // without a password, for messages
	hc    *http.Client
}

func newPromTop(raw string, hc *http.Client) (*promTop, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("--prometheus: give Prometheus's http(s) URL, such as http://127.0.0.1:9090")
	}
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	return &promTop{base: u.String(), shown: shownURL(u), hc: hc}, nil
}

// promSample is one series of an instant vector.
type promSample struct {
	labels map[string]string
	value  float64
}

// query runs an instant query.
func (p *promTop) query(ctx context.Context, promql string, at time.Time) ([]promSample, error) {
	params := url.Values{"query": {promql}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/api/v1/query?"+params.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cannot reach Prometheus at %s: is it running there? (%v)", p.shown, unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("Prometheus at %s: %v", p.shown, err)
	}
	var doc struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		snippet := strings.TrimSpace(string(body))
		if len(snippet) > 120 {
			snippet = snippet[:120] + "…"
		}
		return nil, fmt.Errorf("%s answered %s with something that is not Prometheus's query API (%q): give Prometheus's own URL", p.shown, resp.Status, snippet)
	}
	if doc.Status != "success" {
		return nil, fmt.Errorf("Prometheus at %s refused a query (%s: %s)", p.shown, doc.ErrorType, doc.Error)
	}
	if doc.Data.ResultType != "vector" {
		return nil, fmt.Errorf("Prometheus at %s answered a %s, not a vector", p.shown, doc.Data.ResultType)
	}
	out := make([]promSample, 0, len(doc.Data.Result))
	for _, r := range doc.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			continue
		}
		out = append(out, promSample{labels: r.Metric, value: v})
	}
	return out, nil
}

// promLayerQuery sums metric per tag and layer over targets and
// collectors, counting a polled target once (see the top of this file).
// rangeSel is "[10s]" for a counter's rate, "" for a gauge.
func promLayerQuery(metric, rangeSel string) string {
	sel := func(matcher string) string {
		s := metric + "{" + matcher + "}"
		if rangeSel != "" {
			s = "rate(" + s + rangeSel + ")"
		}
		return s
	}
	return "sum by (conn_tag, layer) (max by (conn_tag, layer, target) (" + sel(`layer!="app"`) + ")) or " +
		"sum by (conn_tag, layer) (" + sel(`layer="app"`) + ")"
}

// promSourceQuery is promLayerQuery per source (never summed over source).
func promSourceQuery(metric, rangeSel string) string {
	return "sum by (conn_tag, source) (max by (conn_tag, source, target) (rate(" + metric + `{source!="otlp"}` + rangeSel + "))) or " +
		"sum by (conn_tag, source) (rate(" + metric + `{source="otlp"}` + rangeSel + "))"
}

const promNoSeries = "holdtime_collector_layer_hold_seconds_total"

func (p *promTop) top(ctx context.Context, q collector.TopQuery) (collector.TopResponse, error) {
	w := roundReplayWindow(q.Window)
	win := windowName(w)
	rng := "[" + win + "]"
	now := time.Now()
	queries := map[string]string{
		"hold":     promLayerQuery("holdtime_collector_layer_hold_seconds_total", rng),
		"idle":     promLayerQuery("holdtime_collector_layer_idle_hold_seconds_total", rng),
		"active":   promLayerQuery("holdtime_collector_layer_active_seconds_total", rng),
		"stmts":    promLayerQuery("holdtime_collector_layer_statements_total", rng),
		"errors":   promLayerQuery("holdtime_collector_layer_statement_errors_total", rng),
		"wait":     promLayerQuery("holdtime_collector_layer_wait_seconds_total", rng),
		"sessions": promLayerQuery("holdtime_collector_layer_sessions", ""),
		"src_hold": promSourceQuery("holdtime_collector_hold_seconds_total", rng),
		"src_idle": promSourceQuery("holdtime_collector_idle_hold_seconds_total", rng),
		"src_stmt": promSourceQuery("holdtime_collector_statements_total", rng),
		"state":    "max by (target, source, state) (holdtime_source_state) > 0",
		"headline": "max by (target, layer, source) (holdtime_collector_layer_source)",
		"series":   "count(" + promNoSeries + ")",
		"up":       "count(holdtime_source_up)",
	}
	results := map[string][]promSample{}
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for name, pq := range queries {
		wg.Go(func() {
			r, err := p.query(ctx, pq, now)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			results[name] = r
		})
	}
	wg.Wait()
	if firstErr != nil {
		return collector.TopResponse{}, firstErr
	}
	switch {
	case len(results["up"]) == 0:
		return collector.TopResponse{}, fmt.Errorf("Prometheus at %s has no holdtime series (holdtime_source_up): does it scrape a holdtime collector's /metrics (holdtime collect --listen)?",
			p.shown)
	case len(results["series"]) > 0 && len(results["hold"]) == 0:
		// Series, but rate() found fewer than two scrapes in the window.
		return collector.TopResponse{}, fmt.Errorf("Prometheus at %s has holdtime series but not two scrapes of them within the last %s: "+
			"give a --window of at least two scrape intervals (--window 1m for a 15s scrape), or check that the collectors are still scraped", p.shown, win)
	}
	resp := collector.TopResponse{Window: win, Sort: cmp.Or(q.Sort, "occupancy"), Layer: cmp.Or(q.Layer, collector.LayerMax),
		At: now.UTC(), CoveredSeconds: w.Seconds(), Layers: map[collector.Layer]*collector.LayerStatus{}}
	rows := map[string]*collector.TopRow{}
	row := func(tag string) *collector.TopRow {
		r := rows[tag]
		if r == nil {
			r = &collector.TopRow{Tag: tag, Layers: map[collector.Layer]*collector.LayerFigures{}, Sources: map[collector.Source]*collector.SourceFigures{}}
			rows[tag] = r
		}
		return r
	}
	for _, s := range results["headline"] {
		l := collector.Layer(s.labels["layer"])
		ls := resp.Layers[l]
		if ls == nil {
			ls = &collector.LayerStatus{CoveredSeconds: w.Seconds()}
			resp.Layers[l] = ls
		}
		ts := collector.TargetSource{Target: s.labels["target"], Source: collector.Source(s.labels["source"])}
		if !slices.Contains(ls.Headlines, ts) {
			ls.Headlines = append(ls.Headlines, ts)
		}
	}
	layerFig := func(s promSample) *collector.LayerFigures {
		tag, l := s.labels["conn_tag"], collector.Layer(s.labels["layer"])
		if tag == "" || l == "" {
			return nil
		}
		r := row(tag)
		lf := r.Layers[l]
		if lf == nil {
			lf = &collector.LayerFigures{CoveredSeconds: w.Seconds()}
			if ls := resp.Layers[l]; ls != nil && len(ls.Headlines) > 0 {
				lf.Source = ls.Headlines[0].Source
				for _, h := range ls.Headlines[1:] {
					if h.Source != lf.Source {
						lf.Source = "mixed"
					}
				}
			}
			r.Layers[l] = lf
		}
		return lf
	}
	// Rates times the window are the seconds and counts the window holds,
	// as /api/v1/top gives them.
	for name, set := range map[string]func(*collector.LayerFigures, float64){
		"hold":     func(lf *collector.LayerFigures, v float64) { lf.Occupancy, lf.HoldSeconds = v, v*w.Seconds() },
		"idle":     func(lf *collector.LayerFigures, v float64) { lf.IdleHoldSeconds = v * w.Seconds() },
		"active":   func(lf *collector.LayerFigures, v float64) { lf.ActiveSeconds = v * w.Seconds() },
		"stmts":    func(lf *collector.LayerFigures, v float64) { lf.StatementsPerSecond, lf.Statements = v, v*w.Seconds() },
		"errors":   func(lf *collector.LayerFigures, v float64) { lf.Errors = v * w.Seconds() },
		"wait":     func(lf *collector.LayerFigures, v float64) { lf.WaitSeconds = v * w.Seconds() },
		"sessions": func(lf *collector.LayerFigures, v float64) { lf.Sessions = int(v + 0.5) },
	} {
		for _, s := range results[name] {
			if lf := layerFig(s); lf != nil {
				set(lf, s.value)
			}
		}
	}
	for name, set := range map[string]func(*collector.SourceFigures, float64){
		"src_hold": func(sf *collector.SourceFigures, v float64) { sf.Occupancy, sf.HoldSeconds = v, v*w.Seconds() },
		"src_idle": func(sf *collector.SourceFigures, v float64) { sf.IdleHoldSeconds = v * w.Seconds() },
		"src_stmt": func(sf *collector.SourceFigures, v float64) { sf.Statements = v * w.Seconds() },
	} {
		for _, s := range results[name] {
			tag, src := s.labels["conn_tag"], collector.Source(s.labels["source"])
			if tag == "" || src == "" {
				continue
			}
			r := row(tag)
			sf := r.Sources[src]
			if sf == nil {
				sf = &collector.SourceFigures{CoveredSeconds: w.Seconds()}
				r.Sources[src] = sf
			}
			set(sf, s.value)
		}
	}
	// Sources: one line per target and source, its worst state over the
	// collectors that report it.
	worst := map[collector.TargetSource]string{}
	rank := map[string]int{collector.StateUp: 0, collector.StateWaiting: 1, collector.StateDegraded: 2, collector.StateDown: 3}
	for _, s := range results["state"] {
		ts := collector.TargetSource{Target: s.labels["target"], Source: collector.Source(s.labels["source"])}
		if st, ok := worst[ts]; !ok || rank[s.labels["state"]] > rank[st] {
			worst[ts] = s.labels["state"]
		}
	}
	headline := map[collector.TargetSource]bool{}
	for _, ls := range resp.Layers {
		for _, h := range ls.Headlines {
			headline[h] = true
		}
	}
	down := map[collector.Layer]bool{}
	for ts, st := range worst {
		ss := collector.SourceStatus{Target: ts.Target, Source: ts.Source, Layer: ts.Source.Layer(), Headline: headline[ts],
			State: st, Up: st == collector.StateUp || st == collector.StateDegraded}
		resp.Sources = append(resp.Sources, ss)
		if st == collector.StateDown && ss.Headline {
			down[ss.Layer] = true
		}
	}
	slices.SortFunc(resp.Sources, func(a, b collector.SourceStatus) int {
		return cmp.Or(strings.Compare(a.Target, b.Target), strings.Compare(string(a.Source), string(b.Source)))
	})
	layer := cmp.Or(q.Layer, collector.LayerMax)
	for _, r := range rows {
		for l, lf := range r.Layers {
			if lf.HoldSeconds == 0 && lf.Statements == 0 && lf.Sessions == 0 && lf.WaitSeconds == 0 {
				delete(r.Layers, l) // a tag idle in the window, as the collector leaves it out
				continue
			}
			if lf.HoldSeconds > 0 {
				lf.IdleShare = lf.IdleHoldSeconds / lf.HoldSeconds
			}
			lf.Stale = down[l]
		}
		if q.Filter != "" && !strings.Contains(r.Tag, q.Filter) {
			continue
		}
		pickLayer := collector.Layer(layer)
		if layer == collector.LayerMax {
			pickLayer = ""
			for _, l := range collector.Layers {
				if lf := r.Layers[l]; lf != nil && (pickLayer == "" || lf.Occupancy > r.Layers[pickLayer].Occupancy) {
					pickLayer = l
				}
			}
		}
		lf := r.Layers[pickLayer]
		if lf == nil {
			continue
		}
		r.Layer = pickLayer
		r.Occupancy, r.IdleShare, r.HoldSeconds, r.IdleHoldSeconds = lf.Occupancy, lf.IdleShare, lf.HoldSeconds, lf.IdleHoldSeconds
		r.ActiveSeconds, r.Statements, r.StatementsPerSecond, r.Errors = lf.ActiveSeconds, lf.Statements, lf.StatementsPerSecond, lf.Errors
		r.WaitSeconds, r.Sessions, r.PinnedSessions, r.Source, r.Stale = lf.WaitSeconds, lf.Sessions, lf.PinnedSessions, lf.Source, lf.Stale
		resp.Rows = append(resp.Rows, *r)
	}
	collector.SortTop(resp.Rows, resp.Sort)
	if q.Limit > 0 && len(resp.Rows) > q.Limit {
		resp.Rows = resp.Rows[:q.Limit]
	}
	return resp, nil
}
