package conntag

import (
	"bytes"
	"context"
	"database/sql"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/pprof/profile"
	"github.com/holdtime/holdtime/testenv"
)

// The two code paths of TestHoldProfileAttributesPaths. They differ in
// stack depth and in how they hold: the idle path keeps a transaction open
// while it waits (10 ms), the busy path runs one short statement; the test
// sizes their loops so that the idle path holds about ten times the busy
// path's seconds.
func holdIdlePath(ctx context.Context, db *sql.DB) (time.Duration, error) {
	return holdIdlePathInner(ctx, db)
}

func holdIdlePathInner(ctx context.Context, db *sql.DB) (time.Duration, error) {
	start := time.Now()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
		tx.Rollback()
		return 0, err
	}
	time.Sleep(10 * time.Millisecond) // a slow call made while holding
	err = tx.Commit()
	return time.Since(start), err
}

func holdBusyPath(ctx context.Context, db *sql.DB) (time.Duration, error) {
	start := time.Now()
	_, err := db.ExecContext(ctx, "SELECT SLEEP(0.002)")
	return time.Since(start), err
}

func TestHoldProfileAttributesPaths(t *testing.T) {
	d := testenv.NewDatabase(t)
	connector, err := mysql.NewConnector(d.Config())
	if err != nil {
		t.Fatal(err)
	}
	// Every hold sampled: this test checks attribution against the
	// client's own clock; TestHoldProfileSamplingUnbiased checks sampling.
	hp := NewHoldProfile(1)
	db := OpenDB(connector, WithHoldProfile(hp), WithPoolName("orders"), WithoutMetrics())
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(4)
	ctx := context.Background()
	var mu sync.Mutex
	truth := map[string]time.Duration{}
	var wg sync.WaitGroup
	run := func(name, tag string, n int, fn func(context.Context, *sql.DB) (time.Duration, error)) {
		defer wg.Done()
		tctx := WithTag(ctx, tag)
		for range n {
			held, err := fn(tctx, db)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			truth[name] += held
			mu.Unlock()
		}
	}
	wg.Add(3)
	go run("idle", "checkout_tax_quote", 30, holdIdlePath)
	go run("idle", "checkout_tax_quote", 30, holdIdlePath)
	go run("busy", "inventory_reserve", 28, holdBusyPath)
	wg.Wait()
	if t.Failed() {
		return
	}

	// Read the profile back the way a tool would: through its bytes.
	var buf bytes.Buffer
	if _, err := hp.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.CheckValid(); err != nil {
		t.Fatal(err)
	}
	held, idle := map[string]float64{}, map[string]float64{}
	for _, s := range prof.Sample {
		leaf := s.Location[0].Line[0].Function.Name
		var path string
		switch {
		case strings.HasSuffix(leaf, ".holdIdlePathInner"):
			path = "idle"
			if fn := s.Location[1].Line[0].Function.Name; !strings.HasSuffix(fn, ".holdIdlePath") {
				t.Errorf("idle path's caller frame is %s, want holdIdlePath", fn)
			}
			if s.Label["conn_tag"][0] != "checkout_tax_quote" {
				t.Errorf("idle path labelled %v", s.Label)
			}
		case strings.HasSuffix(leaf, ".holdBusyPath"):
			path = "busy"
			if s.Label["conn_tag"][0] != "inventory_reserve" {
				t.Errorf("busy path labelled %v", s.Label)
			}
		default:
			t.Errorf("a sample's leaf frame is %s, not one of the two paths", leaf)
			continue
		}
		if s.Label["pool"][0] != "orders" {
			t.Errorf("pool label %v, want orders", s.Label["pool"])
		}
		held[path] += float64(s.Value[0])
		idle[path] += float64(s.Value[1])
	}
	for _, path := range []string{"idle", "busy"} {
		want := float64(truth[path].Nanoseconds())
		t.Logf("%s path: client measured %.3f s held, profile %.3f s held, %.3f s idle", path, want/1e9, held[path]/1e9, idle[path]/1e9)
		// The client's clock includes database/sql's own work around the
		// hold: a few microseconds per hold. 15 % is the bound.
		if math.Abs(held[path]-want) > 0.15*want {
			t.Errorf("%s path: profile says %.3f s held, the client measured %.3f s", path, held[path]/1e9, want/1e9)
		}
	}
	ratio := held["idle"] / held["busy"]
	wantRatio := float64(truth["idle"]) / float64(truth["busy"])
	t.Logf("held ratio idle:busy %.2f (client %.2f)", ratio, wantRatio)
	if math.Abs(ratio-wantRatio) > 0.15*wantRatio {
		t.Errorf("held ratio %.2f, client measured %.2f", ratio, wantRatio)
	}
	// The idle type separates them: most of the idle path's hold is idle
	// (10 ms sleep vs two short statements), little of the busy path's.
	if idle["idle"] < 0.5*held["idle"] || idle["busy"] > 0.5*held["busy"] {
		t.Errorf("idle_held does not separate the paths: idle path %.3f of %.3f s, busy path %.3f of %.3f s",
			idle["idle"]/1e9, held["idle"]/1e9, idle["busy"]/1e9, held["busy"]/1e9)
	}
	frame, share := HottestFrame(prof, map[string]string{"conn_tag": "checkout_tax_quote"})
	if !strings.Contains(frame, ".holdIdlePathInner ") || !strings.Contains(frame, "holdprofile_test.go:") {
		t.Errorf("HottestFrame = %q (%.2f), want holdIdlePathInner's BeginTx line", frame, share)
	}
}

