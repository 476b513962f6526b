package collector

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdtime/holdtime/testenv"
)

// setupTags are the tags of the setups workload.
var setupTags = []string{"hog", "short_autocommit", "batch_tx", "uvar_pin", "prepared"}

// TestLiveProxySQLSetups is issue 13's definition of done: one workload
// through a real ProxySQL, watched at once by three collectors, one per
// setup a user may have:
//
//   - admin: ProxySQL's admin interface and the MySQL server behind it
//     (the proxy↔server join), no events log, no spans;
//   - events: the same and ProxySQL's events log;
//   - spans: admin, server and conntag's hold spans over OTLP.
//
// Per round and setup, each tag's proxy-layer backend hold (the headline
// source, and the processlist's where it is not the headline) must be
// within 15 % of what the clients measured for every tag holding at least
// 1 s; unknown under 5 % of the total; the hog ranked first; no tag outside
// the workload's. Three rounds, because the carried-tag error this guards
// against was intermittent.
func TestLiveProxySQLSetups(t *testing.T) {
	skipTimingUnderRace(t)
	testenv.RequireProxySQL(t)
	d, px := qBehindProxySQL(t)
	ctx := context.Background()
	setups, spansURL := startThreeSetups(t, d, px)
	tp := spansTo(t, spansURL, px.AppAddr, 200*time.Millisecond)
	open := func(maxIdle int) *sql.DB {
		db := openConntagDB(t, px.AppConfig(), tp)
		db.SetMaxOpenConns(10)
		db.SetMaxIdleConns(maxIdle)
		return db
	}
	db := open(10)
	// The pin's connection is closed when returned: ProxySQL keeps a
	// backend pinned by a user variable until the client disconnects.
	pinDB := open(0)
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}

	for round := 1; round <= 3; round++ {
		before := make([]map[Source]map[string]float64, len(setups))
		for i, s := range setups {
			before[i] = s.snapshot()
		}
		inner, outer, _ := runSetupsWorkload(t, db, pinDB, issue13Workload, 8*time.Second)
		if err := tp.ForceFlush(ctx); err != nil {
			t.Fatal(err)
		}
		// Settle: the grace period for pending hold, then figures that no
		// longer change.
		for _, s := range setups {
			waitSettled(t, s.polls, func() string { return fmt.Sprint(s.snapshot()) })
		}
		t.Logf("round %d: clients: held at least %s", round, fmtHolds(inner))
		t.Logf("round %d: clients: held at most  %s", round, fmtHolds(outer))
		for i, s := range setups {
			s.checkRound(t, round, before[i], inner, outer, px.EventsLog)
		}
	}
	// No junk tag in the ranking, from any source (digests included).
	for _, s := range setups {
		s.checkNoJunkTags(t)
	}
}

// liveSetup is one of the setups a user may have, watching the setups
// workload: a running collector and its poll count.
type liveSetup struct {
	name  string
	c     *Collector
	polls *pollCount
}

// startThreeSetups runs the three setups' collectors (admin, events,
// spans) of ProxySQL px and d's server until the test ends; it returns
// once each source of each has polled twice, with the URL to send the
// spans setup its spans.
func startThreeSetups(t *testing.T, d *testenv.Database, px *testenv.ProxySQL) (setups []*liveSetup, spansURL string) {
	t.Helper()
	server := MySQLConfig{Name: "db", DSN: d.Target.Config("").FormatDSN(), Interval: 250 * time.Millisecond}
	// Sampled every 50 ms: a 80 ms transaction is then seen one or two
	// times, so sampling error over ~60 of them is about 4 % (one sigma).
	proxy := ProxySQLConfig{Name: "px", DSN: px.AdminDSN(), ClientAddress: px.AppAddr, ProcesslistInterval: 50 * time.Millisecond,
		TagGrace: 2 * time.Second, DigestInterval: time.Second}
	withEvents := proxy
	withEvents.EventsLog = px.EventsLog
	for _, s := range []struct {
		name string
		cfg  Config
	}{
		{"admin", Config{ProxySQL: []ProxySQLConfig{proxy}, MySQL: []MySQLConfig{server}}},
		{"events", Config{ProxySQL: []ProxySQLConfig{withEvents}, MySQL: []MySQLConfig{server}}},
		{"spans", Config{ProxySQL: []ProxySQLConfig{proxy}, MySQL: []MySQLConfig{server}, OTLP: OTLPConfig{Enabled: true}}},
	} {
		c, err := New(s.cfg)
		if err != nil {
			t.Fatal(err)
		}
		st := &liveSetup{name: s.name, c: c, polls: countPolls(c)}
		setups = append(setups, st)
		if s.cfg.OTLP.Enabled {
			srv := httptest.NewServer(c.Handler())
			t.Cleanup(srv.Close)
			spansURL = srv.URL + "/v1/traces"
		}
		runUntilCleanup(t, c)
	}
	for _, s := range setups {
		s.polls.wait(t, "db", SourceMySQL, 2)
		s.polls.wait(t, "px", SourceProxySQLProcesslist, 2)
	}
	return setups, spansURL
}

