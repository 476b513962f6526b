package collector

import (
	"database/sql"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
)

// TestReplayStates replays the small known workload of states/: a 5 s
// idle-in-transaction checkout_completion, 40 short reserve statements and
// 4 untagged 0.7 s statements, sampled every ~290 ms.
func TestReplayStates(t *testing.T) {
	for _, tc := range []struct {
		samples string
		pins    bool // extended info: pin reasons shown
	}{
		{"testdata/states_processlist_samples.tsv", false},
		{"testdata/states_processlist_samples_extended.tsv", true},
	} {
		t.Run(filepath.Base(tc.samples), func(t *testing.T) {
			with := replay(t, tc.samples, "testdata/states_eventslog_events.json", 5*time.Second)
			alone := replay(t, tc.samples, "", 5*time.Second)
			for _, want := range []struct {
				tag              string
				hold             float64 // ground truth of the workload
				eventsTol        float64
				sampledTol       float64
				sampledAloneHold float64 // what sampling alone gets: the hog's tag is never seen
			}{
				{"checkout_completion", 5.0, 0.05, 0.15, 0},
				{"reserve", 2.1, 0.10, 0.50, -1},
				{UntaggedTag, 2.8, 0.10, 0.25, -1},
			} {
				ev := holdOf(with, "px", SourceProxySQLEvents, want.tag)
				pl := holdOf(with, "px", SourceProxySQLProcesslist, want.tag)
				pa := holdOf(alone, "px", SourceProxySQLProcesslist, want.tag)
				t.Logf("%-20s truth %.2f  events %.3f  samples+events %.3f  samples alone %.3f", want.tag, want.hold, ev, pl, pa)
				if math.Abs(ev-want.hold)/want.hold > want.eventsTol {
					t.Errorf("%s: events log hold %.3f s, want %.2f ±%.0f%%", want.tag, ev, want.hold, 100*want.eventsTol)
				}
				if math.Abs(pl-want.hold)/want.hold > want.sampledTol {
					t.Errorf("%s: sampled hold with the events log %.3f s, want %.2f ±%.0f%%", want.tag, pl, want.hold, 100*want.sampledTol)
				}
				if want.sampledAloneHold == 0 && pa != 0 {
					t.Errorf("%s: sampling alone attributed %.3f s, but it never sees the tag", want.tag, pa)
				}
			}
			unknown := holdOf(alone, "px", SourceProxySQLProcesslist, UnknownTag)
			t.Logf("samples alone: %.3f s unknown", unknown)
			if unknown < 4.5 {
				t.Errorf("samples alone: %.3f s unknown; the 5 s idle transaction must land there, not be dropped", unknown)
			}
			if u := holdOf(with, "px", SourceProxySQLProcesslist, UnknownTag); u > 0.3 {
				t.Errorf("with the events log %.3f s stays unknown", u)
			}
			e := with.series[seriesKey{"px", SourceProxySQLProcesslist}].tags["checkout_completion"]
			reason := PinReasonNoExtendedInfo
			if tc.pins {
				reason = PinReasonTransaction
			}
			if e == nil || e.pinnedSecs[reason] < 4 {
				t.Errorf("checkout_completion pinned seconds %v; want ~5 s under %q", e, reason)
			}
		})
	}
}

// readSnapshot reads a capture of stats_mysql_processlist without
// sample_ts (mariadb --batch output) as rows of one sample.
func readSnapshot(t *testing.T, path string) []ProcesslistRow {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var sb strings.Builder
	for i, l := range lines {
		if i == 0 {
			sb.WriteString("sample_ts\t" + l + "\n")
		} else {
			sb.WriteString("2026-12-02T08:00:00Z\t" + l + "\n")
		}
	}
	tmp := filepath.Join(t.TempDir(), "snap.tsv")
	os.WriteFile(tmp, []byte(sb.String()), 0o644)
	r, err := OpenProcesslist([]string{tmp})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var rows []ProcesslistRow
	for r.Next() {
		rows = append(rows, *r.Row())
	}
	if n, bad := r.Malformed(); n > 0 {
		t.Fatalf("%s: malformed %v", path, bad)
	}
	return rows
}

// TestPinReasonStates checks the reason read from each session state of
// the extended snapshot.
func TestPinReasonStates(t *testing.T) {
	rows := readSnapshot(t, "testdata/states_snapshot_extended2.tsv")
	got := map[int64]string{}
	for _, r := range rows {
		if r.SrvHost.Valid && !r.Info.Valid {
			got[r.SessionID] = pinReasonOfDoc(r.ExtendedInfo.String)
		} else {
			got[r.SessionID] = "not pinned"
		}
	}
	t.Logf("%v", got)
	// 77 idle autocommit (no backend), 78 idle in BEGIN .. FOR UPDATE, 79
	// idle after SET autocommit=0 and a statement, 80 running.
	want := map[int64]string{77: "not pinned", 78: PinReasonTransaction, 79: PinReasonTransaction, 80: "not pinned"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("session %d: %q, want %q", id, got[id], w)
		}
	}
}