// TestHoldProfileSamplingUnbiased drives the sampler directly with many
// holds of two kinds, one rare and long: at rate 10 the totals must match the
// true totals, as each sampled hold stands for ten.
func TestHoldProfileSamplingUnbiased(t *testing.T) {
	hp := NewHoldProfile(10)
	c := &conn{}
	const n = 200_000
	var trueHeld, trueHolds [2]int64
	for i := range n {
		kind := 0
		held := int64(1_000_000) // 1 ms
		if i%100 == 0 {
			kind, held = 1, 100_000_000 // 1 % of holds, 100 ms
		}
		hp.sampleBorrow(c)
		tag := []string{"short", "rare_long"}[kind]
		hp.endHold(c, tag, "default", held, held/2)
		trueHeld[kind] += held
		trueHolds[kind]++
	}
	var gotHeld, gotHolds [2]int64
	for k, v := range hp.snapshot() {
		kind := 0
		if k.tag == "rare_long" {
			kind = 1
		}
		gotHeld[kind] += v.held
		gotHolds[kind] += v.holds
	}
	for kind, name := range []string{"short", "rare_long"} {
		// Binomial sampling: relative standard error sqrt((rate-1)/holds),
		// 0.7 % for the short holds, 7 % for the rare ones; allow 4.5 σ.
		tol := 4.5 * math.Sqrt(9/float64(trueHolds[kind]))
		rel := math.Abs(float64(gotHeld[kind])/float64(trueHeld[kind]) - 1)
		t.Logf("%s: true %d holds %.1f s, estimated %d holds %.1f s (off by %.1f %%, bound %.1f %%)",
			name, trueHolds[kind], float64(trueHeld[kind])/1e9, gotHolds[kind], float64(gotHeld[kind])/1e9, 100*rel, 100*tol)
		if rel > tol {
			t.Errorf("%s: estimated %.2f s, true %.2f s", name, float64(gotHeld[kind])/1e9, float64(trueHeld[kind])/1e9)
		}
	}
}

// TestHoldProfileServedToPprof serves a profile over HTTP and reads it
// with go tool pprof, as the docs tell users to: -top, -raw, and a delta
// profile with ?seconds=1.
func TestHoldProfileServedToPprof(t *testing.T) {
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := exec.LookPath(gotool); err != nil {
		t.Skipf("no go tool at %s", gotool)
	}
	d := testenv.NewDatabase(t)
	connector, err := mysql.NewConnector(d.Config())
	if err != nil {
		t.Fatal(err)
	}
	hp := NewHoldProfile(1)
	db := OpenDB(connector, WithHoldProfile(hp), WithoutMetrics())
	t.Cleanup(func() { db.Close() })
	ctx := WithTag(context.Background(), "checkout_tax_quote")
	for range 5 {
		if _, err := holdIdlePath(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/holdtime/profile", hp)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	url := srv.URL + "/debug/holdtime/profile"
	pprof := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gotool, append([]string{"tool", "pprof"}, args...)...)
		cmd.Env = append(cmd.Environ(), "PPROF_TMPDIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	top := pprof("-top", url)
	t.Logf("go tool pprof -top:\n%s", top)
	if !strings.Contains(top, "holdIdlePathInner") || !strings.Contains(top, "Type: held") {
		t.Errorf("pprof -top does not show the borrowing frame or the held type:\n%s", top)
	}
	// The docs' second command: one tag's frames.
	focus := pprof("-tagfocus=conn_tag=checkout_tax_quote", "-top", url)
	if !strings.Contains(focus, "holdIdlePathInner") {
		t.Errorf("pprof -tagfocus=conn_tag=checkout_tax_quote -top lost the tag's frame:\n%s", focus)
	}
	raw := pprof("-raw", url)
	if !strings.Contains(raw, "idle_held/nanoseconds") || !strings.Contains(raw, "conn_tag:[checkout_tax_quote]") {
		t.Errorf("pprof -raw lacks the sample types or the conn_tag label:\n%s", raw)
	}
	// A delta profile covers only the holds that end inside its window.
	done := make(chan string, 1)
	go func() { done <- pprof("-raw", url+"?seconds=1") }()
	// Holds keep ending while the window is open; stop once it returned.
	var n int
loop:
	for {
		select {
		case out := <-done:
			raw = out
			break loop
		default:
			if _, err := holdBusyPath(ctx, db); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if strings.Contains(raw, "holdIdlePathInner") || !strings.Contains(raw, "holdBusyPath") {
		t.Errorf("the ?seconds=1 profile should hold only the busy path's %d holds:\n%s", n, raw)
	}
	resp, err := http.Get(url + "?seconds=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("?seconds=x: status %d, want 400", resp.StatusCode)
	}
}
