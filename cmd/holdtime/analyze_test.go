package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/internal/termtext"
)

// Captured with the real ProxySQL 2.7 (see collector/testdata): the
// workload slice runs 2026-12-02 08:41:14.651 .. 08:41:24.806 UTC.
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

// runAnalyze runs analyze with stdin and a fixed clock, as a user would.
func runAnalyze(t *testing.T, stdin io.Reader, now time.Time, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newAnalyzeCommand(&analyzeCmd{now: func() time.Time { return now }})
	cmd.SetIn(stdin)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// jsonReport is the documented schema, as a reader of --json decodes it.
type jsonReport struct {
	Schema           string    `json:"schema"`
	Partial          bool      `json:"partial"`
	From             time.Time `json:"from"`
	To               time.Time `json:"to"`
	GroupBy          []string  `json:"group_by"`
	TotalHoldSeconds float64   `json:"total_hold_seconds"`
	HoldsFrom        string    `json:"holds_from"`
	Groups           []struct {
		Rank        int               `json:"rank"`
		Key         map[string]string `json:"key"`
		HoldSeconds float64           `json:"hold_seconds"`
		Share       float64           `json:"share"`
		Holds       int64             `json:"holds"`
		P95Seconds  float64           `json:"hold_p95_seconds"`
		MaxSeconds  float64           `json:"hold_max_seconds"`
		Longest     []struct {
			SessionID uint64  `json:"session_id"`
			Seconds   float64 `json:"seconds"`
			Client    string  `json:"client"`
		} `json:"longest_holds"`
		Digests []struct {
			Digest     string `json:"digest"`
			Statements int64  `json:"statements"`
		} `json:"top_digests"`
	} `json:"groups"`
	Inputs []struct {
		Name            string   `json:"name"`
		Kind            string   `json:"kind"`
		Events          int64    `json:"events"`
		DuplicateEvents int64    `json:"duplicate_events"`
		DuplicateOf     []string `json:"duplicate_of"`
	} `json:"inputs"`
	Notes []string `json:"notes"`
}

func analyzeJSON(t *testing.T, stdin io.Reader, now time.Time, args ...string) (jsonReport, string) {
	t.Helper()
	out, errOut, err := runAnalyze(t, stdin, now, append([]string{"--json"}, args...)...)
	if err != nil {
		t.Fatalf("analyze %v: %v (stderr %s)", args, err, errOut)
	}
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return rep, errOut
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.0005 }

func TestAnalyzeProfileTable(t *testing.T) {
	code, out, errOut := runCLI(t, "analyze", workloadLog)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// The profile first, ranked by hold, then each group's details.
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[2], "RANK  TAG ") || !strings.Contains(lines[2], "HOLD s  SHARE  HOLDS  MEAN ms  P95 ms  MAX ms   IDLE") {
		t.Fatalf("profile header: %q", lines[2])
	}
	if f := strings.Fields(lines[3]); f[0] != "1" || f[1] != "checkout_tax_quote" || f[2] != "30.325" || f[4] != "75" {
		t.Errorf("first row %q: want rank 1 checkout_tax_quote 30.325 s in 75 holds", lines[3])
	}
	for _, want := range []string{"# 1. checkout_tax_quote: 30.325 s", "longest holds:", "top digests by statement time:",
		"users and client hosts:", "hold histogram:", "    <= 10ms    2118  ####", "# inputs"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestAnalyzeStdin: "-" reads standard input, gzip or plain, and gives the
// report the file gives.
func TestAnalyzeStdin(t *testing.T) {
	gz, err := os.ReadFile(workloadLog)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, _ := analyzeJSON(t, nil, time.Now(), workloadLog)
	fromStdin, _ := analyzeJSON(t, bytes.NewReader(gz), time.Now(), "-")
	if !near(fromStdin.TotalHoldSeconds, fromFile.TotalHoldSeconds) || len(fromStdin.Groups) != len(fromFile.Groups) ||
		fromStdin.Inputs[0].Name != "-" {
		t.Errorf("stdin %v s in %d groups (inputs %+v); the file %v s in %d", fromStdin.TotalHoldSeconds, len(fromStdin.Groups),
			fromStdin.Inputs, fromFile.TotalHoldSeconds, len(fromFile.Groups))
	}
	plain, _ := os.ReadFile(statesLog)
	rep, _ := analyzeJSON(t, bytes.NewReader(plain), time.Now(), "--tag", "checkout_completion", "-")
	if len(rep.Groups) != 1 || rep.Groups[0].Key["tag"] != "checkout_completion" {
		t.Errorf("plain stdin: %+v", rep.Groups)
	}
	if _, _, err := runAnalyze(t, bytes.NewReader(plain), time.Now(), "-", "-"); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("- twice: %v", err)
	}
}

// TestAnalyzeTimeForms: every form of --since/--until names the same
// window and gives the same figures.
func TestAnalyzeTimeForms(t *testing.T) {
	from := time.Date(2026, 12, 2, 8, 41, 16, 0, time.UTC)
	to := time.Date(2026, 12, 2, 8, 41, 20, 0, time.UTC)
	full, _ := analyzeJSON(t, nil, time.Now(), workloadLog)
	paris, err := time.LoadLocation("Europe/Paris")
	for _, tt := range []struct {
		name string
		now  time.Time
		args []string
	}{
		{"RFC 3339", time.Now(), []string{"--since", "2026-12-02T08:41:16Z", "--until", "2026-12-02T09:41:20+01:00"}},
		{"ProxySQL's starttime", time.Now(), []string{"--since", "2026-12-02 08:41:16", "--until", "2026-12-02 08:41:20.000000"}},
		{"Unix microseconds", time.Now(), []string{"--since", fmt.Sprint(from.UnixMicro()), "--until", fmt.Sprint(to.UnixMicro())}},
		{"relative", to.Add(5 * time.Minute), []string{"--since", "5m4s", "--until", "5m"}},
		{"--from/--to", time.Now(), []string{"--from", "2026-12-02T08:41:16Z", "--to", "2026-12-02T08:41:20Z"}},
		{"--tz", time.Now(), []string{"--tz", "Europe/Paris", "--since", "2026-12-02 09:41:16", "--until", "2026-12-02 09:41:20"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "--tz" && err != nil {
				t.Skipf("no time zone data: %v", err)
			}
			_ = paris
			rep, _ := analyzeJSON(t, nil, tt.now, append(tt.args, workloadLog)...)
			if !rep.From.Equal(from) || !rep.To.Equal(to) {
				t.Errorf("window %s .. %s; want %s .. %s", rep.From, rep.To, from, to)
			}
			// 4 s of the 10 s capture: a part, never all, never nothing.
			if rep.TotalHoldSeconds <= 0 || rep.TotalHoldSeconds > 0.6*full.TotalHoldSeconds {
				t.Errorf("%.3f s of %.3f s in the window", rep.TotalHoldSeconds, full.TotalHoldSeconds)
			}
			if !near(rep.TotalHoldSeconds, 22.864) && tt.name == "RFC 3339" {
				t.Logf("RFC 3339 window holds %.3f s", rep.TotalHoldSeconds)
			}
		})
	}
	// The same figures whatever the form.
	a, _ := analyzeJSON(t, nil, time.Now(), "--since", "2026-12-02T08:41:16Z", "--until", "2026-12-02T08:41:20Z", workloadLog)
	b, _ := analyzeJSON(t, nil, to.Add(time.Hour), "--since", "1h4s", "--until", "1h", workloadLog)
	if !near(a.TotalHoldSeconds, b.TotalHoldSeconds) {
		t.Errorf("RFC 3339 %.6f s, relative %.6f s", a.TotalHoldSeconds, b.TotalHoldSeconds)
	}
	for _, bad := range []string{"yesterday", "10", "-5m", "2026-13-02 08:00:00"} {
		_, _, err := runAnalyze(t, nil, time.Now(), "--since", bad, workloadLog)
		if err == nil || !strings.Contains(err.Error(), "give a duration before now") {
			t.Errorf("--since %q: %v", bad, err)
		}
	}
}

// TestAnalyzeGroupBy: every grouping splits the same total; tag,user
// keys carry both.
func TestAnalyzeGroupBy(t *testing.T) {
	byTag, _ := analyzeJSON(t, nil, time.Now(), workloadLog)
	for _, g := range []string{"tag,user", "user", "host", "hostgroup", "digest", "tag,digest"} {
		rep, _ := analyzeJSON(t, nil, time.Now(), "--group-by", g, workloadLog)
		if !near(rep.TotalHoldSeconds, byTag.TotalHoldSeconds) {
			t.Errorf("--group-by %s: %.6f s; by tag %.6f s", g, rep.TotalHoldSeconds, byTag.TotalHoldSeconds)
		}
		fields := strings.Split(g, ",")
		if !slices.Equal(rep.GroupBy, fields) {
			t.Errorf("--group-by %s: group_by %v", g, rep.GroupBy)
		}
		for _, grp := range rep.Groups {
			if !slices.Equal(slices.Sorted(maps.Keys(grp.Key)), slices.Sorted(slices.Values(fields))) {
				t.Errorf("--group-by %s: key %v", g, grp.Key)
			}
		}
	}
	rep, _ := analyzeJSON(t, nil, time.Now(), "--group-by", "tag,user", statesLog)
	if k := rep.Groups[0].Key; k["user"] != "app" || k["tag"] == "" {
		t.Errorf("tag,user: first key %v", k)
	}
	// By digest, the tax quote's hold is its SELECT ... FOR UPDATE's: the
	// first statement after BEGIN, not BEGIN.
	rep, _ = analyzeJSON(t, nil, time.Now(), "--group-by", "digest", "--tag", "checkout_tax_quote", workloadLog)
	if len(rep.Groups) != 1 || rep.Groups[0].Key["digest"] != "0x073772E6CE8DD78F" || rep.Groups[0].Holds != 75 {
		t.Errorf("by digest: %+v", rep.Groups)
	}
	if _, _, err := runAnalyze(t, nil, time.Now(), "--group-by", "tag,schema", workloadLog); err == nil ||
		!strings.Contains(err.Error(), "tag,user,host,hostgroup,digest") {
		t.Errorf("--group-by schema: %v", err)
	}
	// The table has a column per field.
	out, _, err := runAnalyze(t, nil, time.Now(), "--group-by", "tag,user", statesLog)
	if err != nil || !strings.Contains(out, "RANK  TAG  ") || !strings.Contains(out, "  USER  ") {
		t.Errorf("tag,user table (%v):\n%s", err, out)
	}
}

// TestAnalyzeRecordingDir: a `collect --record` directory is read as its
// processlist recordings and the events logs in it; the stats tables are
// left alone.
func TestAnalyzeRecordingDir(t *testing.T) {
	dir := t.TempDir()
	px := filepath.Join(dir, "px1")
	os.MkdirAll(px, 0o755)
	copyFile(t, workloadPL, filepath.Join(px, "processlist.tsv"))
	copyFile(t, "../../collector/testdata/workload_stats_mysql_global.after.tsv", filepath.Join(px, "stats_mysql_global.tsv"))

	samplesOnly, _ := analyzeJSON(t, nil, time.Now(), dir)
	if samplesOnly.HoldsFrom != "processlist" || len(samplesOnly.Inputs) != 1 || samplesOnly.Inputs[0].Kind != "processlist" {
		t.Fatalf("processlist-only recording: holds from %q, inputs %+v", samplesOnly.HoldsFrom, samplesOnly.Inputs)
	}
	// Sampled, storefront_browse's hold is within the sampling error of
	// the events log's exact 6.984 s.
	sampled := 0.0
	for _, g := range samplesOnly.Groups {
		if g.Key["tag"] == "storefront_browse" {
			sampled = g.HoldSeconds
		}
	}
	if sampled < 0.8*6.984 || sampled > 1.2*6.984 {
		t.Errorf("sampled storefront_browse %.3f s; the events log says 6.984 s", sampled)
	}

	copyFile(t, workloadLog, filepath.Join(px, "events.json.gz"))
	both, errOut := analyzeJSON(t, nil, time.Now(), dir)
	full, _ := analyzeJSON(t, nil, time.Now(), workloadLog)
	if both.HoldsFrom != "events_log" || !near(both.TotalHoldSeconds, full.TotalHoldSeconds) || len(both.Inputs) != 2 {
		t.Errorf("recording with an events log: holds from %q, %.3f s (events log alone %.3f s), inputs %+v, stderr %s",
			both.HoldsFrom, both.TotalHoldSeconds, full.TotalHoldSeconds, both.Inputs, errOut)
	}
	// Two targets' events logs: read as one, which the report says.
	px2 := filepath.Join(dir, "px2")
	os.MkdirAll(px2, 0o755)
	copyFile(t, statesLog, filepath.Join(px2, "events.json"))
	two, errOut := analyzeJSON(t, nil, time.Now(), dir)
	if !strings.Contains(errOut, "holds events logs of 2 targets") || !strings.Contains(strings.Join(two.Notes, "\n"), "analyze each target's directory apart") {
		t.Errorf("two targets: stderr %q, notes %q", errOut, two.Notes)
	}
	if _, _, err := runAnalyze(t, nil, time.Now(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "no processlist.tsv") {
		t.Errorf("empty directory: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestAnalyzeJSONSchema(t *testing.T) {
	out, _, err := runAnalyze(t, nil, time.Now(), "--json", "--top", "2", workloadLog)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
	// The documented fields, all present (empty lists as [], never null):
	// a rename or removal must change the schema name.
	if got, want := keys(raw), []string{"from", "group_by", "groups", "holds_from", "inputs", "notes", "partial", "schema", "to", "total_hold_seconds"}; !slices.Equal(got, want) {
		t.Errorf("report fields %v; want %v", got, want)
	}
	if raw["schema"] != "holdtime.analyze/v2" {
		t.Errorf("schema %v", raw["schema"])
	}
	g := raw["groups"].([]any)[0].(map[string]any)
	if got, want := keys(g), []string{"histogram", "hold_max_seconds", "hold_mean_seconds", "hold_p95_seconds", "hold_seconds", "holds",
		"hosts", "idle_seconds", "idle_share", "key", "longest_holds", "pinned_until_disconnect", "rank", "share", "statements",
		"top_digests", "transactions", "users"}; !slices.Equal(got, want) {
		t.Errorf("group fields %v; want %v", got, want)
	}
	h := g["longest_holds"].([]any)[0].(map[string]any)
	if got, want := keys(h), []string{"client", "digest", "hostgroup", "idle_seconds", "kind", "query", "seconds", "session_id",
		"start", "statements", "tag", "truncated", "user"}; !slices.Equal(got, want) {
		t.Errorf("hold fields %v; want %v", got, want)
	}
	if n := len(g["longest_holds"].([]any)); n != 2 {
		t.Errorf("--top 2: %d longest holds", n)
	}
	in := raw["inputs"].([]any)[0].(map[string]any)
	if got, want := keys(in), []string{"duplicate_events", "duplicate_of", "events", "kind", "lines", "malformed_lines", "name", "warnings"}; !slices.Equal(got, want) {
		t.Errorf("input fields %v; want %v", got, want)
	}
}

// TestAnalyzeDuplicateInput: the same events read twice, by whatever
// name, count once, and the report says which input repeated which.
func TestAnalyzeDuplicateInput(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link.json.gz")
	abs, _ := filepath.Abs(workloadLog)
	if err := os.Symlink(abs, link); err != nil {
		t.Fatal(err)
	}
	// The decompressed copy has other bytes but the same events.
	gz, _ := os.ReadFile(workloadLog)
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	cp := filepath.Join(dir, "copy.json")
	os.WriteFile(cp, plain, 0o644)

	once, _ := analyzeJSON(t, nil, time.Now(), workloadLog)
	for _, args := range [][]string{{workloadLog, link}, {workloadLog, cp}, {cp, workloadLog, link}} {
		rep, errOut := analyzeJSON(t, nil, time.Now(), args...)
		if !near(rep.TotalHoldSeconds, once.TotalHoldSeconds) || rep.Groups[0].Holds != once.Groups[0].Holds {
			t.Errorf("%v: %.3f s, %d holds first; once %.3f s, %d", args, rep.TotalHoldSeconds, rep.Groups[0].Holds,
				once.TotalHoldSeconds, once.Groups[0].Holds)
		}
		dups := 0
		for _, in := range rep.Inputs[1:] {
			if in.DuplicateEvents == in.Events && in.Events > 0 && len(in.DuplicateOf) == 1 && in.DuplicateOf[0] == rep.Inputs[0].Name {
				dups++
			}
		}
		if dups != len(args)-1 || !strings.Contains(errOut, "duplicate input: ") || !strings.Contains(strings.Join(rep.Notes, "\n"), "counted once") {
			t.Errorf("%v: inputs %+v, stderr %q, notes %q", args, rep.Inputs, errOut, rep.Notes)
		}
	}

	// Rotated logs that overlap: the second starts before the first ends.
	lines := strings.SplitAfter(string(plain), "\n")
	a, b := filepath.Join(dir, "events.json.00000001"), filepath.Join(dir, "events.json.00000002")
	os.WriteFile(a, []byte(strings.Join(lines[:len(lines)*6/10], "")), 0o644)
	os.WriteFile(b, []byte(strings.Join(lines[len(lines)*4/10:], "")), 0o644)
	rep, errOut := analyzeJSON(t, nil, time.Now(), b, a)
	if !near(rep.TotalHoldSeconds, once.TotalHoldSeconds) {
		t.Errorf("overlapping rotation: %.6f s; once %.6f s", rep.TotalHoldSeconds, once.TotalHoldSeconds)
	}
	if len(rep.Inputs) != 2 || rep.Inputs[0].Name != a || rep.Inputs[1].DuplicateEvents == 0 ||
		rep.Inputs[1].DuplicateEvents == rep.Inputs[1].Events || !strings.Contains(errOut, "overlapping input: ") {
		t.Errorf("overlapping rotation: inputs %+v, stderr %q", rep.Inputs, errOut)
	}
}

// TestAnalyzeEscapesAndAligns: a user name with a newline and an escape
// sequence stays on its row, shown escaped, and CJK names keep the
// columns aligned in terminal cells.
func TestAnalyzeEscapesAndAligns(t *testing.T) {
	var log bytes.Buffer
	users := []string{"app", "結帳ユーザー", "evil\x1b[2J\nuser\tx", "x\u009b31m"}
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC).UnixMicro()
	for i, u := range users {
		for j := range 3 {
			start := t0 + int64(i*1000000+j*100000)
			line, _ := json.Marshal(map[string]any{"client": "10.0.0.1:4000" + fmt.Sprint(i), "digest": "0xAB", "duration_us": 1000 * (i + 1),
				"endtime_timestamp_us": start + int64(1000*(i+1)), "event": "COM_QUERY", "hostgroup_id": 0,
				"query": "/* conn_tag:checkout */ SELECT '\x1b]0;pwned\x07'", "rows_sent": 1, "schemaname": "shop",
				"server": "127.0.0.1:3307", "starttime_timestamp_us": start, "thread_id": 10 + i, "username": u})
			log.Write(append(line, '\n'))
		}
	}
	for _, format := range []string{"table", "markdown"} {
		out, errOut, err := runAnalyze(t, bytes.NewReader(log.Bytes()), time.Now(), "--format", format, "--group-by", "user", "-")
		if err != nil {
			t.Fatalf("%s: %v %s", format, err, errOut)
		}
		if strings.ContainsAny(out, "\x1b\x07\r\t\u009b") {
			t.Errorf("%s: a control character reached the output:\n%q", format, out)
		}
		if !strings.Contains(out, `evil\x1b[2J\nuser\tx`) {
			t.Errorf("%s: the user is not shown escaped:\n%s", format, out)
		}
		if format != "table" {
			continue
		}
		lines := strings.Split(out, "\n")
		// Header and four rows, each one line, the HOLD s column ending in
		// the same terminal cell.
		prof := lines[2:7]
		end := -1
		for _, l := range prof {
			// The header's "HOLD s" and the rows' "0.0xx" end the column.
			i, w := strings.Index(l, "HOLD s"), len("HOLD s")
			if i < 0 {
				i, w = strings.Index(l, "  0.0")+2, len("0.012")
			}
			if i < 2 {
				t.Fatalf("profile line without hold: %q\n%s", l, out)
			}
			cellEnd := termtext.Width(l[:i]) + w
			if end < 0 {
				end = cellEnd
			} else if cellEnd != end {
				t.Errorf("HOLD s column ends at cell %d in %q, %d in the header", cellEnd, l, end)
			}
		}
		if lines[7] != "" {
			t.Errorf("the profile has more than four rows (a name broke a line?):\n%s", out)
		}
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
	if !strings.Contains(errOut, "truncated") || !strings.Contains(errOut, "bad.json: skipped 1 malformed") {
		t.Errorf("stderr lacks the truncation and malformed line warnings:\n%s", errOut)
	}
	if !strings.Contains(out, "bad.json: ") || !strings.Contains(out, ", 1 malformed") || !strings.Contains(out, "checkout_completion") {
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
		{[]string{"analyze", "--since", "yesterday", statesLog}, "give a duration before now"},
		{[]string{"analyze", "--since", "2026-12-02T09:00:00Z", "--until", "2026-12-02T08:00:00Z", statesLog}, "swap them"},
		{[]string{"analyze", "/nonexistent/events.json"}, "check the path"},
		{[]string{"analyze", "--tz", "Mars/Olympus", statesLog}, "IANA name"},
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
		{[]string{"analyze", "--tag", "nosuchtag", statesLog}, "no hold in the input matches the filter (tags seen: "},
		{[]string{"analyze", "--since", "2020-01-01", "--until", "2020-01-02", statesLog}, "between 2020-01-01 00:00:00.000 and"},
	} {
		code, out, errOut := runCLI(t, tt.args...)
		if code != 1 || !strings.Contains(errOut, tt.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 1 || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", tt.args, code, out, errOut, tt.want)
		}
	}
}

// TestDedupRemembersOnlyTheOverlap: reading rotated logs, only the events
// a later file can also hold are remembered, so memory follows the
// overlap, not the logs' length; the overlap is still found whole.
func TestDedupRemembersOnlyTheOverlap(t *testing.T) {
	b, err := os.ReadFile(statesLog) // 187 events over 79 s
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	dir := t.TempDir()
	first, second := filepath.Join(dir, "events.json.1"), filepath.Join(dir, "events.json.2")
	os.WriteFile(first, []byte(strings.Join(lines[:180], "")), 0o644)
	os.WriteFile(second, []byte(strings.Join(lines[170:], "")), 0o644)
	s := newEventStream(context.Background(), []string{second, first}, nil, collector.EventsLogConfig{})
	defer s.Close()
	read := 0
	for s.Next() {
		read++
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if read != len(lines) || s.sources[1].dups != 10 {
		t.Errorf("read %d events of %d, %d duplicates of 10", read, len(lines), s.sources[1].dups)
	}
	// Remembered: the first file's events that end at most dedupSlackUS
	// before the second file's first event ends.
	r := collector.OpenEventsLog(context.Background(), []string{second}, collector.EventsLogConfig{})
	r.Next()
	from := r.Event().EndUS - dedupSlackUS
	r.Close()
	want := 0
	r = collector.OpenEventsLog(context.Background(), []string{first}, collector.EventsLogConfig{})
	for r.Next() {
		if r.Event().EndUS >= from {
			want++
		}
	}
	r.Close()
	if len(s.seen) != want || want >= 180 {
		t.Errorf("%d events remembered; want the %d of the first file's 180 that end in its last seconds", len(s.seen), want)
	}
	t.Logf("%d events remembered of %d read", len(s.seen), read)
}
