package collector

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TopResponse is the body of GET /api/v1/top.
type TopResponse struct {
	Window  string         `json:"window"`
	Sort    string         `json:"sort"`
	At      time.Time      `json:"at"`
	Rows    []TopRow       `json:"rows"`
	Sources []SourceStatus `json:"sources"`
}

// SourceStatus says whether a source is up, for a reader of the ranking to
// know which figures are stale.
type SourceStatus struct {
	Target      string    `json:"target"`
	Source      Source    `json:"source"`
	Up          bool      `json:"up"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	// LastError says why the source is down (no credentials in it).
	LastError string `json:"last_error,omitempty"`
	// Failure is the kind of LastError: whether waiting can help, and what
	// to fix when it cannot.
	Failure Failure `json:"failure,omitempty"`
}

// Sources lists every source and whether it is up, sorted.
func (c *Collector) Sources() []SourceStatus {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	out := make([]SourceStatus, 0, len(c.st.series))
	for k, sr := range c.st.series {
		out = append(out, SourceStatus{Target: k.target, Source: k.source, Up: sr.up, LastSuccess: sr.lastSuccess.UTC(),
			LastError: sr.lastError, Failure: sr.failure})
	}
	slices.SortFunc(out, func(a, b SourceStatus) int {
		return strings.Compare(a.Target+"/"+string(a.Source), b.Target+"/"+string(b.Source))
	})
	return out
}

func (c *Collector) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/v1/top", c.serveTop)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, down := c.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("sources down: " + strings.Join(down, ", ") + "\n"))
			return
		}
		w.Write([]byte("ok\n"))
	})
	if c.otlp != nil {
		mux.Handle("POST /v1/traces", c.otlp)
	}
	return mux
}

// serveTop answers /api/v1/top?window=10s|1m|5m&sort=KEY&filter=SUBSTRING
// &source=SOURCE&limit=N.
func (c *Collector) serveTop(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	win := q.Get("window")
	if win == "" {
		win = "1m"
	}
	d, ok := topWindows[win]
	if !ok {
		writeJSONError(w, http.StatusBadRequest, "window must be one of 10s, 1m, 5m")
		return
	}
	key := q.Get("sort")
	if key == "" {
		key = "occupancy"
	}
	if !slices.Contains(TopSortKeys, key) {
		writeJSONError(w, http.StatusBadRequest, "sort must be one of "+strings.Join(TopSortKeys, ", "))
		return
	}
	limit := 0
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			writeJSONError(w, http.StatusBadRequest, "limit must be a non-negative integer")
			return
		}
		limit = n
	}
	filter, source := q.Get("filter"), Source(q.Get("source"))
	rows := c.st.top(d)
	out := rows[:0]
	for _, row := range rows {
		if filter != "" && !strings.Contains(row.Tag, filter) {
			continue
		}
		if source != "" {
			sf := row.Sources[source]
			if sf == nil {
				continue
			}
			row.Source = source
			row.Occupancy, row.HoldSeconds, row.IdleHoldSeconds = sf.Occupancy, sf.HoldSeconds, sf.IdleHoldSeconds
			row.ActiveSeconds, row.Statements, row.Errors = sf.ActiveSeconds, sf.Statements, sf.Errors
			row.Sessions, row.PinnedSessions, row.Stale = sf.Sessions, sf.PinnedSessions, sf.Stale
			row.IdleShare = 0
			if sf.HoldSeconds > 0 {
				row.IdleShare = sf.IdleHoldSeconds / sf.HoldSeconds
			}
		}
		out = append(out, row)
	}
	sortTop(out, key)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	writeJSON(w, TopResponse{Window: win, Sort: key, At: time.Now().UTC(), Rows: out, Sources: c.Sources()})
}

// writeJSON encodes v whole before writing anything, so that a value that
// cannot be encoded (a NaN) becomes a 500 with a JSON error, never a 200
// with an empty or cut body.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, "encode the answer: "+err.Error()+": this is a bug, please report it")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// apiError is the body of every error of the JSON API.
type apiError struct {
	Error string `json:"error"`
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(apiError{Error: msg}) // a string always encodes
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
