package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/go-sql-driver/mysql"
	"github.com/google/pprof/profile"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// holdForTheHog is the code the hold profile must name: it borrows a
// connection for a transaction and keeps it idle for about 100 ms.
func holdForTheHog(ctx context.Context, db *sql.DB) error {
	ctx = conntag.WithTag(ctx, "hog")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// The server sees a transaction once it touches an InnoDB table.
	if _, err := tx.ExecContext(ctx, "SELECT COUNT(*) FROM carts"); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond) // the workload: idle while holding the connection
	return tx.Commit()
}

// readForTheShop is another tag's code: its frame must not show in the
// hog's drill-down.
func readForTheShop(ctx context.Context, db *sql.DB) error {
	var n int
	return db.QueryRowContext(conntag.WithTag(ctx, "shop"), "SELECT 1").Scan(&n)
}

// runModel does what the Bubble Tea program does with a command: its
// messages go to the model, and so do those of the commands the model
// answers with; ticks are left out (the test is the clock).
func runModel(m *topModel, cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	switch msg := cmd().(type) {
	case tea.BatchMsg:
		for _, c := range msg {
			runModel(m, c)
		}
	case tickMsg:
	default:
		_, next := m.Update(msg)
		runModel(m, next)
	}
}

// framesPart returns the drill-down's hottest frames part: from its title
// to the next blank line.
func framesPart(screen string) string {
	i := strings.Index(screen, "hottest frames")
	if i < 0 {
		return ""
	}
	part, _, _ := strings.Cut(screen[i:], "\n\n")
	return part
}

