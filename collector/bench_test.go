package collector

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// workloadLines returns the uncompressed workload events log.
func workloadLines(tb testing.TB) []byte {
	tb.Helper()
	f, err := os.Open("testdata/workload_events_slice.json.gz")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkEventsLog measures events per second on one core. "scan" (split
// lines) and "encoding_json" (split and json.Unmarshal the needed fields)
// are baselines; "parse" is the EventsReader, "attribute" adds the
// Attributor, "analyze" adds the per-tag Aggregator: the full pipeline.
func BenchmarkEventsLog(b *testing.B) {
	data := workloadLines(b)
	run := func(b *testing.B, body func() int64) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		var events int64
		for b.Loop() {
			events += body()
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	}
	b.Run("scan", func(b *testing.B) {
		run(b, func() int64 { return scanLines(data) })
	})
	b.Run("encoding_json", func(b *testing.B) {
		run(b, func() int64 { return unmarshalLines(data) })
	})
	b.Run("parse", func(b *testing.B) {
		run(b, func() int64 { return parseEvents(data) })
	})
	b.Run("attribute", func(b *testing.B) {
		run(b, func() int64 { return attributeEvents(data) })
	})
	b.Run("analyze", func(b *testing.B) {
		run(b, func() int64 { return analyzeEvents(data) })
	})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	b.Run("analyze_gzip", func(b *testing.B) {
		run(b, func() int64 { return analyzeEvents(gz.Bytes()) })
	})
}

// benchJSONEvent is the fields of an events log line the encoding_json
// baseline unmarshals.
type benchJSONEvent struct {
	ThreadID uint64 `json:"thread_id"`
	Start    int64  `json:"starttime_timestamp_us"`
	End      int64  `json:"endtime_timestamp_us"`
	Event    string `json:"event"`
	Query    string `json:"query"`
	Client   string `json:"client"`
	Username string `json:"username"`
	Server   string `json:"server"`
	HG       int    `json:"hostgroup_id"`
}

// scanLines is the "scan" baseline: it counts data's lines.
func scanLines(data []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 256<<10), 16<<20)
	var n int64
	for sc.Scan() {
		n++
	}
	return n
}

// unmarshalLines is the "encoding_json" baseline: it counts data's lines
// json.Unmarshal takes.
func unmarshalLines(data []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 256<<10), 16<<20)
	var n int64
	var e benchJSONEvent
	for sc.Scan() {
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			n++
		}
	}
	return n
}

// parseEvents counts the events the EventsReader reads from data.
func parseEvents(data []byte) int64 {
	r := NewEventsReader(context.Background(), bytes.NewReader(data), "bench", EventsLogConfig{})
	var n int64
	for r.Next() {
		n++
	}
	return n
}

// attributeEvents reads data's events and passes them to an Attributor;
// it returns how many it read.
func attributeEvents(data []byte) int64 {
	r := NewEventsReader(context.Background(), bytes.NewReader(data), "bench", EventsLogConfig{})
	holds := 0
	a := NewAttributor(AttributorConfig{}, func(*Hold) { holds++ })
	var n int64
	for r.Next() {
		a.Add(r.Event())
		n++
	}
	a.Flush()
	return n
}

// analyzeEvents is the full pipeline on data (plain or gzip): reader,
// Attributor, per-tag Aggregator and its report; it returns how many
// events it read.
func analyzeEvents(data []byte) int64 {
	r := NewEventsReader(context.Background(), bytes.NewReader(data), "bench", EventsLogConfig{})
	agg := NewAggregator(AnalyzeConfig{})
	a := NewAttributor(AttributorConfig{}, agg.AddHold)
	var n int64
	for r.Next() {
		a.Add(r.Event())
		n++
	}
	a.Flush()
	agg.Report(nil, nil)
	return n
}