func TestPinReasonKeys(t *testing.T) {
	for _, tc := range []struct{ ext, want string }{
		{`{"active_transactions": 1, "backends":[]}`, PinReasonTransaction},
		{`{"active_transactions":0,"status":{"get_lock":false,"user_variable": true}}`, PinReasonUserVariable},
		{`{"active_transactions":0,"status":{"lock_tables":true,"user_variable":true}}`, PinReasonLockTables},
		{`{"conn":{"auto_increment_delay_token": 3}}`, PinReasonAutoIncrement},
		{`{"conn":{"MultiplexDisabled":true}}`, PinReasonMultiplexOff},
		{`{}`, pinReasonUnexplainedIdle},
		{``, pinReasonUnexplainedIdle},
	} {
		if got := pinReasonOfDoc(tc.ext); got != tc.want {
			t.Errorf("pinReason(%s) = %q, want %q", tc.ext, got, tc.want)
		}
	}
}

func FuzzPinReason(f *testing.F) {
	f.Add(`{"active_transactions": 1}`)
	f.Add(`{"status":{"get_lock": true}}`)
	f.Add(`"active_transactions":`)
	f.Add(`"auto_increment_delay_token":9999999999999999999999`)
	f.Fuzz(func(t *testing.T, ext string) {
		if pinReasonOfDoc(ext) == "" {
			t.Fatal("empty reason")
		}
	})
}

// readTSV reads a mariadb --batch capture as text rows.
func readTSV(t testing.TB, path string) ([]string, [][]sql.NullString) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var rows [][]sql.NullString
	for _, l := range lines[1:] {
		var row []sql.NullString
		for _, f := range strings.Split(l, "\t") {
			row = append(row, attrib.UnescapeTSV(f))
		}
		rows = append(rows, row)
	}
	return strings.Split(lines[0], "\t"), rows
}

// digestRows reads a digest capture, reordered to queryDigest's columns.
func digestRows(t testing.TB, path string) []digestRow {
	cols, raw := readTSV(t, path)
	idx := map[string]int{}
	for i, c := range cols {
		idx[c] = i
	}
	order := []string{"hostgroup", "schemaname", "username", "client_address", "digest", "digest_text", "count_star", "first_seen", "last_seen", "sum_time"}
	var out []digestRow
	for _, r := range raw {
		v := make([]sql.NullString, len(order))
		for i, c := range order {
			v[i] = r[idx[c]]
		}
		dr, err := parseDigestRow(v)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, dr)
	}
	return out
}

// TestDigestDeltasWorkload takes the digest table before and after the
// workload: per-tag statement counts are the deltas.
func TestDigestDeltasWorkload(t *testing.T) {
	before := digestRows(t, "testdata/workload_stats_mysql_query_digest.before.tsv")
	after := digestRows(t, "testdata/workload_stats_mysql_query_digest.after.tsv")
	want := loadExpected(t)
	d := newDigestState()
	batch := map[string]*tagDelta{}
	d.apply(before, true, batch)
	if len(batch) != 0 {
		t.Fatalf("the first poll is a baseline, got %v", batch)
	}
	d.apply(after, true, batch)
	for name, w := range want {
		tag := expectedTagName(name)
		got := batch[tag]
		if got == nil {
			t.Errorf("%s: no digest delta", tag)
			continue
		}
		t.Logf("%-20s statements %6.0f (client %d)  statement time %.3f s", tag, got.Stmts, w.Statements, got.Active)
		if tag == UntaggedTag {
			continue // BEGIN and COMMIT of every tag land here too
		}
		// The digest counts COM_STMT_PREPARE too: admin_report prepares once.
		if math.Abs(got.Stmts-float64(w.Statements)) > 1 {
			t.Errorf("%s: %v statements from digests, client ran %d", tag, got.Stmts, w.Statements)
		}
	}
	// Comments stripped: the tag cannot be read; nothing claims "untagged".
	d2 := newDigestState()
	b2 := map[string]*tagDelta{}
	d2.apply(before, false, b2)
	d2.apply(after, false, b2)
	if len(b2) != 1 || b2[UnknownTag] == nil {
		t.Errorf("comments not kept: %v; want everything under %q", b2, UnknownTag)
	}
	// first_seen a second off (ProxySQL converts it at each read): the
	// same digest, only what it ran since counts.
	bj := map[string]*tagDelta{}
	dj := newDigestState()
	dj.apply(before, true, bj)
	jitter := append([]digestRow(nil), before...)
	for i := range jitter {
		jitter[i].firstSeen += 1 - 2*int64(i%2)
		jitter[i].count++
	}
	dj.apply(jitter, true, bj)
	var nj float64
	for _, v := range bj {
		nj += v.Stmts
	}
	if nj != float64(len(before)) {
		t.Errorf("first_seen a second off: %v statements, want %d (one per digest)", nj, len(before))
	}
	// A reset (stats_mysql_query_digest_reset): counts start over and are
	// counted whole, never as a negative delta.
	b3 := map[string]*tagDelta{}
	reset := append([]digestRow(nil), before...)
	for i := range reset {
		reset[i].count = 1
	}
	d.apply(reset, true, b3)
	var n float64
	for _, v := range b3 {
		n += v.Stmts
		if v.Stmts < 0 || v.Active < 0 {
			t.Errorf("negative delta after reset: %+v", v)
		}
	}
	if n != float64(len(reset)) {
		t.Errorf("after a reset: %v statements, want %d (each digest's new count)", n, len(reset))
	}
}

