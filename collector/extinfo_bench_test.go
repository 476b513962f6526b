package collector

import (
	"fmt"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
)

// captureFile is a real ProxySQL 2.7.1 processlist with extended_info:
// three samples of 14 sessions in every state (internal/testdata/proxysql).
const captureFile = "../internal/testdata/proxysql/processlist_extended_2.7.1.tsv"

// captureSamples returns the capture's rows, sample by sample.
func captureSamples(tb testing.TB) [][]ProcesslistRow {
	tb.Helper()
	r, err := OpenProcesslist([]string{captureFile})
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	var samples [][]ProcesslistRow
	for r.Next() {
		row := *r.Row()
		if n := len(samples); n == 0 || !samples[n-1][0].SampleTime.Equal(row.SampleTime) {
			samples = append(samples, nil)
		}
		samples[len(samples)-1] = append(samples[len(samples)-1], row)
	}
	if err := r.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(samples) != 3 || len(samples[0]) != 14 {
		tb.Fatalf("capture: %d samples, want 3 of 14 rows", len(samples))
	}
	return samples
}

// pinReasonScan is pinReason as it was before attrib.ParseExtInfo: a scan
// of the document per key, in order, until one applies.
func pinReasonScan(ext string) string {
	if n, ok := attrib.JSONInt(ext, `"active_transactions"`); ok && n > 0 {
		return PinReasonTransaction
	}
	for _, k := range pinReasons {
		if k.key == attrib.ExtAutoIncrementDelay {
			if attrib.AutoIncrementDelay(ext) {
				return k.reason
			}
			continue
		}
		if attrib.JSONTrue(ext, attrib.ExtKeyName[k.key]) {
			return k.reason
		}
	}
	return pinReasonUnexplainedIdle
}

// pinReasonOfDoc is pinReason of one document.
func pinReasonOfDoc(doc string) string {
	e := attrib.ParseExtInfo(doc)
	return pinReason(&e)
}

// parseExtScan is parseExt as the sampler read extended_info before: the
// keys each kind of row needed, one scan each (the backend's four
// counters and auto_increment_delay_token for a held session, status for a
// waiting one, the pin reason's keys until one applies).
func parseExtScan(r *ProcesslistRow, ext *attrib.ExtInfo) (_ *attrib.ExtInfo, reason string) {
	if !attrib.NeedsExtInfo(r) {
		return nil, ""
	}
	doc := r.ExtendedInfo.String
	if !r.SrvHost.Valid {
		*ext = attrib.ScanExtInfo(doc, attrib.ExtStatus)
		return ext, ""
	}
	*ext = attrib.ScanExtInfo(doc, attrib.ExtThreadID, attrib.ExtConnpollGet, attrib.ExtConnpollPut, attrib.ExtQuestions,
		attrib.ExtAutoIncrementDelay)
	if !r.Info.Valid {
		reason = pinReasonScan(doc)
	}
	return ext, reason
}

// TestExtInfoOnePassSameSample feeds the real capture to two samplers, one
// reading extended_info in one pass, one key by key as before: every
// sample gives the same holds and pin reasons.
func TestExtInfoOnePassSameSample(t *testing.T) {
	samples := captureSamples(t)
	st := newStore(1000, time.Now)
	onePass := newProxySQLSessions("px", st, ProcesslistConfig{}, false, false, time.Second, nil)
	scan := newProxySQLSessions("px", newStore(1000, time.Now), ProcesslistConfig{}, false, false, time.Second, nil)
	scan.parseExt = parseExtScan
	reasons := map[string]int{}
	for _, rows := range samples {
		at := rows[0].SampleTime
		onePass.sample(at, append([]ProcesslistRow(nil), rows...))
		scan.sample(at, append([]ProcesslistRow(nil), rows...))
		if !reflect.DeepEqual(onePass.curReasons, scan.curReasons) {
			t.Fatalf("%v: pin reasons %v, key by key %v", at, onePass.curReasons, scan.curReasons)
		}
		got, want := onePass.sampler.Pending(), scan.sampler.Pending()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%v: holds\n%+v\nkey by key\n%+v", at, got, want)
		}
		waiting, backends := 0, 0
		for _, h := range got {
			if h.Waiting {
				waiting++
			}
			if h.Backend.Thread != 0 {
				backends++
			}
		}
		// The capture's states: 5 holding a backend (named by its thread
		// id), 3 waiting for one.
		if len(got) != 8 || waiting != 3 || backends != 5 {
			t.Fatalf("%v: %d holds, %d waiting, %d with a backend thread; want 8, 3, 5", at, len(got), waiting, backends)
		}
		for _, r := range onePass.curReasons {
			reasons[r]++
		}
	}
	if reasons[PinReasonTransaction] != 6 || reasons[PinReasonUserVariable] != 3 {
		t.Fatalf("pin reasons over the 3 samples: %v; want 6 transaction, 3 user_variable", reasons)
	}
}