// TestDrillDownHottestFrames: two apps serve real hold profiles fed by
// real holds on a throwaway MariaDB; top's drill-down into the hog, beside
// a live collector, names the test's own function that held the hog's
// connections, with the hold seconds of both apps summed and idle for its sleeps,
// and not the other tag's function; an app that is down, slow or serves
// something else is named with why, beside the frames the others give.
func TestDrillDownHottestFrames(t *testing.T) {
	d := testenv.NewDatabase(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Two app instances, each with its pool and its profile; every borrow
	// sampled, so the figures are exact.
	var profiles []string
	var hps []*conntag.HoldProfile
	var dbs []*sql.DB
	for range 2 {
		connector, err := mysql.NewConnector(d.Config())
		if err != nil {
			t.Fatal(err)
		}
		hp := conntag.NewHoldProfile(1)
		db := conntag.OpenDB(connector, conntag.WithoutMetrics(), conntag.WithHoldProfile(hp))
		t.Cleanup(func() { db.Close() })
		profiles = append(profiles, serveTestHoldProfile(t, hp))
		if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS carts (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		hps, dbs = append(hps, hp), append(dbs, db)
	}

	c := runTestCollector(t, collector.Config{MySQL: []collector.MySQLConfig{{Name: "db", DSN: d.DSN(), Interval: 200 * time.Millisecond}}})
	csrv := httptest.NewServer(c.Handler())
	defer csrv.Close()
	cl, err := collector.NewClient(csrv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}

	for i, db := range []*sql.DB{dbs[0], dbs[0], dbs[1]} { // 3 holds of ~100 ms, 2 in the first app
		if err := holdForTheHog(ctx, db); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
	}
	for _, db := range dbs {
		for range 5 {
			if err := readForTheShop(ctx, db); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The collector saw the hog's transactions (the drill-down has its
	// figures around the frames): bounded, it polls every 200 ms.
	for i := 0; ; i++ {
		resp, err := cl.Top(ctx, collector.TopQuery{Window: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(resp.Rows, func(r collector.TopRow) bool { return r.Tag == "hog" }) {
			break
		}
		if i == 50 {
			t.Fatalf("the collector did not see the hog in 5 s: %s", rowsLine(resp.Rows))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// What conntag itself names as the hog's hottest frame: the line of
	// holdForTheHog that borrowed.
	want, _ := conntag.HottestFrame(hps[0].Profile(), map[string]string{"conn_tag": "hog"})
	fn, loc, _ := strings.Cut(want, " ")
	if !strings.HasSuffix(fn, ".holdForTheHog") {
		t.Fatalf("conntag's hottest frame of the hog is %q, not holdForTheHog", want)
	}
	file, line, _ := strings.Cut(loc, ":")
	wantShort := shortFrame(fn, file, 0) + " topframes_test.go:" + line

	drill := func(t *testing.T, profiles []string, timeout time.Duration, tag string) (*topModel, string) {
		t.Helper()
		tc := &topCmd{window: "10s", layer: collector.LayerMax, sortKey: "occupancy", interval: 10 * time.Millisecond, holdProfiles: profiles}
		if err := validateHoldProfileURLs(profiles); err != nil {
			t.Fatal(err)
		}
		if err := tc.startFrames(); err != nil {
			t.Fatal(err)
		}
		if tc.frames != nil && timeout > 0 {
			tc.frames.timeout = timeout
		}
		m := newTopModel(ctx, tc, httpTop{cl}, "collector", false)
		m.Update(tea.WindowSizeMsg{Width: 250, Height: 100})
		m.drill = tag
		runModel(m, m.fetch())
		return m, m.View()
	}

	t.Run("names the function that held the tag's connections, and not another tag's", func(t *testing.T) {
		m, s := drill(t, profiles, 0, "hog")
		part := framesPart(s)
		if m.frames == nil || !strings.Contains(part, wantShort) {
			t.Fatalf("the hog's frames lack %q:\n%s", wantShort, s)
		}
		if strings.Contains(part, "readForTheShop") {
			t.Errorf("the hog's frames name the shop's function:\n%s", part)
		}
		if !strings.Contains(part, "hold profiles of 2 of 2 apps, summed") {
			t.Errorf("the frames do not say both apps answered:\n%s", part)
		}
		// Summed over both apps: 3 holds, each idle 100 ms between its
		// statements (a loaded machine adds to the statements, not to that).
		top := m.frames.frames[0]
		if top.holds != 3 || top.idle < 0.3 || top.held < top.idle || top.held > 1.5 {
			t.Errorf("the hog's frame: %.0f holds, %.3f s held, %.3f s idle; want 3 holds, at least 0.3 s idle", top.holds, top.held, top.idle)
		}
		if !strings.Contains(part, "holdForTheHog topframes_test.go:") || !strings.Contains(part, "100%") {
			t.Errorf("the frame's row lacks the give-back site or its share:\n%s", part)
		}
		// The first read has nothing to subtract: no recent figure. One
		// more hold, and the next read has it, beside the cumulative ones.
		if top.recentHeld != top.held || m.frames.recent != 0 || !strings.Contains(part, "LAST s") {
			t.Errorf("the first read has recent figures: %.3f s over %v:\n%s", top.recentHeld, m.frames.recent, part)
		}
		if err := holdForTheHog(ctx, dbs[1]); err != nil {
			t.Fatal(err)
		}
		m.framesAsked = m.framesAsked.Add(-m.t.frames.every)
		runModel(m, m.fetchFrames())
		again := m.frames.frames[0]
		if again.holds != 4 || m.frames.recent <= 0 || again.recentHeld < 0.1 || again.recentHeld > again.held-top.held+1e-9 ||
			again.recentIdle < 0.1 {
			t.Errorf("after one more hold: %.0f holds, %.3f s held of which %.3f s (%.3f idle) in the last %v; want 4 holds, that hold's 0.1 s and more, idle",
				again.holds, again.held, again.recentHeld, again.recentIdle, m.frames.recent)
		}
		if part := framesPart(m.View()); !strings.Contains(part, "LAST "+seconds(m.frames.recent.Seconds())) {
			t.Errorf("the recent column's header:\n%s", part)
		}
		// The collector's "not known yet" frames note is not shown: top
		// reads the frames itself.
		if strings.Contains(s, "frames: the collector does not read") {
			t.Errorf("the drill-down still says the frames are not known:\n%s", s)
		}

		_, s = drill(t, profiles, 0, "shop")
		part = framesPart(s)
		if !strings.Contains(part, "readForTheShop") || strings.Contains(part, "holdForTheHog") {
			t.Errorf("the shop's frames:\n%s", part)
		}
		_, s = drill(t, profiles, 0, "nobody")
		if part := framesPart(s); !strings.Contains(part, "no hold of nobody sampled") {
			t.Errorf("a tag the apps never ran:\n%s", part)
		}
		if t.Failed() {
			t.Logf("\n%s", s)
		}
	})

	t.Run("says why an app cannot be read, beside the others' frames", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		downURL := "http://" + ln.Addr().String() + holdProfilePath
		ln.Close()
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte("<html><body>login</body></html>"))
		}))
		defer page.Close()
		heap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			pprof.Lookup("heap").WriteTo(w, 0) // a real profile, of another kind
		}))
		defer heap.Close()
		release := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select { // an app stuck: it answers only when the test ends
			case <-r.Context().Done():
			case <-release:
			}
		}))
		defer slow.Close()
		defer close(release)
		missing := httptest.NewServer(http.NotFoundHandler())
		defer missing.Close()

		bad := []string{downURL, page.URL + "/login", heap.URL + "/debug/pprof/heap", slow.URL + holdProfilePath, missing.URL + "/nothing"}
		start := time.Now()
		m, s := drill(t, append([]string{profiles[0]}, bad...), 300*time.Millisecond, "hog")
		took := time.Since(start)
		part := framesPart(s)
		for _, want := range []string{
			"hold profiles of 1 of 6 apps",
			wantShort,
			ln.Addr().String() + ": down: connection refused",
			"/login: not a pprof profile (31 bytes of text/html)",
			"/debug/pprof/heap: a pprof profile, not a hold profile (its samples are alloc_objects, alloc_space, inuse_objects, inuse_space, not held)",
			strings.TrimPrefix(slow.URL, "http://") + ": no answer within 300ms",
			"/nothing: HTTP 404 Not Found: nothing served there",
		} {
			if !strings.Contains(part, want) {
				t.Errorf("the frames part lacks %q:\n%s", want, part)
			}
		}
		// The rest of the drill-down is as without the broken apps.
		if !strings.Contains(s, "tag hog") || !strings.Contains(s, "every source") {
			t.Errorf("the drill-down around the frames is not there:\n%s", s)
		}
		if took > 5*time.Second || m.frames.answered != 1 {
			t.Errorf("reading 6 apps, one stuck, took %v (timeout 300ms), %d answered", took, m.frames.answered)
		}
	})

	t.Run("an app slower than a refresh is asked once at a time, and the screen says it is asking", func(t *testing.T) {
		tc := &topCmd{window: "10s", layer: collector.LayerMax, sortKey: "occupancy", interval: 10 * time.Millisecond, holdProfiles: profiles}
		if err := tc.startFrames(); err != nil {
			t.Fatal(err)
		}
		m := newTopModel(ctx, tc, httpTop{cl}, "collector", false)
		m.Update(tea.WindowSizeMsg{Width: 250, Height: 100})
		m.drill = "hog"
		first := m.fetchFrames()
		if first == nil {
			t.Fatal("no read of the profiles on drilling in")
		}
		if c := m.fetchFrames(); c != nil {
			t.Error("a second read while one is in flight")
		}
		if part := framesPart(m.View()); !strings.Contains(part, "asking the app") {
			t.Errorf("while reading: %q", part)
		}
		m.Update(first())
		if c := m.fetchFrames(); c != nil {
			t.Errorf("read again before %v", tc.frames.every)
		}
		m.framesAsked = m.framesAsked.Add(-tc.frames.every)
		if c := m.fetchFrames(); c == nil {
			t.Errorf("not read again after %v", tc.frames.every)
		}
	})

	t.Run("without --hold-profile, says how to get the frames", func(t *testing.T) {
		_, s := drill(t, nil, 0, "hog")
		if part := framesPart(s); !strings.Contains(part, "give --hold-profile http://APP"+holdProfilePath) || strings.Count(part, "\n") != 0 {
			t.Errorf("without --hold-profile: %q", part)
		}
	})
}