// proxySources are the setup's sources of the proxy layer: the events log
// where configured, else the processlist. (The events setup's processlist
// is a cross-check, logged.)
func (s *liveSetup) proxySources() []Source {
	if s.name == "events" {
		return []Source{SourceProxySQLEvents, SourceProxySQLProcesslist}
	}
	return []Source{SourceProxySQLProcesslist}
}

// snapshot is the hold per tag of each of the setup's proxy sources.
func (s *liveSetup) snapshot() map[Source]map[string]float64 {
	s.c.st.mu.Lock()
	defer s.c.st.mu.Unlock()
	out := map[Source]map[string]float64{}
	for _, src := range s.proxySources() {
		out[src] = map[string]float64{}
		if sr := s.c.st.series[seriesKey{"px", src}]; sr != nil {
			for tag, e := range sr.tags {
				out[src][tag] = e.total.Hold
			}
		}
	}
	return out
}

// checkRound logs the hold each proxy source of the setup gave each tag in
// round round (since snapshot before) and checks the headline source's
// against the clients' bracket inner..outer (checkHeadlineRound).
func (s *liveSetup) checkRound(t *testing.T, round int, before map[Source]map[string]float64, inner, outer map[string]float64, eventsLog string) {
	t.Helper()
	after := s.snapshot()
	for _, src := range s.proxySources() {
		got := map[string]float64{}
		var sum float64
		for tag, v := range after[src] {
			if dv := v - before[src][tag]; dv > 0 {
				got[tag] = dv
				sum += dv
			}
		}
		t.Logf("round %d %-6s %-20s %s", round, s.name, src, fmtHolds(got))
		if s.c.st.headline[targetLayer{"px", LayerProxy}] != src {
			continue
		}
		s.checkHeadlineRound(t, round, src, got, sum, inner, outer, eventsLog)
	}
}

// checkHeadlineRound: in the round, every tag holding at least 1 s got
// within 15 % of what its clients measured, unknown and untagged under
// 5 % of sum, the hog ranked first, no tag outside the workload's.
func (s *liveSetup) checkHeadlineRound(t *testing.T, round int, src Source, got map[string]float64, sum float64, inner, outer map[string]float64, eventsLog string) {
	t.Helper()
	for _, tag := range setupTags {
		lo, hi := inner[tag], outer[tag]
		if hi < 1 {
			continue
		}
		if got[tag] < 0.85*lo || got[tag] > 1.15*hi {
			t.Errorf("round %d, setup %s, %s: %s held %.2f s, the clients measured %.2f s to %.2f s (15 %% allowed)",
				round, s.name, src, tag, got[tag], lo, hi)
			if src == SourceProxySQLEvents {
				logEventsHolds(t, s.c, eventsLog, tag)
			}
		}
	}
	if got[UnknownTag]+got[UntaggedTag] > 0.05*sum {
		t.Errorf("round %d, setup %s, %s: unknown %.2f s and untagged %.2f s of %.2f s", round, s.name, src, got[UnknownTag], got[UntaggedTag], sum)
	}
	if top := topTag(got); top != "hog" {
		t.Errorf("round %d, setup %s, %s: %s ranks first, not the hog", round, s.name, src, top)
	}
	for tag := range got {
		if !slices.Contains(setupTags, tag) && tag != UnknownTag && tag != UntaggedTag {
			t.Errorf("round %d, setup %s, %s: tag %q is not the workload's", round, s.name, src, tag)
		}
	}
}

