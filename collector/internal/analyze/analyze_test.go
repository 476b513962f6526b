package analyze

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdtime/holdtime/collector/internal/attrib"
)

type expectedTag struct {
	EventsLogHoldingSeconds float64 `json:"events_log_holding_seconds"`
	HoldingSeconds          float64 `json:"holding_seconds"`
	Statements              int64   `json:"statements"`
	Transactions            int64   `json:"transactions"`
}

func loadExpected(t *testing.T) map[string]expectedTag {
	t.Helper()
	b, err := os.ReadFile("testdata/workload_expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Tags map[string]expectedTag `json:"tags"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e.Tags
}

// expectedTagName maps expected.json's name for untagged sessions to ours.
func expectedTagName(name string) string {
	if name == "(untagged)" {
		return attrib.UntaggedTag
	}
	return name
}

func TestAnalyzeWorkloadAccuracy(t *testing.T) {
	rep, err := Analyze(context.Background(), AnalyzeConfig{EventsLogs: []string{"testdata/workload_events_slice.json.gz"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range loadExpected(t) {
		got := rep.Tag(expectedTagName(name))
		if got == nil {
			t.Errorf("tag %s missing from the report", name)
			continue
		}
		dLog := (got.HoldSeconds - want.EventsLogHoldingSeconds) / want.EventsLogHoldingSeconds
		dClient := (got.HoldSeconds - want.HoldingSeconds) / want.HoldingSeconds
		t.Logf("%-20s hold %9.6f s  events-log ref %9.6f (%+.2f%%)  client ref %9.6f (%+.2f%%)  txns %d/%d  stmts %d/%d",
			name, got.HoldSeconds, want.EventsLogHoldingSeconds, 100*dLog, want.HoldingSeconds, 100*dClient,
			got.Transactions, want.Transactions, got.Statements, want.Statements)
		if math.Abs(dLog) > 0.02 {
			t.Errorf("%s: hold %.6f s is %.2f%% off the events log reference %.6f s (bound 2%%)", name, got.HoldSeconds, 100*dLog, want.EventsLogHoldingSeconds)
		}
		if math.Abs(dClient) > 0.15 {
			t.Errorf("%s: hold %.6f s is %.2f%% off the client reference %.6f s (bound 15%%)", name, got.HoldSeconds, 100*dClient, want.HoldingSeconds)
		}
		if got.Transactions != want.Transactions || got.Statements != want.Statements {
			t.Errorf("%s: %d transactions, %d statements; want %d, %d", name, got.Transactions, got.Statements, want.Transactions, want.Statements)
		}
	}
	if u := rep.Tag(attrib.UnknownTag); u != nil {
		t.Errorf("unknown hold %.6f s on a log that shows every transaction whole: %+v", u.HoldSeconds, u.UnknownReasons)
	}
}

func TestAnalyzeStatesLongestHold(t *testing.T) {
	rep, err := Analyze(context.Background(), AnalyzeConfig{EventsLogs: []string{"testdata/states_eventslog_events.json"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Longest) == 0 {
		t.Fatal("no longest holds")
	}
	top := rep.Longest[0]
	t.Logf("longest: %+v", top)
	if top.Tag != "checkout_completion" || top.Kind != "transaction" || top.Seconds < 4.8 || top.Seconds > 5.2 {
		t.Errorf("longest hold = %s %s %.3f s; want the ~5 s checkout_completion transaction", top.Tag, top.Kind, top.Seconds)
	}
	if top.IdleSeconds < 4.8 {
		t.Errorf("idle %.3f s of the 5 s transaction; want it nearly all idle", top.IdleSeconds)
	}
	if it := rep.Tag("implicit_txn"); it == nil || it.Transactions != 1 || it.Pins["autocommit_off"] != 1 {
		t.Errorf("SET autocommit=0 session: %+v; want one transaction pinned by autocommit_off", it)
	}
}

// TestAnalyzeRotatedFilesInAnyOrder splits the workload's events log into
// two rotated files and gives them newest first: the report must be the
// same as for the files in order.
func TestAnalyzeRotatedFilesInAnyOrder(t *testing.T) {
	f, err := os.Open("testdata/workload_events_slice.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(all, []byte("\n"))
	dir := t.TempDir()
	older, newer := filepath.Join(dir, "events.json.00000001"), filepath.Join(dir, "events.json.00000002")
	if err := os.WriteFile(older, bytes.Join(lines[:len(lines)/2], nil), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newer, bytes.Join(lines[len(lines)/2:], nil), 0o644); err != nil {
		t.Fatal(err)
	}
	report := func(paths ...string) *Report {
		rep, err := Analyze(context.Background(), AnalyzeConfig{EventsLogs: paths})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	inOrder, reversed := report(older, newer), report(newer, older)
	for name := range loadExpected(t) {
		a, b := inOrder.Tag(expectedTagName(name)), reversed.Tag(expectedTagName(name))
		if a == nil || b == nil || math.Abs(a.HoldSeconds-b.HoldSeconds) > 1e-9 || a.Statements != b.Statements {
			t.Errorf("%s: in order %+v, newest first %+v", name, a, b)
		}
	}
}

// TestPercentilesNeverExceedMax: histogram percentiles are bucket middles;
// a report must never show a percentile above the longest hold it saw
// (P50 5013.5 ms > MAX 5001.6 ms was printed).
func TestPercentilesNeverExceedMax(t *testing.T) {
	for _, us := range []int64{5_001_600, 1_000_100, 65, 129, 7_777_777} {
		agg := NewAggregator(AnalyzeConfig{})
		for i := range 3 {
			agg.AddHold(&attrib.Hold{Tag: "t", StartUS: int64(i) * 10_000_000, EndUS: int64(i)*10_000_000 + us})
		}
		tr := agg.Report(nil, nil).Tag("t")
		if tr.P50Seconds > tr.MaxSeconds || tr.P99Seconds > tr.MaxSeconds || tr.MaxSeconds != seconds(us) {
			t.Errorf("holds of %d µs: p50 %v, p99 %v, max %v", us, tr.P50Seconds, tr.P99Seconds, tr.MaxSeconds)
		}
	}
}

// TestAnalyzePinHeldUntilDisconnect: a session that sets a user variable
// (ProxySQL pins its backend for the rest of the session) and sends nothing
// more holds its backend until it disconnects, which the events log does
// not record: the report says so instead of showing a hold as long as the
// SET statement.
func TestAnalyzePinHeldUntilDisconnect(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "events.json")
	line := func(thread, startUS, endUS int, q string) string {
		return fmt.Sprintf(`{"event":"COM_QUERY","thread_id":%d,"starttime_timestamp_us":%d,"endtime_timestamp_us":%d,"query":%q,"hostgroup_id":0,"server":"db:3306"}`+"\n",
			thread, startUS, endUS, q)
	}
	body := line(1, 1_000_000, 1_001_000, "/* conn_tag:pinner */ SET @cart = 42") +
		line(2, 2_000_000, 2_500_000, "/* conn_tag:pinner */ SELECT SLEEP(0.5)") +
		line(2, 9_000_000, 9_100_000, "/* conn_tag:other */ SELECT 1")
	if err := os.WriteFile(log, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Analyze(context.Background(), AnalyzeConfig{EventsLogs: []string{log}})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Tag("pinner")
	if p == nil {
		t.Fatal("no pinner")
	}
	t.Logf("pinner: %+v", *p)
	if p.PinnedUntilDisconnect != 1 || len(p.OpenPins) != 1 || !p.OpenPins[0].EndUnknown || p.OpenPins[0].SessionID != 1 {
		t.Errorf("the pin held until disconnect is not reported as such: %+v", p)
	}
	// The one hold whose length is known is the 0.5 s statement: the
	// percentiles and the longest list are about it alone.
	if p.P50Seconds < 0.49 || p.MaxSeconds < 0.49 || len(p.Longest) != 1 || p.Longest[0].Seconds < 0.49 {
		t.Errorf("p50 %v max %v longest %+v: a pin of unknown length counted as a 0.001 s hold", p.P50Seconds, p.MaxSeconds, p.Longest)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "pinned until the session ended") || !strings.Contains(out.String(), "session 1") {
		t.Errorf("table does not explain the open pin:\n%s", out.String())
	}
}

// TestAnalyzeSaysWhenThereIsNothing: input with no valid event, or a tag
// filter that matches nothing, is an error that says so.
func TestAnalyzeSaysWhenThereIsNothing(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.json")
	os.WriteFile(garbage, []byte("{oops\nnot json at all\n"), 0o644)
	_, err := Analyze(context.Background(), AnalyzeConfig{EventsLogs: []string{garbage}})
	if !errors.Is(err, ErrNothingToReport) || !strings.Contains(err.Error(), "2 malformed lines") {
		t.Errorf("garbage-only input: %v", err)
	}
	_, err = Analyze(context.Background(), AnalyzeConfig{EventsLogs: []string{"testdata/states_eventslog_events.json"},
		Filter: Filter{Tags: []string{"nosuchtag"}}})
	if !errors.Is(err, ErrNothingToReport) || !strings.Contains(err.Error(), "nosuchtag") || !strings.Contains(err.Error(), "checkout_completion") {
		t.Errorf("--tag nosuchtag: %v; want the tags seen listed", err)
	}
}

// TestAnalyzeWorkloadWithSamples shows what each input contributes: the
// samples alone cannot tag the hog's idle-in-transaction time, the events
// log can.
func TestAnalyzeWorkloadWithSamples(t *testing.T) {
	samples := []string{"testdata/workload_processlist_samples.tsv"}
	alone, err := Analyze(context.Background(), AnalyzeConfig{ProcesslistFiles: samples})
	if err != nil {
		t.Fatal(err)
	}
	both, err := Analyze(context.Background(), AnalyzeConfig{ProcesslistFiles: samples,
		EventsLogs: []string{"testdata/workload_events_slice.json.gz"}})
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := alone.Processlist, both.Processlist
	t.Logf("samples alone: %.3f s held; tag from info %.3f, carried %.3f, unknown %.3f", pa.HeldSeconds, pa.FromInfo, pa.Carried, pa.Unknown)
	t.Logf("with events:   %.3f s held; tag from info %.3f, events log %.3f, carried %.3f, unknown %.3f", pb.HeldSeconds, pb.FromInfo, pb.FromEventsLog, pb.Carried, pb.Unknown)
	for _, tr := range alone.Tags {
		t.Logf("samples alone %-20s %.3f s", tr.Tag, tr.HoldSeconds)
	}
	if pb.FromEventsLog <= 0 || pb.Unknown >= pa.Unknown+pa.Carried {
		t.Errorf("the events log did not tag any idle-in-transaction sample time: %+v", pb)
	}
	hog := both.Tag("checkout_tax_quote")
	if hog == nil || hog.Sampled == nil || hog.Sampled.Seconds < 25 {
		t.Errorf("checkout_tax_quote sampled hold with the events log: %+v; want ~30 s", hog)
	}
}