// TestDrillDownFramesInAReplay: a recording has no hold profile; the part
// says so, and --hold-profile with --replay is refused (from the
// environment, it is ignored).
func TestDrillDownFramesInAReplay(t *testing.T) {
	rec := workloadRecording(t)
	tc := &topCmd{window: "10s", layer: collector.LayerMax, sortKey: "occupancy", interval: time.Second}
	tc.replay = newReplayPlayer(rec)
	m := newTopModel(context.Background(), tc, tc.replay, "recording", false)
	m.replay, m.paused = tc.replay, true
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 100})
	runModel(m, m.fetch())
	m.drill = m.rows()[0].Tag
	if part := framesPart(m.View()); part != "hottest frames: not recorded (a recording has no hold profile)" {
		t.Errorf("in a replay: %q", part)
	}

	rc := &topCmd{replayDir: t.TempDir(), window: "10s", layer: collector.LayerMax, sortKey: "occupancy", interval: time.Second,
		timeout: time.Second, color: "never", holdProfiles: []string{"http://app:9480" + holdProfilePath}, holdProfileFlag: true}
	if err := rc.validate(); err == nil || !strings.Contains(err.Error(), "a recording has no hold profile") {
		t.Errorf("--hold-profile with --replay: %v", err)
	}
	rc.holdProfileFlag = false
	if err := rc.validate(); err != nil || rc.holdProfiles != nil {
		t.Errorf("HOLDTIME_HOLD_PROFILE with --replay: %v, %v", err, rc.holdProfiles)
	}
}