// checkNoJunkTags: the setup's ranking lists no tag outside the
// workload's, from any source; rejected rows are logged.
func (s *liveSetup) checkNoJunkTags(t *testing.T) {
	t.Helper()
	resp, err := s.c.TopReport(TopQuery{Window: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Rows {
		for src := range r.Sources {
			if !slices.Contains(setupTags, r.Tag) && r.Tag != UnknownTag && r.Tag != UntaggedTag {
				t.Errorf("setup %s: /api/v1/top lists %q (source %s)", s.name, r.Tag, src)
			}
		}
	}
	for _, ss := range resp.Sources {
		if ss.Malformed > 0 {
			t.Logf("setup %s: %s/%s rejected %.0f rows, latest %q", s.name, ss.Target, ss.Source, ss.Malformed, ss.MalformedSample)
		}
	}
}

// logEventsHolds logs, for a tag the events log source got wrong, its
// longest holds and the events log lines of their sessions: what the next
// failure needs to be understood (CI once saw the hog and the pin at twice
// what their clients held, in round 1 only, and it did not happen again).
func logEventsHolds(t *testing.T, c *Collector, path, tag string) {
	c.st.mu.Lock()
	var longest []DetailHold
	if sr := c.st.series[seriesKey{"px", SourceProxySQLEvents}]; sr != nil && sr.tags[tag] != nil {
		longest = slices.Clone(sr.tags[tag].longest)
	}
	c.st.mu.Unlock()
	files, _ := filepath.Glob(path + ".*")
	for _, h := range longest {
		t.Logf("%s: longest hold: session %d from %s, %.3f s (%.3f s idle), %d statements",
			tag, h.SessionID, h.Start.Format("15:04:05.000000"), h.Seconds, h.IdleSeconds, h.Statements)
		var lines []string
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			id := fmt.Sprintf(`"thread_id":%d`, h.SessionID)
			for _, l := range strings.Split(string(b), "\n") {
				if i := strings.Index(l, id); i >= 0 && len(l) > i+len(id) && (l[i+len(id)] == ',' || l[i+len(id)] == '}') {
					lines = append(lines, filepath.Base(f)+": "+l[:min(len(l), 400)])
				}
			}
		}
		if len(lines) > 40 {
			lines = append(lines[:20], append([]string{"..."}, lines[len(lines)-20:]...)...)
		}
		for _, l := range lines {
			t.Log("  " + l)
		}
	}
}

// setupsWorkload sizes the setups workload's clients.
type setupsWorkload struct {
	// hogs clients each run transactions idle hogIdle inside; with
	// hogLock they lock a row of their own and update it (issue 13),
	// without they run SELECT 1 (issue 22).
	hogs    int
	hogIdle time.Duration
	hogLock bool
	// autocommit clients run SELECT SLEEP(autocommitSleep) with random
	// pauses; batch clients run three-statement transactions.
	autocommit      int
	autocommitSleep time.Duration
	batch           int
}

// issue13Workload is TestLiveProxySQLSetups' workload.
var issue13Workload = setupsWorkload{hogs: 2, hogIdle: 700 * time.Millisecond, hogLock: true,
	autocommit: 2, autocommitSleep: 50 * time.Millisecond, batch: 1}

// runSetupsWorkload runs the five tags for about dur through db and
// returns the backend hold each tag's clients measured.
//
// A client cannot see the backend being attached and released, only
// bracket it: inner is time the backend was certainly held (from the reply
// to a transaction's first statement to sending its last; a statement's
// own server time), outer the time it may have been (from sending the
// first statement to the reply to the last). On an idle machine they are
// within a few percent; under load (CI, the race detector) the client's
// own overhead widens the bracket, not the collector's error. holds has
// each hold's midpoint, for the sampling error (samplingSigma).
func runSetupsWorkload(t *testing.T, db, pinDB *sql.DB, w setupsWorkload, dur time.Duration) (inner, outer map[string]float64, holds map[string][]float64) {
	t.Helper()
	b := &clientBrackets{inner: map[string]float64{}, outer: map[string]float64{}, holds: map[string][]float64{}}
	deadline := time.Now().Add(dur)
	clients := &taggedClients{t: t}
	// The hog: transactions held open idle (around a row lock).
	for id := 1; id <= w.hogs; id++ {
		clients.run("hog", func(ctx context.Context) error { return hogTransactions(ctx, db, w, id, deadline, b) })
	}
	// Short autocommit statements.
	for range w.autocommit {
		clients.run("short_autocommit", func(ctx context.Context) error { return shortAutocommits(ctx, db, w, deadline, b) })
	}
	// Short multi-statement transactions.
	for range w.batch {
		clients.run("batch_tx", func(ctx context.Context) error { return batchTransactions(ctx, db, deadline, b) })
	}
	// A user variable pins the session's backend until it disconnects.
	clients.run("uvar_pin", func(ctx context.Context) error { return userVariablePins(ctx, pinDB, deadline, b) })
	// Server-side prepared statements, from two clients.
	for range 2 {
		clients.run("prepared", func(ctx context.Context) error { return preparedStatements(ctx, db, deadline, b) })
	}
	clients.wait()
	return b.inner, b.outer, b.holds
}

// clientBrackets is what the setups workload's clients measured per tag:
// see runSetupsWorkload.
type clientBrackets struct {
	mu           sync.Mutex
	inner, outer map[string]float64
	holds        map[string][]float64
}

// bracket adds a hold of tag certainly held in, possibly held out.
func (b *clientBrackets) bracket(tag string, in, out time.Duration) {
	b.mu.Lock()
	b.inner[tag] += in.Seconds()
	b.outer[tag] += out.Seconds()
	b.holds[tag] = append(b.holds[tag], (in+out).Seconds()/2)
	b.mu.Unlock()
}

// hogTransactions is hog client id until deadline: transactions idle
// w.hogIdle inside, with w.hogLock around a lock of row id of q.
func hogTransactions(ctx context.Context, db *sql.DB, w setupsWorkload, id int, deadline time.Time, b *clientBrackets) error {
	for time.Now().Before(deadline) {
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		began := time.Now()
		// Text protocol (literal id), as with interpolateParams:
		// the prepared-statement tag has its own client below.
		q := "SELECT 1"
		if w.hogLock {
			q = fmt.Sprintf("SELECT n FROM q WHERE id = %d FOR UPDATE", id)
		}
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
		time.Sleep(w.hogIdle) // the workload: idle inside the transaction
		if w.hogLock {
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("UPDATE q SET n = n + 1 WHERE id = %d", id)); err != nil {
				return err
			}
		}
		committing := time.Now()
		if err := tx.Commit(); err != nil {
			return err
		}
		b.bracket("hog", committing.Sub(began), time.Since(start))
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// randomPause sleeps 10 to 50 ms. Pauses are random so that the
// statements do not beat with the collector's sampling.
func randomPause() { time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond) }

// shortAutocommits runs SELECT SLEEP(w.autocommitSleep) with random
// pauses until deadline.
func shortAutocommits(ctx context.Context, db *sql.DB, w setupsWorkload, deadline time.Time, b *clientBrackets) error {
	sleep := fmt.Sprintf("SELECT SLEEP(%g)", w.autocommitSleep.Seconds())
	for time.Now().Before(deadline) {
		start := time.Now()
		if _, err := db.ExecContext(ctx, sleep); err != nil {
			return err
		}
		b.bracket("short_autocommit", w.autocommitSleep, time.Since(start))
		randomPause()
	}
	return nil
}

// batchTransactions runs three-statement transactions until deadline.
func batchTransactions(ctx context.Context, db *sql.DB, deadline time.Time, b *clientBrackets) error {
	for time.Now().Before(deadline) {
		start := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		began := time.Now()
		for range 3 {
			if _, err := tx.ExecContext(ctx, "UPDATE q SET n = n + 1 WHERE id = 5"); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
		committing := time.Now()
		if err := tx.Commit(); err != nil {
			return err
		}
		b.bracket("batch_tx", committing.Sub(began), time.Since(start))
		time.Sleep(40 * time.Millisecond)
	}
	return nil
}

// userVariablePins, until 2 s before deadline, sets a user variable on a
// connection of pinDB, reads it four times 400 ms apart, and disconnects.
func userVariablePins(ctx context.Context, pinDB *sql.DB, deadline time.Time, b *clientBrackets) error {
	for time.Now().Add(2 * time.Second).Before(deadline) {
		conn, err := pinDB.Conn(ctx)
		if err != nil {
			return err
		}
		if err := conn.PingContext(ctx); err != nil { // logged in before the clock starts
			return err
		}
		start := time.Now()
		var set time.Time
		for i := range 4 {
			if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET @x = %d", i)); err != nil {
				return err
			}
			if i == 0 {
				set = time.Now()
			}
			var x sql.NullInt64
			if err := conn.QueryRowContext(ctx, "SELECT @x").Scan(&x); err != nil {
				return err
			}
			if i < 3 {
				time.Sleep(400 * time.Millisecond) // idle, the backend pinned
			}
		}
		closing := time.Now()
		if err := conn.Close(); err != nil { // MaxIdleConns 0: disconnects
			return err
		}
		b.bracket("uvar_pin", closing.Sub(set), time.Since(start))
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// preparedStatements prepares a statement and executes it with random
// pauses until deadline.
func preparedStatements(ctx context.Context, db *sql.DB, deadline time.Time, b *clientBrackets) error {
	start := time.Now()
	stmt, err := db.PrepareContext(ctx, "SELECT SLEEP(0.05), ?")
	if err != nil {
		return err
	}
	defer stmt.Close()
	b.bracket("prepared", 0, time.Since(start))
	for time.Now().Before(deadline) {
		start := time.Now()
		if _, err := stmt.ExecContext(ctx, 1); err != nil {
			return err
		}
		b.bracket("prepared", 50*time.Millisecond, time.Since(start))
		randomPause()
	}
	return nil
}

// samplingSigma is the standard error, in seconds, of a processlist
// sample's estimate of the hold of holds (their lengths in seconds), given
// the real gaps between samples. A hold is credited, per sample that sees
// it, the gap to the next sample: on a fixed grid of period Δ a hold of
// length L is seen floor(L/Δ) times or once more, so its estimate's
// variance is Δ²·f·(1−f), f the fractional part of L/Δ. Gaps that jitter
// (a loaded machine) weigh the long ones: a hold is likelier to lie in a
// long gap and is then credited all of it, which the grid's Δ replaced
// by Σg²/Σg captures (for L under a gap, the variance is L·E[g²]/E[g] − L²).
// Short statements make the error: a 10 ms statement sampled every 50 ms
// is seen one time in five.
func samplingSigma(holds []float64, gaps []time.Duration) float64 {
	var sum, sq float64
	for _, g := range gaps {
		sum += g.Seconds()
		sq += g.Seconds() * g.Seconds()
	}
	if sum == 0 {
		return 0
	}
	d := sq / sum
	var v float64
	for _, l := range holds {
		_, f := math.Modf(l / d)
		v += f * (1 - f)
	}
	return d * math.Sqrt(v)
}

// waitSettled waits until state, read after each ProxySQL sample, stops
// changing for a whole tag grace (bounded).
func waitSettled(t *testing.T, polls *pollCount, state func() string) {
	t.Helper()
	prev, same := "", 0
	for i := 0; i < 300 && same < 25; i++ {
		polls.wait(t, "px", SourceProxySQLProcesslist, 1)
		if s := state(); s == prev {
			same++
		} else {
			prev, same = s, 0
		}
	}
}

func topTag(m map[string]float64) string {
	best, bv := "", -1.0
	for tag, v := range m {
		if v > bv || v == bv && tag < best {
			best, bv = tag, v
		}
	}
	return best
}

func fmtHolds(m map[string]float64) string {
	tags := make([]string, 0, len(m))
	for tag := range m {
		tags = append(tags, tag)
	}
	sort.Strings(tags)
	var b strings.Builder
	for _, tag := range tags {
		fmt.Fprintf(&b, "%s=%.2f ", tag, m[tag])
	}
	return b.String()
}