// FuzzPinReasonOnePass: the reason from the one-pass reading is the one the
// key by key scans gave.
func FuzzPinReasonOnePass(f *testing.F) {
	for _, rows := range captureSamples(f)[:1] {
		for _, r := range rows {
			f.Add(r.ExtendedInfo.String)
		}
	}
	f.Add(`{"active_transactions": 0, "get_lock": true, "MultiplexDisabled_ext": true}`)
	f.Add(`"auto_increment_delay_token": 0 "auto_increment_delay_token":7`)
	f.Fuzz(func(t *testing.T, doc string) {
		if got, want := pinReasonOfDoc(doc), pinReasonScan(doc); got != want {
			t.Fatalf("one pass %q, key by key %q, in %q", got, want, doc)
		}
	})
}

// extendedSample builds a processlist of n sessions from the capture's
// first sample, copies with new session and thread ids, each extended_info
// as ProxySQL 2.7.1 wrote it. every 0 keeps the capture's mix (5 of 14
// sessions hold a backend, 3 wait for one); every k makes one session in k
// hold or wait (the capture's such sessions in turn) and the others idle.
// withAll keeps extended_info on every row (the former query); otherwise
// only on the rows attrib.NeedsExtInfo reads, as queryProcesslist returns
// them.
func extendedSample(capture []ProcesslistRow, n, every int, withAll bool) []ProcesslistRow {
	var busy, idle []ProcesslistRow
	for _, r := range capture {
		if attrib.NeedsExtInfo(&r) {
			busy = append(busy, r)
		} else {
			idle = append(idle, r)
		}
	}
	rows := make([]ProcesslistRow, n)
	for i := range rows {
		r := &rows[i]
		switch {
		case every == 0:
			*r = capture[i%len(capture)]
		case i%every == 0:
			*r = busy[(i/every)%len(busy)]
		default:
			*r = idle[i%len(idle)]
		}
		r.SessionID = int64(i + 1)
		r.ThreadID = int64(i)
		if !withAll && !attrib.NeedsExtInfo(r) {
			r.ExtendedInfo.Valid, r.ExtendedInfo.String = false, ""
		}
	}
	return rows
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProcesslistExtended measures one sample of 10k, 100k and 1M
// sessions with real extended_info, in CPU ms per sample (the process's, GC
// included). mix=capture is the capture's rows (5 of 14 sessions hold a
// backend, 3 wait for one); mix=2pct has one session in 50 holding or
// waiting, the rest idle: backends are bounded by the servers'
// max_connections, so a fleet's big session counts are mostly idle. "key_by_key" is the former path as baseline: extended_info on
// every row, read one scan per key; "one_pass" reads it once, only on the
// rows that hold or wait. 1M runs only without -short.
func BenchmarkProcesslistExtended(b *testing.B) {
	capture := captureSamples(b)[0]
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		if n > 100_000 && testing.Short() {
			continue
		}
		for _, mix := range []struct {
			name  string
			every int
		}{{"capture", 0}, {"2pct", 50}} {
			for _, v := range []struct {
				name    string
				withAll bool
				parse   func(*ProcesslistRow, *attrib.ExtInfo) (*attrib.ExtInfo, string)
			}{{"key_by_key", true, parseExtScan}, {"one_pass", false, parseExt}} {
				b.Run(fmt.Sprintf("sessions=%d/mix=%s/%s", n, mix.name, v.name), func(b *testing.B) {
					rows := extendedSample(capture, n, mix.every, v.withAll)
					st := newStore(1000, time.Now)
					ps := newProxySQLSessions("px", st, ProcesslistConfig{}, false, false, 10*time.Second, nil)
					ps.parseExt = v.parse
					at := time.Unix(1_800_000_000, 0)
					ps.sample(at, rows) // warm: sessions and tags known
					b.ReportAllocs()
					i := 0
					cpu := cpuTime()
					for b.Loop() {
						i++
						ps.sample(at.Add(time.Duration(i)*250*time.Millisecond), rows)
					}
					cpu = cpuTime() - cpu
					b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "ms/sample-cpu")
					b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/sample")
				})
			}
		}
	}
}