// TestHoldProfileNeverGetsTheCollectorsToken: the collector's token is
// not sent to an app's profile; credentials in a profile URL go to that
// app only, and no message shows them.
func TestHoldProfileNeverGetsTheCollectorsToken(t *testing.T) {
	type seen struct {
		auth      string
		user, pwd string
	}
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		got <- seen{auth: r.Header.Get("Authorization"), user: u, pwd: p}
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer srv.Close()
	withCreds := strings.Replace(srv.URL, "http://", "http://ops:pr0f-s3cret@", 1) + holdProfilePath
	tc := &topCmd{token: "c0llector-s3cret", collectorURL: "http://127.0.0.1:9479", holdProfiles: []string{srv.URL + holdProfilePath, withCreds}}
	if err := tc.startFrames(); err != nil {
		t.Fatal(err)
	}
	f := tc.frames.fetch(context.Background(), "hog")
	plainAsked, credsAsked := 0, 0
	for range 2 {
		switch s := <-got; {
		case s.auth == "":
			plainAsked++
		case s.user == "ops" && s.pwd == "pr0f-s3cret":
			credsAsked++
		default:
			t.Errorf("an app got Authorization %q", s.auth)
		}
	}
	if plainAsked != 1 || credsAsked != 1 {
		t.Errorf("%d reads without credentials, %d with the URL's: want 1 and 1", plainAsked, credsAsked)
	}
	if len(f.failed) != 2 {
		t.Fatalf("failures %+v", f.failed)
	}
	m := newTopModel(context.Background(), tc, nil, "collector", false)
	m.drill, m.frames, m.width = "hog", &f, 0
	var b strings.Builder
	m.viewFrames(&b)
	if strings.Contains(b.String(), "pr0f-s3cret") || !strings.Contains(b.String(), "the app wants credentials") {
		t.Errorf("the frames part:\n%s", b.String())
	}
	for _, bad := range []string{"ftp://ops:pr0f-s3cret@app/x", "http://ops:pr0f-s3cret@app:9480" + holdProfilePath + "?seconds=30", "http://ops:pr0f-s3cret@[::1"} {
		if err := validateHoldProfileURLs([]string{bad}); err == nil || strings.Contains(err.Error(), "pr0f-s3cret") {
			t.Errorf("validating %s: %v", bad, err)
		}
	}
}

