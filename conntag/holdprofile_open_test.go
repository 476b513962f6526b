package conntag

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/pprof/profile"

	"github.com/holdtime/holdtime/testenv"
)

// here returns "function file:line" of its caller's next line, as the
// profile writes frames.
func here() string {
	pc, file, line, _ := runtime.Caller(1)
	return fmt.Sprintf("%s %s:%d", runtime.FuncForPC(pc).Name(), file, line+1)
}

func frameOf(s *profile.Sample) string {
	if len(s.Location) == 0 || len(s.Location[0].Line) == 0 {
		return ""
	}
	l := s.Location[0].Line[0]
	return fmt.Sprintf("%s %s:%d", l.Function.Name, l.Function.Filename, l.Line)
}

func fetchProfile(t *testing.T, url string) *profile.Profile {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	prof, err := profile.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return prof
}

func sampleValue(prof *profile.Profile, s *profile.Sample, typ string) int64 {
	for i, st := range prof.SampleType {
		if st.Type == typ {
			return s.Value[i]
		}
	}
	return -1
}

// TestHoldProfileHeldOpen leaves a transaction open on each of two pools,
// one sampling every hold and one sampling none, and reads the served
// profile while they are open: both show under held_open once 5 s old, the
// sampled one at the line that began it; after the commit the hold is under
// held, released at the commit's line.
func TestHoldProfileHeldOpen(t *testing.T) {
	d := testenv.NewDatabase(t)
	connector, err := mysql.NewConnector(d.Config())
	if err != nil {
		t.Fatal(err)
	}
	const openAfter = 5 * time.Second
	hp := NewHoldProfile(1, WithOpenHoldsAfter(openAfter))
	every := OpenDB(connector, WithHoldProfile(hp), WithoutMetrics(), WithPoolName("every"))
	t.Cleanup(func() { every.Close() })
	// The second pool's hold is made an unsampled one below.
	never := OpenDB(connector, WithHoldProfile(hp), WithoutMetrics(), WithPoolName("never"))
	t.Cleanup(func() { never.Close() })
	srv := httptest.NewServer(hp)
	t.Cleanup(srv.Close)

	ctx := WithTag(context.Background(), "stuck_checkout")
	begun := here()
	tx, err := every.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	unsampledCtx := WithTag(context.Background(), "stuck_unsampled")
	c, err := never.Conn(unsampledCtx)
	if err != nil {
		t.Fatal(err)
	}
	// Make the second pool's hold an unsampled one: its slot is off.
	err = c.Raw(func(dc any) error {
		cn := dc.(baseConn).base()
		cn.profMu.Lock()
		cn.prof.on = false
		cn.profMu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Wait until the profile shows the open holds (the condition), within
	// a generous bound for a loaded machine.
	var open map[string]*profile.Sample
	var prof *profile.Profile
	deadline := time.Now().Add(openAfter + 30*time.Second)
	for {
		prof = fetchProfile(t, srv.URL)
		open = map[string]*profile.Sample{}
		for _, s := range prof.Sample {
			if sampleValue(prof, s, "held_open") > 0 {
				open[s.Label["conn_tag"][0]] = s
			}
		}
		if len(open) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the condition
	}
	if time.Since(opened) < openAfter && len(open) > 0 {
		t.Fatalf("held_open showed a hold %v old, under the %v threshold", time.Since(opened), openAfter)
	}
	s := open["stuck_checkout"]
	if s == nil {
		t.Fatalf("the open transaction is not under held_open while open (%d samples)", len(prof.Sample))
	}
	if got := frameOf(s); got != begun {
		t.Errorf("held_open leaf frame %q, want the BeginTx line %q", got, begun)
	}
	if age := time.Duration(sampleValue(prof, s, "held_open")); age < openAfter || age > time.Since(opened)+time.Second {
		t.Errorf("held_open %v, want between %v and %v", age, openAfter, time.Since(opened))
	}
	if s.Label["released_at"][0] != "open" || s.Label["pool"][0] != "every" {
		t.Errorf("labels %v", s.Label)
	}
	if u := open["stuck_unsampled"]; u == nil {
		t.Error("an open hold that was not sampled is not under held_open")
	} else if got := frameOf(u); !strings.Contains(got, "(hold not sampled)") {
		t.Errorf("unsampled open hold's frame %q", got)
	}

	committed := here()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	prof = fetchProfile(t, srv.URL)
	var held *profile.Sample
	for _, s := range prof.Sample {
		if sampleValue(prof, s, "held_open") > 0 {
			t.Errorf("after the commit, held_open still has %v", s.Label)
		}
		if s.Label["conn_tag"][0] == "stuck_checkout" && sampleValue(prof, s, "held") > 0 {
			held = s
		}
	}
	if held == nil {
		t.Fatal("the committed transaction is not under held")
	}
	if got := held.Label["released_at"][0]; got != committed {
		t.Errorf("released_at %q, want the Commit line %q", got, committed)
	}
	if frameOf(held) != begun {
		t.Errorf("held leaf %q, want %q", frameOf(held), begun)
	}
}

// TestHoldProfileMergesVisibleStacks: the same line borrowing a new
// connection (Connect) and a pooled one (ResetSession) goes through
// different database/sql frames, hidden in the profile: one sample.
func TestHoldProfileMergesVisibleStacks(t *testing.T) {
	d := testenv.NewDatabase(t)
	connector, err := mysql.NewConnector(d.Config())
	if err != nil {
		t.Fatal(err)
	}
	hp := NewHoldProfile(1)
	db := OpenDB(connector, WithHoldProfile(hp), WithoutMetrics())
	t.Cleanup(func() { db.Close() })
	ctx := WithTag(context.Background(), "merge")
	var firstCall time.Duration // the one that opened the connection
	for i := range 3 {
		start := time.Now()
		if err := pingThrough(ctx, db); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			firstCall = time.Since(start)
		}
	}
	var n int
	var holds, dial int64
	prof := hp.Profile()
	for _, s := range prof.Sample {
		if s.Label["conn_tag"][0] == "merge" {
			n++
			holds += sampleValue(prof, s, "holds")
			dial += sampleValue(prof, s, "dial")
		}
	}
	// The dial of the one new connection, within the call that made it.
	if dial <= 0 || time.Duration(dial) > firstCall {
		t.Errorf("dial %v, want within the first call's %v", time.Duration(dial), firstCall)
	}
	if n != 1 || holds != 3 {
		t.Errorf("%d samples with %d holds, want 1 sample of 3 holds", n, holds)
	}
	// The merge is real: the recorded stacks differ in hidden frames.
	var stacks int
	for k := range hp.snapshot() {
		if k.tag == "merge" {
			stacks++
		}
	}
	if stacks < 2 {
		t.Errorf("%d distinct recorded stacks: the test no longer borrows through two database/sql paths", stacks)
	}
}

func pingThrough(ctx context.Context, db *sql.DB) error { return db.PingContext(ctx) }
