package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/testenv"
)

// TestAnalyzeLiveRecording makes a recording the way `collect --record`
// does, against a real ProxySQL, with the events log copied into it, and
// analyzes the directory: the hog is first with its three holds of at
// least 0.4 s, and the events log given a second time counts once.
func TestAnalyzeLiveRecording(t *testing.T) {
	testenv.RequireProxySQL(t)
	ctx := context.Background()
	d := testenv.NewDatabase(t)
	px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	rec := t.TempDir()
	c, err := collector.New(collector.Config{RecordDir: rec, ProxySQL: []collector.ProxySQLConfig{{Name: "px1", DSN: px.AdminDSN(),
		ProcesslistInterval: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)

	app, err := sql.Open("mysql", px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	app.SetMaxOpenConns(1)
	for range 3 {
		tx, err := app.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "/* conn_tag:live_hog */ SELECT SLEEP(0.4)"); err != nil {
			t.Fatal(err)
		}
		tx.ExecContext(ctx, "/* conn_tag:live_hog */ SELECT 1")
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		if _, err := app.ExecContext(ctx, "/* conn_tag:live_short */ SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	// ProxySQL writes the events log as it goes and the recorder each
	// poll: wait for both to hold the workload (bounded).
	logs, _ := filepath.Glob(px.EventsLog + "*")
	for deadline := time.Now().Add(20 * time.Second); ; {
		var all []byte
		logs, _ = filepath.Glob(px.EventsLog + "*")
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			all = append(all, b...)
		}
		pl, _ := os.ReadFile(filepath.Join(rec, "px1", "processlist.tsv"))
		if bytes.Count(all, []byte("conn_tag:live_short")) >= 20 && bytes.Count(pl, []byte("\n")) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: events logs %v hold %d live_short statements, the recording %d lines", logs,
				bytes.Count(all, []byte("conn_tag:live_short")), bytes.Count(pl, []byte("\n")))
		}
		<-time.After(100 * time.Millisecond)
	}
	stop()
	for _, l := range logs {
		copyFile(t, l, filepath.Join(rec, "px1", filepath.Base(l)))
	}

	rep, _ := analyzeJSON(t, nil, time.Now(), "--group-by", "tag,user", rec)
	if rep.HoldsFrom != "events_log" || len(rep.Inputs) != len(logs)+1 || rep.Inputs[len(rep.Inputs)-1].Kind != "processlist" ||
		rep.Inputs[len(rep.Inputs)-1].Events == 0 {
		t.Fatalf("holds from %q, inputs %+v", rep.HoldsFrom, rep.Inputs)
	}
	g := rep.Groups[0]
	if g.Key["tag"] != "live_hog" || g.Key["user"] != px.AppUser || g.Holds != 3 || g.MaxSeconds < 0.4 || g.MaxSeconds > 2 {
		t.Errorf("first group %+v; want live_hog of %s, 3 holds of 0.4 s or more", g, px.AppUser)
	}
	short := false
	for _, g := range rep.Groups {
		short = short || (g.Key["tag"] == "live_short" && g.Holds == 20)
	}
	if !short {
		t.Errorf("no live_short group of 20 holds: %+v", rep.Groups)
	}
	t.Logf("live: %s %.3f s in %d holds, max %.3f s; %d groups, %.3f s in all", g.Key["tag"], g.HoldSeconds, g.Holds,
		g.MaxSeconds, len(rep.Groups), rep.TotalHoldSeconds)

	// ProxySQL's own file given besides the directory's copy: counted once.
	twice, errOut := analyzeJSON(t, nil, time.Now(), append([]string{"--group-by", "tag,user", rec}, logs...)...)
	if !near(twice.TotalHoldSeconds, rep.TotalHoldSeconds) || twice.Groups[0].Holds != 3 || !strings.Contains(errOut, "duplicate input: ") {
		t.Errorf("the events log twice: %.3f s (once %.3f s), %d hog holds, stderr %q", twice.TotalHoldSeconds,
			rep.TotalHoldSeconds, twice.Groups[0].Holds, errOut)
	}
}

// TestAnalyzeStdinStopsOnSIGINT: `ssh host cat log | holdtime analyze -`
// never ends; Ctrl-C stops it within a second, with the report of what was
// read marked PARTIAL and exit status 130.
func TestAnalyzeStdinStopsOnSIGINT(t *testing.T) {
	bin := buildHoldtime(t)
	events, err := os.ReadFile(statesLog)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "analyze", "-")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	defer w.Close() // the writer stays: the input never ends
	// More than a pipe holds (64 KiB): once the last Write returns,
	// analyze has read all but the last pipe-full.
	for range 3 {
		if _, err := w.Write(events); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatalf("analyze still reads stdin 10 s after SIGINT:\n%s%s", out.String(), errOut.String())
	}
	took := time.Since(start)
	if code := cmd.ProcessState.ExitCode(); code != 130 || took > time.Second || !strings.HasPrefix(out.String(), "# PARTIAL: ") ||
		!strings.Contains(out.String(), "checkout_completion") {
		t.Errorf("exit %d after %v; want 130 within 1 s and a partial report:\n%s%s", code, took, out.String(), errOut.String())
	}
}