// TestHoldProfileRecentBaseline: the recent figures subtract the latest
// read at least a window old (else the oldest), forget reads older than
// two windows, and count a restarted app's whole profile as recent.
func TestHoldProfileRecentBaseline(t *testing.T) {
	f := &frameFetcher{window: time.Minute, reads: map[string][]profileRead{}}
	t0 := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	started := t0.Add(-time.Hour).UnixNano()
	read := func(at time.Duration, start int64) profileRead {
		return profileRead{at: t0.Add(at), prof: &profile.Profile{TimeNanos: start, Period: int64(at / time.Second)}}
	}
	for _, c := range []struct {
		name     string
		r        profileRead
		wantFrom int64 // the baseline's Period, the second it was read at; -1: none (nil)
		wantSpan time.Duration
	}{
		{"the first read has none", read(0, started), -1, 0},
		{"the oldest, younger than the window", read(30*time.Second, started), 0, 30 * time.Second},
		{"still the oldest", read(59*time.Second, started), 0, 59 * time.Second},
		{"the latest a window old", read(95*time.Second, started), 30, 65 * time.Second},
		{"after an absence of over two windows, none", read(300*time.Second, started), -1, 0},
		{"a restarted app: all of it is recent", read(310*time.Second, t0.Add(305*time.Second).UnixNano()), -1, 10 * time.Second},
	} {
		b, span := f.baseline("app", c.r)
		from := int64(-1)
		if b != nil {
			from = b.Period
		}
		if from != c.wantFrom || span != c.wantSpan {
			t.Errorf("%s: baseline read at %ds over %v; want %ds over %v", c.name, from, span, c.wantFrom, c.wantSpan)
		}
	}
}

// hostileHoldProfile is a hold profile an app could serve: its function,
// file, tag and release site names carry escape codes and line breaks.
func hostileHoldProfile(tag string) []byte {
	fn := &profile.Function{ID: 1, Name: "evil\x1b[2J\x1b[31mred.(*T).borrow", Filename: "/src/two\nlines.go"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn, Line: 7}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "held", Unit: "nanoseconds"}, {Type: "idle_held", Unit: "nanoseconds"},
			{Type: "holds", Unit: "count"}, {Type: "dial", Unit: "nanoseconds"}, {Type: "held_open", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "holds", Unit: "count"}, Period: 1, TimeNanos: time.Now().UnixNano(),
		Function: []*profile.Function{fn}, Location: []*profile.Location{loc},
		Sample: []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{2e9, 1e9, 4, 0, 0},
			Label: map[string][]string{"conn_tag": {tag}, "released_at": {"evil /src/c1\u009b31mcsi.go:9"}}}},
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// TestDrillDownFramesEscapeWhatTheAppSends: names in an app's profile reach
// the terminal with their control characters escaped, not obeyed.
func TestDrillDownFramesEscapeWhatTheAppSends(t *testing.T) {
	tag := "hog\x1b]0;title\x07"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(hostileHoldProfile(tag)) }))
	defer srv.Close()
	tc := &topCmd{holdProfiles: []string{srv.URL + holdProfilePath}}
	if err := tc.startFrames(); err != nil {
		t.Fatal(err)
	}
	m := newTopModel(context.Background(), tc, nil, "collector", true)
	m.width, m.drill = 0, tag
	runModel(m, m.fetchFrames())
	var b strings.Builder
	m.viewFrames(&b)
	out := b.String()
	for _, want := range []string{`evil\x1b[2J\x1b[31mred.(*T).borrow two\nlines.go:7`, `c1\u009b31mcsi.go:9`, "2.00", "50%"} {
		if !strings.Contains(out, want) {
			t.Errorf("the frames part lacks %q:\n%s", want, out)
		}
	}
	// Only the part's own styles are escape codes: bold titles, red reasons and idle shares.
	if rest := regexp.MustCompile(`\x1b\[(1|31|0)m`).ReplaceAllString(out, ""); strings.ContainsAny(rest, "\x1b\x07\u009b") {
		t.Errorf("a control character reaches the terminal: %q", rest)
	}
}

