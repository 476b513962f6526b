package collector

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/locks"
	"github.com/holdtime/holdtime/testenv"
)

// TestOTLPFromConntag sends conntag's spans through its real exporter path
// (sdktrace + otlptracehttp) to the receiver, as protobuf, and as JSON via a
// relay that re-encodes the same request.
func TestOTLPFromConntag(t *testing.T) {
	d := testenv.NewDatabase(t)
	for _, format := range []string{"protobuf", "json"} {
		t.Run(format, func(t *testing.T) {
			c, err := New(Config{OTLP: OTLPConfig{Enabled: true}})
			if err != nil {
				t.Fatal(err)
			}
			recv := httptest.NewServer(c.Handler())
			defer recv.Close()
			url := recv.URL
			if format == "json" {
				relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					var req coltrace.ExportTraceServiceRequest
					if err := proto.Unmarshal(b, &req); err != nil {
						http.Error(w, err.Error(), 400)
						return
					}
					js, _ := protojson.Marshal(&req)
					resp, err := http.Post(recv.URL+"/v1/traces", "application/json", bytes.NewReader(js))
					if err != nil {
						http.Error(w, err.Error(), 502)
						return
					}
					resp.Body.Close()
					if resp.StatusCode != 200 {
						http.Error(w, resp.Status, resp.StatusCode)
						return
					}
					out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
					w.Header().Set("Content-Type", "application/x-protobuf")
					w.Write(out)
				}))
				defer relay.Close()
				url = relay.URL
			}
			ctx := context.Background()
			exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url+"/v1/traces"))
			if err != nil {
				t.Fatal(err)
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			db, err := conntag.Open("mysql", d.DSN(), conntag.WithTracerProvider(tp), conntag.WithSessionID())
			if err != nil {
				t.Fatal(err)
			}
			tctx := conntag.WithTag(ctx, "otlp_checkout")
			var client time.Duration
			for range 3 {
				start := time.Now()
				tx, err := db.BeginTx(tctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				tx.ExecContext(tctx, "SELECT SLEEP(0.05)")
				time.Sleep(100 * time.Millisecond) // the workload: idle inside the transaction
				tx.Commit()
				client += time.Since(start)
			}
			db.ExecContext(tctx, "SELECT no_such_column")
			db.Close()
			if err := tp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			e := c.st.series[seriesKey{"app", SourceOTLP}].tags["otlp_checkout"]
			if e == nil {
				t.Fatalf("no otlp figures: %+v", c.st.series)
			}
			t.Logf("client %.3f s; otlp hold %.3f active %.3f idle %.3f statements %v errors %v",
				client.Seconds(), e.total.Hold, e.total.Active, e.total.Idle, e.total.Stmts, e.total.Errors)
			// The last hold (the failed statement) adds a few ms.
			if d := pct(e.total.Hold, client.Seconds()); d < -15 || d > 15 {
				t.Errorf("app-side hold %.3f s vs client %.3f s: %+.1f%%", e.total.Hold, client.Seconds(), d)
			}
			if e.total.Idle < 0.25 || e.total.Errors != 1 || e.total.Stmts < 4 {
				t.Errorf("idle %.3f (want >= 0.3), errors %v (want 1), statements %v", e.total.Idle, e.total.Errors, e.total.Stmts)
			}
		})
	}
}

func TestOTLPRejectsGarbage(t *testing.T) {
	c, _ := New(Config{OTLP: OTLPConfig{Enabled: true}})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		ct, body string
		code     int
	}{
		{"application/x-protobuf", "\xff\xff\xff", 400},
		{"application/json", "{not json", 400},
		{"text/plain", "hi", 415},
	} {
		resp, err := http.Post(srv.URL+"/v1/traces", tc.ct, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s %q: %d, want %d", tc.ct, tc.body, resp.StatusCode, tc.code)
		}
	}
	if got := c.st.series[seriesKey{"app", SourceOTLP}].malformed; got != 2 {
		t.Errorf("malformed %v, want 2", got)
	}
}