func FuzzParseDigestRow(f *testing.F) {
	f.Add("0", "shop", "app", "", "0x1", "/* conn_tag:a */ SELECT ?", "8", "1796200049", "1796200069", "5613599")
	f.Add("x", "", "", "", "", "", "-1", "NULL", "", "9999999999999999999999")
	f.Fuzz(func(t *testing.T, a, b, c, d, e, g, h, i, j, k string) {
		v := []sql.NullString{attrib.UnescapeTSV(a), attrib.UnescapeTSV(b), attrib.UnescapeTSV(c), attrib.UnescapeTSV(d), attrib.UnescapeTSV(e), attrib.UnescapeTSV(g), attrib.UnescapeTSV(h), attrib.UnescapeTSV(i), attrib.UnescapeTSV(j), attrib.UnescapeTSV(k)}
		r, err := parseDigestRow(v)
		if err == nil && (r.count < 0 || r.sumUS < 0) {
			t.Fatalf("negative counts accepted: %+v", r)
		}
		if err == nil {
			ds := newDigestState()
			batch := map[string]*tagDelta{}
			ds.apply([]digestRow{r}, true, batch)
			ds.apply([]digestRow{r}, true, batch)
		}
	})
}

func TestPoolAndGlobalCaptures(t *testing.T) {
	for _, path := range []string{"testdata/states_stats_mysql_connection_pool.tsv", "testdata/workload_stats_mysql_connection_pool.after.tsv"} {
		cols, raw := readTSV(t, path)
		idx := map[string]int{}
		for i, c := range cols {
			idx[c] = i
		}
		for _, r := range raw {
			var v []sql.NullString
			for _, c := range []string{"hostgroup", "srv_host", "srv_port", "status", "ConnUsed", "ConnFree", "ConnOK", "ConnERR", "Queries", "Latency_us"} {
				v = append(v, r[idx[c]])
			}
			p, err := parsePoolRow(v)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			t.Logf("%s: %+v", filepath.Base(path), p)
			if p.Server != "127.0.0.1:3307" || p.ConnFree+p.ConnUsed == 0 || p.Queries == 0 {
				t.Errorf("%s: %+v", path, p)
			}
		}
	}
	_, raw := readTSV(t, "testdata/workload_stats_mysql_global.after.tsv")
	g, bad := parseGlobal(raw)
	t.Logf("global %+v", *g)
	if bad != 0 || g.clientConnections < 0 {
		t.Errorf("global: %d malformed, %+v", bad, g)
	}
}

func FuzzParsePoolRow(f *testing.F) {
	f.Add("0", "127.0.0.1", "3307", "ONLINE", "0", "3", "3", "0", "179", "397")
	f.Add("NULL", "NULL", "", "", "-1", "x", "", "", "", "")
	f.Fuzz(func(t *testing.T, a, b, c, d, e, g, h, i, j, k string) {
		v := []sql.NullString{attrib.UnescapeTSV(a), attrib.UnescapeTSV(b), attrib.UnescapeTSV(c), attrib.UnescapeTSV(d), attrib.UnescapeTSV(e), attrib.UnescapeTSV(g), attrib.UnescapeTSV(h), attrib.UnescapeTSV(i), attrib.UnescapeTSV(j), attrib.UnescapeTSV(k)}
		p, err := parsePoolRow(v)
		if err == nil && (p.ConnUsed < 0 || p.Queries < 0) {
			t.Fatalf("negative accepted: %+v", p)
		}
		parseGlobal([][]sql.NullString{v[:2], v})
	})
}

func TestStatsRecordingRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "px", "stats_mysql_global.tsv")
	r, err := attrib.NewTableRecorder(path, "stats_mysql_global")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 8, 0, 0, 123456000, time.UTC)
	cols := []string{"Variable_Name", "Variable_Value"}
	rows := [][]sql.NullString{{{String: "a\tb", Valid: true}, {}}, {{String: "NULL", Valid: true}, {String: "1", Valid: true}}}
	if err := r.Write(at, cols, rows); err != nil {
		t.Fatal(err)
	}
	// A column change writes a new header.
	if err := r.Write(at.Add(time.Second), cols[:1], [][]sql.NullString{{{String: "x", Valid: true}}}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	rec, err := attrib.ReadStatsRecording(path)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Table != "stats_mysql_global" || len(rec.Rows) != 3 || len(rec.Columns) != 1 || rec.Rows[0].Values[0].String != "a\tb" ||
		rec.Rows[0].Values[1].Valid || rec.Rows[1].Values[0].String != "NULL" || !rec.Rows[0].SampleTime.Equal(at) {
		t.Errorf("round trip: %+v", rec)
	}
}
