package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCollectRejectsBadOptionsWithoutEchoingDSN(t *testing.T) {
	for _, args := range [][]string{
		{"collect"}, // no source
		{"collect", "--proxysql", "admin:s3cretpw@tcp(127.0.0.1:6032)/"},
		{"collect", "--mysql", "db=admin:s3cretpw@tcp(127.0.0.1:3306/"},
		{"collect", "--mysql", "db=admin:s3cretpw@tcp(127.0.0.1:3306)/", "--mysql-interval", "50ms"},
		{"collect", "--otlp", "--max-tags", "0"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code == 0 {
			t.Errorf("%v: exit 0", args)
		}
		if strings.Contains(out+errOut, "s3cretpw") {
			t.Errorf("%v: the password is in the output: %s", args, errOut)
		}
		t.Logf("%v: %s", args, strings.TrimSpace(errOut))
	}
}

// syncBuffer is a bytes.Buffer safe for the server goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCollectServesAndStops runs the command with a source that is down
// (nothing listens at its address) and the OTLP receiver, reads the
// endpoints, and stops it the way SIGTERM does: by cancelling the context.
func TestCollectServesAndStops(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("HOLDTIME_PROXYSQL", "px1=admin:s3cretpw@tcp("+deadAddr+")/")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"collect", "--listen", addr, "--otlp", "--timeout", "500ms"}, &out, &errOut)
	}()
	get := func(path string) (int, string) {
		for i := 0; i < 100; i++ { // bounded: the server starts within a moment
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				time.Sleep(20 * time.Millisecond) // the listener's start is not signalled to the test
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		t.Fatalf("GET %s: server never answered", path)
		return 0, ""
	}
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get("/api/v1/top?window=10s"); code != 200 || !strings.Contains(body, `"rows"`) {
		t.Errorf("/api/v1/top: %d %s", code, body)
	}
	// The source is down from the start (it has never answered); wait for
	// its first failed poll, which the daemon logs.
	var metrics string
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(10 * time.Second)
wait:
	for !strings.Contains(errOut.String(), "source down") {
		select {
		case <-tick.C:
		case <-timeout:
			break wait // the check below reports it
		}
	}
	_, metrics = get("/metrics")
	if !strings.Contains(metrics, `holdtime_source_up{source="proxysql_processlist",target="px1"} 0`) {
		t.Errorf("down source not reported:\n%s", metrics)
	}
	// The daemon's own health is on /metrics too: the Go and process
	// collectors, and the runner's lateness per source.
	for _, want := range []string{"go_goroutines ", "process_resident_memory_bytes ",
		`holdtime_collector_polls_late_total{cause="overran",source="proxysql_processlist",target="px1"}`,
		`holdtime_collector_polls_late_total{cause="delayed",source="proxysql_processlist",target="px1"}`,
		`holdtime_collector_poll_duration_seconds_count{source="proxysql_processlist",target="px1"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with a source down: %d", code)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after cancel: %s", code, errOut.String())
	}
	all := out.String() + errOut.String() + metrics
	if strings.Contains(all, "s3cretpw") {
		t.Errorf("the password leaked:\n%s", all)
	}
	if !strings.Contains(errOut.String(), "source down") {
		t.Errorf("no log line for the down source: %s", errOut.String())
	}
}

func TestCollectRefusesIntervalsBelowTheirFloorsAndADirectoryAsEventsLog(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--proxysql-processlist-interval", "1ns"}, "--proxysql-processlist-interval 1ns is below its floor of 10ms"},
		{[]string{"--proxysql-pool-interval", "1ms"}, "--proxysql-pool-interval 1ms is below its floor of 100ms"},
		{[]string{"--proxysql-digest-interval", "10ms"}, "a negative value turns it off"},
		{[]string{"--proxysql-events-log", "px1=" + dir}, "is a directory: give ProxySQL's mysql-eventslog_filename"},
	} {
		args := append([]string{"collect", "--listen", "127.0.0.1:0", "--proxysql", "px1=u:p@tcp(127.0.0.1:1)/"}, tc.args...)
		code, _, errOut := runCLI(t, args...)
		if code != 1 || !strings.Contains(errOut, tc.says) {
			t.Errorf("%v: exit %d, %q; want 1 saying %q", tc.args, code, errOut, tc.says)
		}
	}
}

// TestCollectDropsARequestWhoseBodyNeverComes: a client that sends an OTLP
// request's headers and then none of its body is cut off after the read
// timeout, not held forever.
func TestCollectDropsARequestWhoseBodyNeverComes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"collect", "--otlp", "--listen", "127.0.0.1:0"}, pw, &errOut)
		pw.Close()
	}()
	defer func() { cancel(); go io.Copy(io.Discard, pr); <-done }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("collect did not start: %v %s", err, errOut.String())
	}
	_, rest, _ := strings.Cut(line, "http://")
	addr, _, _ := strings.Cut(rest, " ")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(collectReadTimeout + 20*time.Second))
	_, err = io.ReadAll(c) // returns when the server closes the connection
	took := time.Since(start)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server still held the connection %v after the headers", took)
	}
	if took > collectReadTimeout+5*time.Second {
		t.Errorf("the connection was closed after %v, want about the read timeout %v", took, collectReadTimeout)
	}
}