// TestSessionHintTagsIdleTransaction: a hold span carrying the ProxySQL
// session id names the tag of sampled hold the processlist could not.
func TestSessionHintTagsIdleTransaction(t *testing.T) {
	st := newStore(10, time.Now)
	ps := newProxySQLSessions("px", st, ProcesslistConfig{}, false, true, 5*time.Second, nil)
	at := time.Unix(1_800_000_000, 0)
	idle := ProcesslistRow{SessionID: 42, SrvHost: sql.NullString{String: "db", Valid: true}}
	for i := range 5 {
		ps.sample(at.Add(time.Duration(i)*100*time.Millisecond), []ProcesslistRow{idle})
	}
	ps.hint(42, sessionHint{Tag: "from_span", Start: at, End: at.Add(time.Second), Received: at.Add(time.Second)})
	ps.sample(at.Add(time.Second), nil)
	// Five samples 100 ms apart, the last one held until the next sample
	// 600 ms later: 1 s.
	if got := holdOf(st, "px", SourceProxySQLProcesslist, "from_span"); got < 0.99 || got > 1.01 {
		t.Errorf("hold tagged by the span: %.3f s, want 1", got)
	}
	if got := holdOf(st, "px", SourceProxySQLProcesslist, UnknownTag); got != 0 {
		t.Errorf("unknown %.3f s", got)
	}
}

// TestTailerRotationAndTruncation appends to an events log, rotates it the
// way ProxySQL does (a new numbered file) and truncates it.
func TestTailerRotationAndTruncation(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "events.log")
	line := func(thread, startUS int, q string) string {
		return fmt.Sprintf(`{"event":"COM_QUERY","thread_id":%d,"starttime_timestamp_us":%d,"endtime_timestamp_us":%d,"query":%q,"hostgroup_id":0,"server":"db:3306"}`+"\n",
			thread, startUS, startUS+500000, q)
	}
	appendTo := func(name, s string) {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	f1 := prefix + ".00000001"
	appendTo(f1, line(1, 1e6, "/* conn_tag:old */ SELECT 1")) // before the tailer: not read
	st := newStore(10, time.Now)
	c := &Collector{cfg: Config{MaxBackoff: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st: st}
	ps := newProxySQLSessions("px", st, ProcesslistConfig{}, true, false, time.Second, nil)
	tl := &tailer{path: prefix, poll: time.Millisecond, sink: storeSink{c.st, "px", SourceProxySQLEvents}, log: c.cfg.Logger, target: "px", sessions: ps, buf: make([]byte, 64)}
	step := func(first bool) {
		t.Helper()
		if err := tl.step(first); err != nil {
			t.Fatal(err)
		}
	}
	step(true)
	appendTo(f1, line(2, 2e6, "/* conn_tag:a */ SELECT 1"))
	half := line(3, 3e6, "/* conn_tag:a */ SELECT 2")
	appendTo(f1, half[:20])
	step(false)
	appendTo(f1, half[20:]+"{garbage\n")
	step(false)
	f2 := prefix + ".00000002"
	appendTo(f2, line(4, 4e6, "/* conn_tag:b */ SELECT 3"))
	step(false)
	os.Truncate(f2, 0) // copytruncate-style rotation
	step(false)
	appendTo(f2, line(5, 5e6, "/* conn_tag:b */ SELECT 4"))
	step(false)
	got := map[string]float64{}
	for tag, e := range st.series[seriesKey{"px", SourceProxySQLEvents}].tags {
		got[tag] = e.total.Stmts
	}
	if got["old"] != 0 || got["a"] != 2 || got["b"] != 2 {
		t.Errorf("statements per tag %v; want a:2 b:2, nothing from before the tailer started", got)
	}
	if bad := st.series[seriesKey{"px", SourceProxySQLEvents}].malformed; bad != 1 {
		t.Errorf("malformed %v, want 1", bad)
	}
	tl.closeFile()
}

// waitPoll returns a hook and a function that waits for the next poll of
// (target, source) with the wanted outcome.
func pollWaiter(c *Collector) func(t *testing.T, target string, src Source, wantErr bool) error {
	type ev struct {
		target string
		src    Source
		err    error
	}
	ch := make(chan ev, 64)
	c.onPoll = func(target string, src Source, err error) {
		select {
		case ch <- ev{target, src, err}:
		default:
		}
	}
	return func(t *testing.T, target string, src Source, wantErr bool) error {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case e := <-ch:
				if e.target == target && e.src == src && (e.err != nil) == wantErr {
					return e.err
				}
			case <-timeout:
				t.Fatalf("no poll of %s/%s with error=%v", target, src, wantErr)
				return nil
			}
		}
	}
}

