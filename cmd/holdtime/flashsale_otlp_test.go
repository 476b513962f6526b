package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/testenv"
)

// TestFlashsaleSendsSpans runs a sale with --otlp-endpoint pointing at a
// collector's OTLP receiver: every reserve the sale counted arrives there
// as app-side hold of inventory_reserve (at least one statement each).
func TestFlashsaleSendsSpans(t *testing.T) {
	d := testenv.NewDatabase(t)
	col, err := collector.New(collector.Config{OTLP: collector.OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(col.Handler())
	defer srv.Close()

	// A URL without a path gets /v1/traces.
	code, out, errOut := runCLI(t, "flashsale", "--dsn", d.DSN(), "--json", "--buyers", "150", "--concurrency", "4",
		"--stock", "1000", "--otlp-endpoint", srv.URL)
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

	// The sale flushes its spans before it exits: they are in already.
	var got *collector.SourceFigures
	for _, r := range col.Top(time.Minute) {
		if r.Tag == "inventory_reserve" {
			got = r.Sources[collector.SourceOTLP]
		}
	}
	if got == nil {
		t.Fatalf("no app-side (otlp) figures for inventory_reserve: %+v", col.Top(time.Minute))
	}
	t.Logf("reserves %d; otlp: %.0f statements, %.3f s hold", reserves, got.Statements, got.HoldSeconds)
	if got.Statements < float64(reserves) || got.HoldSeconds <= 0 {
		t.Errorf("otlp figures for inventory_reserve: %.0f statements, %.3f s hold; want at least %d statements and some hold",
			got.Statements, got.HoldSeconds, reserves)
	}
}

func TestFlashsaleOTLPEndpointErrors(t *testing.T) {
	const secret = "s3cretPassw0rd"
	for _, endpoint := range []string{"collector:4318", "ftp://u:" + secret + "@collector/v1/traces", "http://"} {
		args := []string{"flashsale", "--otlp-endpoint", endpoint}
		code, out, errOut := runCLI(t, args...)
		if code != 1 || !strings.Contains(errOut, "--otlp-endpoint wants an http:// or https:// URL") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
		if strings.Contains(out+errOut, secret) {
			t.Errorf("%v: the password is printed: %q", args, out+errOut)
		}
	}
}

// TestFlashsaleExportsCounters: a sale exporting conntag's counters to a
// collector with /v1/metrics (what collect --otlp-metrics runs) gives the
// app layer the statements the sale made, from counters alone: no span is
// sent. The sale's last export happens when it stops.
func TestFlashsaleExportsCounters(t *testing.T) {
	d := testenv.NewDatabase(t)
	col, err := collector.New(collector.Config{OTLP: collector.OTLPConfig{Enabled: true, Metrics: true}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(col.Handler())
	defer srv.Close()
	// A URL without a path gets /v1/metrics.
	code, out, errOut := runCLI(t, "flashsale", "--dsn", d.DSN(), "--json", "--buyers", "150", "--concurrency", "4",
		"--stock", "1000", "--otlp-metrics-endpoint", srv.URL)
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
	var got *collector.SourceFigures
	for _, r := range col.Top(time.Minute) {
		if r.Tag == "inventory_reserve" {
			got = r.Sources[collector.SourceOTLP]
		}
	}
	if got == nil {
		t.Fatalf("no app-side figures from counters for inventory_reserve: %+v", col.Top(time.Minute))
	}
	t.Logf("reserves %d; from counters: %.0f statements, %.3f s hold", doc.Runs[0].Reserves, got.Statements, got.HoldSeconds)
	if got.Statements < float64(doc.Runs[0].Reserves) || got.HoldSeconds <= 0 {
		t.Errorf("inventory_reserve from counters: %.0f statements, %.3f s hold; want at least %d statements and some hold",
			got.Statements, got.HoldSeconds, doc.Runs[0].Reserves)
	}
	code, _, errOut = runCLI(t, "flashsale", "--otlp-metrics-endpoint", "collector:4318")
	if code != 1 || !strings.Contains(errOut, "--otlp-metrics-endpoint wants an http:// or https:// URL") {
		t.Errorf("a bad endpoint: exit %d, %q", code, errOut)
	}
}
