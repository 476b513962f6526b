package collector

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (c *Collector) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/v1/top", c.serveTop)
	mux.HandleFunc("GET /api/v1/tag", c.serveTagDetail) // detail.go
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
	if c.metrics != nil {
		mux.Handle("POST /v1/metrics", c.metrics)
	}
	return mux
}

// serveTop answers /api/v1/top?window=10s|1m|5m&layer=app|proxy|server|max
// &sort=KEY&filter=SUBSTRING&source=SOURCE&limit=N. A bad parameter gets a
// 400 with a JSON body {"error": ..., "parameter": ..., "valid": [...]}.
func (c *Collector) serveTop(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	win := cmp.Or(q.Get("window"), "1m")
	d, ok := topWindows[win]
	if !ok {
		badParam(w, "window", win, []string{"10s", "1m", "5m"})
		return
	}
	tq := TopQuery{Window: d, Layer: cmp.Or(q.Get("layer"), LayerMax), Sort: cmp.Or(q.Get("sort"), "occupancy"),
		Filter: q.Get("filter"), Source: Source(q.Get("source"))}
	switch {
	case !slices.Contains(TopLayers, tq.Layer):
		badParam(w, "layer", tq.Layer, TopLayers)
		return
	case !slices.Contains(TopSortKeys, tq.Sort):
		badParam(w, "sort", tq.Sort, TopSortKeys)
		return
	case tq.Source != "" && tq.Source.Layer() == "":
		badParam(w, "source", string(tq.Source), tagSources())
		return
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			badParam(w, "limit", l, []string{"a non-negative integer"})
			return
		}
		tq.Limit = n
	}
	resp, err := c.TopReport(tq)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, resp)
}

// badParam answers 400 with what was wrong and what is valid.
func badParam(w http.ResponseWriter, param, got string, valid []string) {
	writeAPIError(w, http.StatusBadRequest, apiError{
		Error:     fmt.Sprintf("%s %q: use one of %s", param, got, strings.Join(valid, ", ")),
		Parameter: param,
		Valid:     valid,
	})
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

// apiError is the body of every error of the JSON API: what is wrong, and
// for a bad query parameter, which one and its valid values.
type apiError struct {
	Error     string   `json:"error"`
	Parameter string   `json:"parameter,omitempty"`
	Valid     []string `json:"valid,omitempty"`
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	writeAPIError(w, code, apiError{Error: msg})
}

func writeAPIError(w http.ResponseWriter, code int, e apiError) {
	b, _ := json.Marshal(e) // strings always encode
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
