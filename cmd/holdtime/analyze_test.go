package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	workloadLog = "../../collector/testdata/workload_events_slice.json.gz"
	statesLog   = "../../collector/testdata/states_eventslog_events.json"
	workloadPL  = "../../collector/testdata/workload_processlist_samples.tsv"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestAnalyzeTable(t *testing.T) {
	code, out, errOut := runCLI(t, "analyze", workloadLog)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"checkout_tax_quote", "30.325", "inventory_reserve", "12.688", "longest holds:", "session 11"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestAnalyzeJSONFilters(t *testing.T) {
	code, out, errOut := runCLI(t, "analyze", "--json", "--tag", "checkout_completion", "--user", "app",
		"--hostgroup", "0", "--top", "1", statesLog)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Tags []struct {
			Tag         string  `json:"tag"`
			HoldSeconds float64 `json:"hold_seconds"`
		} `json:"tags"`
		Longest []struct {
			Tag       string  `json:"tag"`
			SessionID uint64  `json:"session_id"`
			Client    string  `json:"client"`
			Seconds   float64 `json:"seconds"`
		} `json:"longest_holds"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(rep.Tags) != 1 || rep.Tags[0].Tag != "checkout_completion" {
		t.Errorf("tag filter: tags %+v", rep.Tags)
	}
	if len(rep.Longest) != 1 || rep.Longest[0].SessionID != 9 || rep.Longest[0].Client != "127.0.0.1:37942" ||
		rep.Longest[0].Seconds < 4.8 {
		t.Errorf("longest hold %+v; want session 9's ~5 s transaction", rep.Longest)
	}
}

func TestAnalyzeWindowAndMarkdown(t *testing.T) {
	code, out, errOut := runCLI(t, "analyze", "--format", "markdown", "--processlist", workloadPL,
		"--from", "2026-12-02T08:41:15Z", "--to", "2026-12-02T08:41:20Z", workloadLog)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "| `checkout_tax_quote` |") || !strings.Contains(out, "- processlist:") ||
		!strings.Contains(out, "2026-12-02T08:41:15.000Z .. 2026-12-02T08:41:20.000Z") {
		t.Errorf("markdown:\n%s", out)
	}
}

func TestAnalyzeMalformedAndTruncated(t *testing.T) {
	full, err := os.ReadFile(workloadLog)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cut := filepath.Join(dir, "cut.json.gz")
	os.WriteFile(cut, full[:len(full)/3], 0o644)
	bad := filepath.Join(dir, "bad.json")
	states, _ := os.ReadFile(statesLog)
	os.WriteFile(bad, append([]byte("{oops\n"), states...), 0o644)
	code, out, errOut := runCLI(t, "analyze", cut, bad)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "truncated") || !strings.Contains(errOut, "skipped 2 malformed") {
		t.Errorf("stderr lacks the truncation and malformed line warnings:\n%s", errOut)
	}
	// The cut file's last, partial line is the second malformed one.
	if !strings.Contains(out, "2 malformed lines skipped") || !strings.Contains(out, "bad.json:1: ") ||
		!strings.Contains(out, "checkout_completion") {
		t.Errorf("report:\n%s", out)
	}
}

func TestAnalyzeErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"analyze"}, "no input: give ProxySQL events log files"},
		{[]string{"analyze", "--format", "xml", statesLog}, "use table, markdown or json"},
		{[]string{"analyze", "--from", "yesterday", statesLog}, "give an RFC 3339 time"},
		{[]string{"analyze", "--from", "2026-12-02T09:00:00Z", "--to", "2026-12-02T08:00:00Z", statesLog}, "swap them"},
		{[]string{"analyze", "/nonexistent/events.json"}, "check the path"},
	} {
		code, _, errOut := runCLI(t, tt.args...)
		if code != 1 || !strings.HasPrefix(errOut, "holdtime: ") || !strings.Contains(errOut, tt.want) ||
			strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one line containing %q", tt.args, code, errOut, tt.want)
		}
	}
}

// TestAnalyzeNothingToReport: garbage-only input and a tag that is not in
// the input exit non-zero with one line that says so.
func TestAnalyzeNothingToReport(t *testing.T) {
	garbage := filepath.Join(t.TempDir(), "garbage.json")
	os.WriteFile(garbage, []byte("{oops\n"), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"analyze", garbage}, "no valid event"},
		{[]string{"analyze", "--tag", "nosuchtag", statesLog}, "no hold of tag nosuchtag"},
	} {
		code, out, errOut := runCLI(t, tt.args...)
		if code != 1 || !strings.Contains(errOut, tt.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", tt.args, code, out, errOut, tt.want)
		}
	}
}