// FuzzHoldProfileFrames: whatever an app answers, reading it for the
// drill-down and drawing it neither panics nor lets a control character
// through.
func FuzzHoldProfileFrames(f *testing.F) {
	f.Add(hostileHoldProfile("hog"), "hog")
	hp := conntag.NewHoldProfile(1)
	var real bytes.Buffer
	hp.WriteTo(&real)
	f.Add(real.Bytes(), "hog")
	f.Add([]byte("<html>login</html>"), "hog")
	f.Fuzz(func(t *testing.T, body []byte, tag string) {
		prof, err := profile.ParseData(body)
		if err != nil || sampleIndex(prof, "held") < 0 {
			return
		}
		out := tagFrames{tag: tag, answered: 1}
		sumFrames(&out, []*profile.Profile{prof}, []*profile.Profile{prof})
		tc := &topCmd{frames: &frameFetcher{apps: []holdProfileApp{{name: "app"}}}}
		m := newTopModel(context.Background(), tc, nil, "collector", false)
		m.width, m.drill, m.frames = 0, tag, &out
		var b strings.Builder
		m.viewFrames(&b)
		if strings.ContainsAny(b.String(), "\x1b\x07\u009b") {
			t.Errorf("a control character reaches the terminal: %q", b.String())
		}
	})
}

// TestHoldProfileFlagChecks: --hold-profile feeds the console only (--once
// and --json refuse it from the flag, ignore it from the environment);
// --ca-cert is kept for an https app when polling directly, and the app's
// certificate is then trusted; messages show no query string, which may
// carry an app's token.
func TestHoldProfileFlagChecks(t *testing.T) {
	base := func() *topCmd {
		return &topCmd{window: "10s", layer: collector.LayerMax, sortKey: "occupancy", interval: time.Second,
			timeout: time.Second, color: "never", mysqlDSNs: []string{"mon:pw@tcp(127.0.0.1:3306)/"}}
	}
	tc := base()
	tc.once, tc.holdProfiles, tc.holdProfileFlag = true, []string{"http://app:9480" + holdProfilePath}, true
	if err := tc.validate(); err == nil || !strings.Contains(err.Error(), "--once and --json print the table only") {
		t.Errorf("--once --hold-profile: %v", err)
	}
	tc = base()
	tc.jsonOut, tc.holdProfiles = true, []string{"http://app:9480" + holdProfilePath}
	if err := tc.validate(); err != nil || tc.holdProfiles != nil {
		t.Errorf("--json with HOLDTIME_HOLD_PROFILE: %v, %v", err, tc.holdProfiles)
	}
	for _, raw := range []string{"ftp://app/p?token=t0ken-s3cret", "http://app:9480/p?seconds=30&token=t0ken-s3cret"} {
		if err := validateHoldProfileURLs([]string{raw}); err == nil || strings.Contains(err.Error(), "t0ken-s3cret") {
			t.Errorf("%s: %v", raw, err)
		}
	}

	app := httptest.NewTLSServer(http.NotFoundHandler())
	defer app.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: app.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tc = base()
	tc.caCert, tc.caFlag, tc.holdProfiles = ca, true, []string{app.URL + holdProfilePath}
	if err := tc.validate(); err != nil || tc.caCert != ca {
		t.Fatalf("--mysql with --ca-cert for an https --hold-profile: %v (ca %q)", err, tc.caCert)
	}
	if err := tc.startFrames(); err != nil {
		t.Fatal(err)
	}
	f := tc.frames.fetch(context.Background(), "hog")
	if len(f.failed) != 1 || !strings.Contains(f.failed[0].reason, "404") {
		t.Errorf("the https app with its CA trusted: %+v; want it reached (a 404)", f.failed)
	}
	tc = base()
	tc.caCert, tc.caFlag, tc.holdProfiles = ca, true, []string{"http://app:9480" + holdProfilePath}
	if err := tc.validate(); err == nil || !strings.Contains(err.Error(), "polling directly needs neither") {
		t.Errorf("--mysql with --ca-cert and only an http app: %v", err)
	}
}