// fakePeer listens and does what mode says with every connection: "slow"
// accepts and never answers, "garbage" speaks HTTP.
func fakePeer(t *testing.T, mode string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if mode == "garbage" {
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
				c.Close()
			}
		}
	})
	return ln.Addr().String()
}

// TestFaultsKeepOtherSourcesRunning points ProxySQL sources at nothing, at a
// peer that never answers and at one speaking HTTP, next to a working MySQL
// source: each bad one is reported down with no gauges, the MySQL source
// stays up, and no password reaches logs or metrics.
func TestFaultsKeepOtherSourcesRunning(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the peers' cleanups
	d := testenv.NewDatabase(t)
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	const pw = "Sup3rSecretPw"
	dsn := func(addr string) string { return "admin:" + pw + "@tcp(" + addr + ")/" }
	var logs syncBuf
	c, err := New(Config{
		ProxySQL: []ProxySQLConfig{
			{Name: "unreachable", DSN: dsn(deadAddr)},
			{Name: "slow", DSN: dsn(fakePeer(t, "slow"))},
			{Name: "garbage", DSN: dsn(fakePeer(t, "garbage"))},
		},
		MySQL:   []MySQLConfig{{Name: "db", DSN: d.DSN(), Interval: MinServerInterval}},
		Timeout: 300 * time.Millisecond,
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	wait := pollWaiter(c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	for _, name := range []string{"unreachable", "slow", "garbage"} {
		start := time.Now()
		err := wait(t, name, SourceProxySQLProcesslist, true)
		t.Logf("%s: failed after %v: %v", name, time.Since(start).Round(time.Millisecond), err)
	}
	wait(t, "db", SourceMySQL, false)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(body)
	for _, want := range []string{
		`holdtime_source_up{source="proxysql_processlist",target="slow"} 0`,
		`holdtime_source_up{source="proxysql_processlist",target="garbage"} 0`,
		`holdtime_source_up{source="proxysql_processlist",target="unreachable"} 0`,
		`holdtime_source_up{source="mysql",target="db"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, `holdtime_collector_sessions{source="proxysql_processlist"`) {
		t.Errorf("a down source reports sessions (must be absent, not zero)")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if strings.Contains(logs.String()+metrics, pw) {
		t.Errorf("password in logs or metrics:\n%s", logs.String())
	}
	t.Logf("logs:\n%s", logs.String())
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServerRestart stops the server a MySQL source polls: the source goes
// down and its gauges go away; a killed connection is replaced.
func TestServerRestart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	testenv.Require(t)
	if os.Getenv(testenv.DSNEnv) != "" {
		t.Skip("uses a private server; not with " + testenv.DSNEnv)
	}
	srv, err := testenv.StartMySQL(context.Background(), testenv.MySQLOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := New(Config{MySQL: []MySQLConfig{{Name: "db", DSN: srv.DSN(""), Interval: MinServerInterval}},
		Timeout: time.Second, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wait := pollWaiter(c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	wait(t, "db", SourceMySQL, false)
	// Kill the collector's connection: the next polls must go on.
	admin, err := sql.Open("mysql", srv.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	rows, _ := admin.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Daemon' AND USER <> 'system user'")
	var ids []int64
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		admin.Exec(fmt.Sprintf("KILL %d", id))
	}
	admin.Close()
	t.Logf("killed %d connections", len(ids))
	wait(t, "db", SourceMySQL, false)
	srv.Close()
	err = wait(t, "db", SourceMySQL, true)
	t.Logf("after the server stopped: %v", err)
	c.st.mu.Lock()
	sr := c.st.series[seriesKey{"db", SourceMySQL}]
	if sr.up || sr.gauges != nil {
		t.Errorf("stopped server: up=%v gauges=%v; want down and no gauges", sr.up, sr.gauges)
	}
	c.st.mu.Unlock()
	cancel()
	<-done
}

// TestFloodOfBogusTags feeds 1M distinct tags through the processlist
// state machine, the events log attribution, the store and the OTLP path:
// memory stays bounded.
func TestFloodOfBogusTags(t *testing.T) {
	const sessions, samples = 2000, 500 // 1M rows or events, each with a new tag
	for _, withEvents := range []bool{false, true} {
		name, src := "processlist", SourceProxySQLProcesslist
		if withEvents {
			name, src = "events log", SourceProxySQLEvents
		}
		t.Run(name, func(t *testing.T) {
			st := newStore(100, time.Now)
			ps := newProxySQLSessions("px", st, ProcesslistConfig{}, withEvents, false, time.Second, nil)
			rows := make([]ProcesslistRow, sessions)
			for i := range rows {
				rows[i] = ProcesslistRow{SessionID: int64(i), SrvHost: sql.NullString{String: "db", Valid: true},
					Info: sql.NullString{Valid: !withEvents}}
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			at := time.Unix(1_800_000_000, 0)
			buf := make([]byte, 0, 64)
			ev := Event{Type: EventQuery, Hostgroup: 0, Server: []byte("db:3306")}
			n := 0
			for s := range samples {
				for i := range rows {
					buf = fmt.Appendf(buf[:0], "/* conn_tag:bogus_%d */ SELECT 1", n)
					if withEvents {
						startUS := at.UnixMicro() + int64(s)*100_000 + int64(i)
						ev.ThreadID, ev.StartUS, ev.EndUS, ev.Query = uint64(i), startUS, startUS+10, buf
						ps.addEvent(&ev)
					} else {
						rows[i].Info.String = string(buf)
					}
					n++
				}
				ps.sample(at.Add(time.Duration(s)*100*time.Millisecond), rows)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			sr := st.series[seriesKey{"px", src}]
			growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%d distinct tags: %d kept, overflow count %.0f, heap growth %.1f MiB", n, len(sr.tags), sr.overflow, float64(growth)/(1<<20))
			if len(sr.tags) > 101 {
				t.Errorf("%d tags kept, cap 100 (+overflow)", len(sr.tags))
			}
			if sr.overflow < float64(n-100) || sr.tags[OverflowTag] == nil {
				t.Errorf("overflow counted %.0f times, want %d", sr.overflow, n-100)
			}
			if growth > 32<<20 {
				t.Errorf("heap grew %d MiB over 1M bogus tags", growth>>20)
			}
			runtime.KeepAlive(ps)
		})
	}
}

// TestPromtoolCheckMetrics lints the served /metrics with promtool after a
// replay filled every family it can.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not on PATH")
		}
		t.Skip("promtool not on PATH")
	}
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	filled := replay(t, "testdata/states_processlist_samples_extended.tsv", "testdata/states_eventslog_events.json", time.Second)
	c.st.series = filled.series
	pool := newPoolMetrics("px")
	pool.set([]PoolServer{{Hostgroup: 0, Server: "127.0.0.1:3307", ConnUsed: 1, ConnFree: 2, Queries: 10, LatencyUS: 300}},
		&proxysqlGlobal{clientConnections: 3})
	sat := newSaturationMetrics("db")
	sat.set(locks.Saturation{ThreadsRunning: 1, ThreadsConnected: 2, MaxConnections: 3, QueueKnown: true, QueueSource: "none"}, true)
	waiting := newWaitingMetrics("px")
	waiting.set(1)
	for _, m := range []prometheus.Collector{pool, sat, waiting} {
		if err := c.cfg.Registerer.Register(m); err != nil {
			t.Fatal(err)
		}
	}
	c.st.setGauges("db", SourceMySQL, func(_ *series, g *gauges) {
		g.trx = map[string]trxFigures{"a": {1, 2, 3}}
		g.waits = map[[2]string]int{{"a", "b"}: 1}
	})
	c.st.success("px", SourceProxySQLPool)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, fam := range []string{"holdtime_collector_hold_seconds_total", "holdtime_collector_pinned_sessions",
		"holdtime_collector_pinned_seconds_total", "holdtime_proxysql_pool_connections", "holdtime_mysql_lock_waits",
		"holdtime_source_up", "holdtime_collector_tags_overflow_total", "holdtime_proxysql_client_connections",
		"holdtime_mysql_threads_running", "holdtime_mysql_thread_queue", "holdtime_proxysql_waiting_sessions"} {
		if !bytes.Contains(body, []byte("\n"+fam+"{")) {
			t.Errorf("/metrics lacks %s", fam)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestTopAPI(t *testing.T) {
	c, _ := New(Config{OTLP: OTLPConfig{Enabled: true}})
	c.st.addOne("app", SourceOTLP, "a", &figures{Hold: 5, Idle: 4, Active: 1, Stmts: 3})
	c.st.addOne("app", SourceOTLP, "b", &figures{Hold: 1, Active: 1, Stmts: 30})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		q     string
		code  int
		first string
	}{
		{"window=10s", 200, `"tag":"a"`},
		{"window=5m&sort=statements", 200, `"tag":"b"`},
		{"window=1m&filter=b", 200, `"tag":"b"`},
		{"window=2h", 400, ""},
		{"sort=nope", 400, ""},
	} {
		resp, err := http.Get(srv.URL + "/api/v1/top?" + tc.q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %d %s", tc.q, resp.StatusCode, b)
			continue
		}
		if tc.first != "" {
			i := bytes.Index(b, []byte(`"tag":`))
			if i < 0 || !bytes.HasPrefix(b[i:], []byte(tc.first)) {
				t.Errorf("%s: first row not %s: %s", tc.q, tc.first, b)
			}
		}
	}
}

// TestSessionHintsNameTheirOwnBorrow: one ProxySQL session serves two
// borrows of a pooled connection under different tags, neither sampled
// running. Their hold spans arrive late and out of order (OTel batch
// export): each names only the sampled hold inside its own times.
func TestSessionHintsNameTheirOwnBorrow(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	type span struct {
		tag        string
		start, end time.Time
	}
	cart, pay := span{"cart", ms(-30), ms(530)}, span{"pay", ms(770), ms(1530)}
	for _, tc := range []struct {
		name      string
		deliver   map[int]span // sample index -> span received just before it
		wantCart  float64
		wantPay   float64
		wantUnkwn float64
	}{
		{"first borrow's span lands during the second", map[int]span{12: cart, 17: pay}, 0.5, 0.7, 0},
		{"second borrow's span first", map[int]span{16: pay, 18: cart}, 0.5, 0.7, 0},
		{"only the first borrow's span", map[int]span{13: cart}, 0.5, 0, 0.7},
		{"a span before its last sample is credited", map[int]span{15: pay, 5: cart}, 0.5, 0.7, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(10, time.Now)
			ps := newProxySQLSessions("px", st, ProcesslistConfig{}, false, true, 5*time.Second, nil)
			held := ProcesslistRow{SessionID: 42, SrvHost: sql.NullString{String: "db", Valid: true}}
			free := ProcesslistRow{SessionID: 42}
			for i := range 80 { // every 100 ms: cart idle 0-0.4, pay idle 0.8-1.4
				if sp, ok := tc.deliver[i]; ok {
					ps.hint(42, sessionHint{Tag: sp.tag, Start: sp.start, End: sp.end, Received: ms(i * 100)})
				}
				row := free
				if i <= 4 || (i >= 8 && i <= 14) {
					row = held
				}
				ps.sample(ms(i*100), []ProcesslistRow{row})
			}
			for tag, want := range map[string]float64{"cart": tc.wantCart, "pay": tc.wantPay, UnknownTag: tc.wantUnkwn} {
				if got := holdOf(st, "px", SourceProxySQLProcesslist, tag); got < want-0.01 || got > want+0.01 {
					t.Errorf("%s: %.3f s, want %.1f", tag, got, want)
				}
			}
		})
	}
}
