package attrib

import (
	"database/sql"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestProcesslistRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 8, 41, 14, 397123000, time.UTC)
	rows := []ProcesslistRow{
		{SampleTime: at, ThreadID: 1, SessionID: 117, User: sql.NullString{String: "app", Valid: true},
			CliHost: sql.NullString{String: "127.0.0.1", Valid: true}, CliPort: sql.NullInt64{Int64: 57898, Valid: true},
			Hostgroup: sql.NullInt64{Int64: 0, Valid: true}, SrvHost: sql.NullString{String: "127.0.0.1", Valid: true},
			SrvPort: sql.NullInt64{Int64: 3307, Valid: true}, Command: sql.NullString{String: "Query", Valid: true}, TimeMS: 12,
			Info:         sql.NullString{String: "/* conn_tag:x */ SELECT 'a\tb\nc\\d', \x00", Valid: true},
			ExtendedInfo: sql.NullString{String: `{"a":"NULL"}`, Valid: true}},
		{SampleTime: at.Add(100 * time.Millisecond), SessionID: 118, DB: sql.NullString{String: "NULL", Valid: true},
			Info: sql.NullString{String: "", Valid: true}},
	}
	path := filepath.Join(t.TempDir(), "processlist.tsv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := NewProcesslistWriter(f)
	if err := w.Write(rows[:1]); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows[1:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, err := OpenProcesslist([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []ProcesslistRow
	for r.Next() {
		got = append(got, *r.Row())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Malformed(); n != 0 || !reflect.DeepEqual(got, rows) {
		t.Errorf("round trip: %d malformed\n got %+v\nwant %+v", n, got, rows)
	}
}

func TestProcesslistReadsCaptures(t *testing.T) {
	for _, path := range []string{"testdata/workload_processlist_samples.tsv", "testdata/states_processlist_samples.tsv"} {
		r, err := OpenProcesslist([]string{path})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for r.Next() {
			n++
		}
		bad, lines := r.Malformed()
		r.Close()
		if r.Err() != nil || bad != 0 || n == 0 {
			t.Errorf("%s: %d rows, %d malformed %v, err %v", path, n, bad, lines, r.Err())
		}
	}
}

func TestProcesslistRejectsNewerVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v9.tsv")
	os.WriteFile(path, []byte("# holdtime processlist v9\nsample_ts\tSessionID\n"), 0o644)
	if _, err := OpenProcesslist([]string{path}); err == nil {
		t.Error("a version 9 recording was accepted")
	}
}

// processlistRows parses processlist rows written as in testdata (the
// header of states_processlist_samples.tsv, then one row per line).
func processlistRows(t *testing.T, lines ...string) []ProcesslistRow {
	t.Helper()
	const header = "sample_ts\tThreadID\tSessionID\tuser\tdb\tcli_host\tcli_port\thostgroup\tl_srv_host\tl_srv_port\tsrv_host\tsrv_port\tcommand\ttime_ms\tinfo\tstatus_flags\textended_info"
	path := filepath.Join(t.TempDir(), "processlist.tsv")
	text := header + "\n"
	for _, l := range lines {
		text += l + "\n"
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := OpenProcesslist([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var rows []ProcesslistRow
	for r.Next() {
		rows = append(rows, *r.Row())
	}
	if n, bad := r.Malformed(); n != 0 || r.Err() != nil {
		t.Fatalf("%d malformed rows %v, err %v", n, bad, r.Err())
	}
	return rows
}

// TestSamplerForgetsTagBetweenTransactions: one ProxySQL session serves an
// app pool, so its next transaction may have another tag. A transaction
// whose statements were all too fast to sample must come out unknown, not
// with the tag of the transaction before it.
func TestSamplerForgetsTagBetweenTransactions(t *testing.T) {
	const (
		held = "\t0\t7\tapp\tshop\t127.0.0.1\t37926\t0\t127.0.0.1\t35558\t127.0.0.1\t3307\t"
		free = "\t0\t7\tapp\tshop\t127.0.0.1\t37926\t0\tNULL\tNULL\tNULL\tNULL\t"
	)
	first := []string{
		"2026-12-02T08:27:29.000" + held + "Query\t0\t/* conn_tag:checkout */ SELECT * FROM orders WHERE id=1 FOR UPDATE\t0\tNULL",
		"2026-12-02T08:27:29.200" + held + "Sleep\t0\tNULL\t0\tNULL",
		"2026-12-02T08:27:29.400" + held + "Query\t0\tCOMMIT\t0\tNULL",
	}
	// The second transaction (tag refund, never sampled running) idles.
	second := []string{
		"2026-12-02T08:27:29.800" + held + "Sleep\t0\tNULL\t0\tNULL",
		"2026-12-02T08:27:30.000" + held + "Sleep\t0\tNULL\t0\tNULL",
		"2026-12-02T08:27:30.200" + free + "Sleep\t0\tNULL\tNULL\tNULL",
	}
	for _, tc := range []struct{ name, between string }{
		{"seen without a backend", "2026-12-02T08:27:29.600" + free + "Sleep\t0\tNULL\tNULL\tNULL"},
		{"seen beginning", "2026-12-02T08:27:29.600" + held + "Query\t0\tBEGIN\t0\tNULL"},
		{"seen starting a transaction after a comment", "2026-12-02T08:27:29.600" + held +
			"Query\t0\t/* app:refunds */ start transaction read write\t0\tNULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := append(append(append([]string{}, first...), tc.between), second...)
			var holds []SampledHold
			s := NewSampleAttributor(ProcesslistConfig{}, nil, func(h *SampledHold) { holds = append(holds, *h) })
			for _, r := range processlistRows(t, lines...) {
				s.Add(&r)
			}
			s.Flush()
			secondStart := time.Date(2026, 12, 2, 8, 27, 29, 800e6, time.UTC)
			n := 0
			for _, h := range holds {
				if h.At.Before(secondStart) {
					if h.Tag != "checkout" && !(h.Tag == UnknownTag && h.At.Equal(secondStart.Add(-200*time.Millisecond))) {
						t.Errorf("first transaction at %s: tag %q (%v), want checkout", h.At.Format(time.StampMilli), h.Tag, h.TagFrom)
					}
					continue
				}
				n++
				if h.Tag != UnknownTag || h.UnknownReason != ReasonIdleUnseen {
					t.Errorf("second transaction at %s: tag %q (%v), want %q", h.At.Format(time.StampMilli), h.Tag, h.TagFrom, UnknownTag)
				}
			}
			if n != 2 {
				t.Errorf("%d sampled holds of the second transaction, want 2: %+v", n, holds)
			}
		})
	}
}

// TestSamplerOutOfOrderSamples: a recording whose sample times go back (a
// clock step, files concatenated in the wrong order) credits no negative
// hold: the analyze report's sampled seconds never go backwards.
func TestSamplerOutOfOrderSamples(t *testing.T) {
	const held = "\t0\t7\tapp\tshop\t127.0.0.1\t37926\t0\t127.0.0.1\t35558\t127.0.0.1\t3307\t"
	lines := []string{
		"2026-12-02T08:27:29.000" + held + "Query\t0\t/* conn_tag:a */ SELECT 1\t0\tNULL",
		"2026-12-02T08:27:28.000" + held + "Query\t0\t/* conn_tag:a */ SELECT 1\t0\tNULL",
		"2026-12-02T08:27:28.500" + held + "Query\t0\t/* conn_tag:a */ SELECT 1\t0\tNULL",
		"2026-12-02T08:27:28.700" + held + "Query\t0\t/* conn_tag:a */ SELECT 1\t0\tNULL",
	}
	var total float64
	s := NewSampleAttributor(ProcesslistConfig{}, nil, func(h *SampledHold) {
		if h.Seconds < 0 {
			t.Errorf("sampled hold at %s: %v s", h.At.Format(time.StampMilli), h.Seconds)
		}
		total += h.Seconds
	})
	for _, r := range processlistRows(t, lines...) {
		s.Add(&r)
	}
	s.Flush()
	if st := s.Stats(); st.HeldSeconds < 0 || math.Abs(total-0.9) > 1e-9 {
		t.Errorf("held %v s (stats %v); want 0.9: 0 for the step back, 0.5 + 0.2 + 0.2", total, st.HeldSeconds)
	}
}