// replayReader yields the workload log n times as one stream, each replay
// shifted in time by the log's span and given fresh session ids, as a long
// log of short-lived sessions would look. It calls onReplay before each.
type replayReader struct {
	lines    [][]byte
	n, i, ln int
	spanUS   int64
	buf      []byte
	onReplay func(i int)
}

func (r *replayReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.ln == len(r.lines) {
			r.ln = 0
			r.i++
		}
		if r.i == r.n {
			return 0, io.EOF
		}
		if r.ln == 0 && r.onReplay != nil {
			r.onReplay(r.i)
		}
		r.buf = shiftLine(r.buf[:0], r.lines[r.ln], int64(r.i)*r.spanUS, uint64(r.i)*1000)
		r.ln++
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// shiftLine rewrites the two timestamps and thread_id of an events log line.
func shiftLine(dst, line []byte, dt int64, dThread uint64) []byte {
	for _, k := range []struct {
		key   string
		delta int64
	}{{`"endtime_timestamp_us":`, dt}, {`"starttime_timestamp_us":`, dt}, {`"thread_id":`, int64(dThread)}} {
		i := bytes.Index(line, []byte(k.key))
		if i < 0 {
			continue
		}
		i += len(k.key)
		j := i
		for j < len(line) && line[j] >= '0' && line[j] <= '9' {
			j++
		}
		v, _ := strconv.ParseInt(string(line[i:j]), 10, 64)
		dst = append(dst, line[:i]...)
		dst = strconv.AppendInt(dst, v+k.delta, 10)
		line = line[j:]
	}
	dst = append(dst, line...)
	return append(dst, '\n')
}

// TestMemoryBoundedByOpenSessions replays the workload log 60 times as one
// stream (about 730,000 events, 340 MB) and checks that live heap after the
// 60th replay is no larger than after the 10th: memory follows open
// sessions and tags, not input length.
func TestMemoryBoundedByOpenSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 340 MB of events")
	}
	data := workloadLines(t)
	lines := bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	for i := range lines {
		lines[i] = bytes.TrimSuffix(lines[i], []byte("\n"))
	}
	const replays = 60
	heap := make(map[int]uint64)
	var attr *Attributor
	sessions := make(map[int]int)
	rr := &replayReader{lines: lines, n: replays, spanUS: 11_000_000, onReplay: func(i int) {
		if i == 10 || i == replays-1 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heap[i] = ms.HeapAlloc
			sessions[i] = attr.OpenSessions()
		}
	}}
	agg := NewAggregator(AnalyzeConfig{})
	attr = NewAttributor(AttributorConfig{SessionTimeoutUS: 30_000_000}, agg.AddHold)
	r := NewEventsReader(context.Background(), rr, "replay", EventsLogConfig{})
	var n int64
	for r.Next() {
		attr.Add(r.Event())
		n++
	}
	attr.Flush()
	if r.Err() != nil || r.Stats().Malformed != 0 {
		t.Fatalf("err %v, stats %+v", r.Err(), r.Stats())
	}
	rep := agg.Report(nil, nil)
	hog := rep.Tag("checkout_tax_quote")
	t.Logf("%d events; heap after replay 10: %d KiB (%d sessions), after replay %d: %d KiB (%d sessions); hog %.1f s",
		n, heap[10]>>10, sessions[10], replays-1, heap[replays-1]>>10, sessions[replays-1], hog.HoldSeconds)
	if n != int64(replays*len(lines)) {
		t.Errorf("read %d events, want %d", n, replays*len(lines))
	}
	if math := hog.HoldSeconds / 30.325303; math < replays*0.99 || math > replays*1.01 {
		t.Errorf("hog hold %.1f s over %d replays; want %d x 30.3 s", hog.HoldSeconds, replays, replays)
	}
	// Live heap includes the 5.6 MB of test input; allow 1 MiB of noise.
	if heap[replays-1] > heap[10]+1<<20 {
		t.Errorf("heap grew from %d KiB to %d KiB with input length", heap[10]>>10, heap[replays-1]>>10)
	}
}
