package main

import (
	"encoding/json"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/testenv"
)

// TestFlashsaleGivesTheAppLayerToACollector runs one sale exporting to two
// collectors' OTLP receivers: hold spans to one (--otlp-endpoint), conntag's
// counters alone to the other (--otlp-metrics-endpoint, what collect
// --otlp-metrics runs). Each gets every reserve the sale counted as
// app-side statements of inventory_reserve, with hold; and the two agree
// tag by tag, since they measure the same borrows two ways. The sale
// flushes before it exits, so the figures are in when it has.
func TestFlashsaleGivesTheAppLayerToACollector(t *testing.T) {
	d := testenv.NewDatabase(t)
	cols := map[string]*collector.Collector{}
	var args []string
	for _, tc := range []struct {
		name, flag string
		otlp       collector.OTLPConfig
	}{
		{"spans", "--otlp-endpoint", collector.OTLPConfig{Enabled: true}},
		{"counters", "--otlp-metrics-endpoint", collector.OTLPConfig{Enabled: true, Metrics: true}},
	} {
		col, err := collector.New(collector.Config{OTLP: tc.otlp})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(col.Handler())
		defer srv.Close()
		// A URL without a path gets /v1/traces or /v1/metrics.
		args = append(args, tc.flag, srv.URL)
		cols[tc.name] = col
	}
	code, out, errOut := runCLI(t, append([]string{"flashsale", "--dsn", d.DSN(), "--json", "--buyers", "150",
		"--concurrency", "4", "--stock", "1000"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Runs []struct {
			Reserves int64 `json:"reserves"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Runs) != 1 || doc.Runs[0].Reserves == 0 {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	reserves := doc.Runs[0].Reserves
	figures := map[string]map[string]*collector.SourceFigures{}
	for name, col := range cols {
		figures[name] = map[string]*collector.SourceFigures{}
		for _, r := range col.Top(time.Minute) {
			if f := r.Sources[collector.SourceOTLP]; f != nil {
				figures[name][r.Tag] = f
			}
		}
	}
	spans, counters := figures["spans"], figures["counters"]
	for _, name := range []string{"spans", "counters"} {
		got := figures[name]["inventory_reserve"]
		if got == nil {
			t.Errorf("no app-side figures from %s for inventory_reserve: %v", name, figures[name])
			continue
		}
		t.Logf("reserves %d; from %s: %.0f statements, %.3f s hold", reserves, name, got.Statements, got.HoldSeconds)
		if got.Statements < float64(reserves) || got.HoldSeconds <= 0 {
			t.Errorf("inventory_reserve from %s: %.0f statements, %.3f s hold; want at least %d statements and some hold",
				name, got.Statements, got.HoldSeconds, reserves)
		}
	}
	for tag, s := range spans {
		c := counters[tag]
		if c == nil || c.Statements != s.Statements || math.Abs(c.HoldSeconds-s.HoldSeconds) > 0.01*s.HoldSeconds+0.001 {
			t.Errorf("%s: spans say %+v, counters %+v: the same borrows", tag, s, c)
		}
	}
	if len(counters) != len(spans) {
		t.Errorf("tags from spans %d, from counters %d", len(spans), len(counters))
	}

}

// TestFlashsaleOTLPEndpointErrors: both endpoint flags refuse what is not
// an http(s) URL, naming the flag, and never print a password given in it.
func TestFlashsaleOTLPEndpointErrors(t *testing.T) {
	const secret = "s3cretPassw0rd"
	for _, flag := range []string{"--otlp-endpoint", "--otlp-metrics-endpoint"} {
		for _, endpoint := range []string{"collector:4318", "ftp://u:" + secret + "@collector/v1/traces", "http://"} {
			args := []string{"flashsale", flag, endpoint}
			code, out, errOut := runCLI(t, args...)
			if code != 1 || !strings.Contains(errOut, flag+" wants an http:// or https:// URL") {
				t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("%v: the password is printed: %q", args, out+errOut)
			}
		}
	}
}
