package trxjoin

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// holdState is what a test backend is doing, as the test knows it: the
// ground truth a ProxySQL sample would show.
type holdState struct {
	mu    sync.Mutex
	gen   uint64
	idle  bool
	inTrx bool
	tag   string
}

func (h *holdState) set(idle, inTrx bool, tag string) {
	h.mu.Lock()
	h.gen++
	h.idle, h.inTrx, h.tag = idle, inTrx, tag
	h.mu.Unlock()
}

func (h *holdState) get() (gen uint64, idle, inTrx bool, tag string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen, h.idle, h.inTrx, h.tag
}

// truthSample is a sample with the tag the test knows holds the backend.
type truthSample struct {
	Sample
	tag string
}

// TestReusedBackendsUnderLoad drives four server connections the way
// ProxySQL reuses backends: one borrower after another, each with a tag of
// its own, idle in a transaction (text and binary protocol) or pinned by a
// user variable, while a reader polls the server and a sampler samples the
// idle holds. Every result the join calls exact must be the true holder's
// tag; the figures are logged. Run it with a CPU burner beside it to see
// exact results stay exact under load; TRXJOIN_LOAD_SECONDS sets the
// duration (default 3).
func TestReusedBackendsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	secs := loadSeconds(t)
	db := openDB(t, fullServer(t))
	const nb = 4
	tags := []string{"hog", "batch", "pin", "checkout", "refund"}
	bs := make([]*backend, nb)
	states := make([]*holdState, nb)
	for i := range bs {
		bs[i] = newBackend(t, db)
		states[i] = &holdState{}
	}
	mon := newMonitor(t, db, bs...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs*float64(time.Second)))
	defer cancel()

	var (
		wg      sync.WaitGroup
		samples []truthSample
		errs    = make(chan error, nb+2)
	)
	// Borrowers: each round a different tag takes the backend at once
	// after the previous one let it go.
	for i, b := range bs {
		wg.Go(func() { borrowInTurn(ctx, b, states[i], i, tags, errs) })
	}
	// The reader: the MySQL source's polls, every 10 ms.
	wg.Go(func() { pollServer(ctx, mon, errs) })
	// The sampler: ProxySQL's processlist samples of idle holds, every 7 ms.
	wg.Go(func() { samples = sampleIdleHolds(ctx, bs, states) })
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mon.read() // brackets the last samples

	tally := newLoadTally(tags)
	for _, s := range samples {
		tally.decide(t, mon.reads, s)
	}
	tally.logHoldsByKind(t)
	t.Logf("%d reads in %.1f s, %d holds still pending", len(mon.reads), secs, tally.pending)
	for _, tag := range tags {
		c := tally.byTag[tag]
		t.Logf("%-8s holds: exact %d, inferred %d, unknown %d", tag, c[Exact], c[Inferred], c[Unknown])
	}
	if tally.insideButNot > 0 {
		t.Errorf("%d text-protocol holds with a read inside their idle span were not exact", tally.insideButNot)
	}
	t.Logf("%d text-protocol holds had a read inside their idle span, all exact", tally.insideHolds)
}

// loadSeconds is the load test's duration: TRXJOIN_LOAD_SECONDS, default 3.
func loadSeconds(t *testing.T) float64 {
	t.Helper()
	secs := 3.0
	if v := os.Getenv("TRXJOIN_LOAD_SECONDS"); v != "" {
		var err error
		if secs, err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatalf("TRXJOIN_LOAD_SECONDS=%q: %v", v, err)
		}
	}
	return secs
}

// borrowInTurn is backend b's borrowers until ctx ends: from round first
// on, each round the next tag of tags borrows it (see borrow).
func borrowInTurn(ctx context.Context, b *backend, h *holdState, first int, tags []string, errs chan<- error) {
	prep := map[string]*sql.Stmt{}
	for _, tag := range []string{"checkout", "refund"} {
		st, err := b.conn.PrepareContext(context.Background(), "SELECT ? + 1 /* conn_tag:"+tag+" */")
		if err != nil {
			errs <- err
			return
		}
		defer st.Close()
		prep[tag] = st
	}
	for round := first; ctx.Err() == nil; round++ {
		tag := tags[round%len(tags)]
		if err := borrow(b.conn, h, tag, prep[tag], round); err != nil {
			errs <- err
			return
		}
	}
}

// pollServer reads the server every 10 ms until ctx ends, appending to
// mon.reads.
func pollServer(ctx context.Context, mon *monitor, errs chan<- error) {
	var readsMu sync.Mutex
	for ctx.Err() == nil {
		r, err := ReadServer(context.Background(), mon.conn, mon.ids)
		if err != nil {
			errs <- err
			return
		}
		readsMu.Lock()
		mon.reads = append(mon.reads, r)
		readsMu.Unlock()
		time.Sleep(10 * time.Millisecond) // a poll interval, not a wait for a condition
	}
}

// sampleIdleHolds is ProxySQL's processlist samples, every 7 ms until ctx
// ends. A sample counts only when the backend was idle and held by one
// borrower from before its start to after its end.
// Consecutive samples of one idle hold form a run, passed to Decide as
// one Sample from the first one's start to the last one's end (what the
// ProxySQL sampler knows as one hold).
func sampleIdleHolds(ctx context.Context, bs []*backend, states []*holdState) []truthSample {
	var samples []truthSample
	lastGen, lastIdx := make([]uint64, len(states)), make([]int, len(states))
	for ctx.Err() == nil {
		for i, h := range states {
			start := time.Now()
			g1, idle, inTrx, tag := h.get()
			g2, _, _, _ := h.get()
			end := time.Now()
			if !idle || g1 != g2 {
				continue
			}
			if lastGen[i] == g1 {
				samples[lastIdx[i]].End = end
				continue
			}
			lastGen[i], lastIdx[i] = g1, len(samples)
			samples = append(samples, truthSample{Sample{Start: start, End: end, Backend: bs[i].id, InTrx: inTrx}, tag})
		}
		time.Sleep(7 * time.Millisecond)
	}
	return samples
}

// loadKey is a kind of load test result: in a transaction or pinned, its
// quality, right or wrong.
type loadKey struct {
	inTrx bool
	q     Quality
	right bool
}

// loadTally is what Decide made of the load test's samples.
type loadTally struct {
	counts                             map[loadKey]int
	byTag                              map[string]*[3]int
	pending, insideHolds, insideButNot int
}

func newLoadTally(tags []string) *loadTally {
	l := &loadTally{counts: map[loadKey]int{}, byTag: map[string]*[3]int{}}
	for _, tag := range tags {
		l.byTag[tag] = &[3]int{}
	}
	return l
}

// decide decides sample s on the reads around it and counts the result;
// an exact result naming another tag than the true holder's is an error.
func (l *loadTally) decide(t *testing.T, reads []Read, s truthSample) {
	t.Helper()
	got := Decide(window(reads, s.Sample), s.Sample)
	if got.Pending {
		l.pending++
		return
	}
	l.byTag[s.tag][got.Quality]++
	// A read inside the span saw the backend while the session held it
	// idle: no rule it meets uses time, so a text-protocol hold is exact
	// whatever the load (a binary-protocol Execute's tag can still be
	// ambiguous: several prepared statements' COUNT_EXECUTE moved).
	if s.tag != "checkout" && s.tag != "refund" && readInside(reads, s.Sample) {
		l.insideHolds++
		if got.Quality != Exact {
			l.insideButNot++
		}
	}
	right := got.Tag == s.tag
	l.counts[loadKey{s.InTrx, got.Quality, right}]++
	if got.Quality == Inferred && !right && os.Getenv("TRXJOIN_DUMP_INFERRED") != "" {
		t.Logf("inferred wrong: sample of %q (in trx %v) %v..%v named %q (%s)", s.tag, s.InTrx, s.Start.Format("05.000000"), s.End.Format("05.000000"), got.Tag, got.Reason)
	}
	if got.Quality == Exact && !right {
		t.Errorf("exact but wrong: sample of %q (in trx %v) named %q (%s)", s.tag, s.InTrx, got.Tag, got.Reason)
		if os.Getenv("TRXJOIN_DUMP") != "" {
			dumpBracketingReads(t, reads, s)
		}
	}
}

// readInside reports whether one of reads lies inside s's span.
func readInside(reads []Read, s Sample) bool {
	for _, r := range reads {
		if !r.Start.Before(s.Start) && !r.End.After(s.End) {
			return true
		}
	}
	return false
}

// dumpBracketingReads logs the reads bracketing s, what each shows of
// s's backend, and stops the test.
func dumpBracketingReads(t *testing.T, reads []Read, s truthSample) {
	t.Helper()
	for i, r := range reads {
		if r.End.Before(s.Start) && i+1 < len(reads) && !reads[i+1].End.Before(s.Start) || r.Start.After(s.End) && !reads[i-1].Start.After(s.End) {
			th := r.Threads[s.Backend]
			t.Logf("read %d %v..%v trx %+v", i, r.Start.Format("05.000000"), r.End.Format("05.000000"), th.Trx)
			for _, st := range th.Stmts {
				t.Logf("   %+v", st)
			}
		}
	}
	t.Logf("sample %v..%v", s.Start.Format("05.000000"), s.End.Format("05.000000"))
	t.FailNow()
}

// logHoldsByKind logs the results of holds in a transaction and pinned;
// a kind without a sample is an error.
func (l *loadTally) logHoldsByKind(t *testing.T) {
	t.Helper()
	for _, inTrx := range []bool{true, false} {
		kind := map[bool]string{true: "in transaction", false: "pinned"}[inTrx]
		total := 0
		for k, n := range l.counts {
			if k.inTrx == inTrx {
				total += n
			}
		}
		t.Logf("%s: %d holds: exact %d (wrong %d), inferred %d (wrong %d), unknown %d", kind, total,
			l.counts[loadKey{inTrx, Exact, true}]+l.counts[loadKey{inTrx, Exact, false}], l.counts[loadKey{inTrx, Exact, false}],
			l.counts[loadKey{inTrx, Inferred, true}]+l.counts[loadKey{inTrx, Inferred, false}], l.counts[loadKey{inTrx, Inferred, false}],
			l.counts[loadKey{inTrx, Unknown, false}])
		if total == 0 {
			t.Errorf("no %s sample taken", kind)
		}
	}
}

// window is what a caller keeps: the reads of a few seconds around the
// sample (Decide's cost is linear in the reads it is given).
func window(reads []Read, s Sample) []Read {
	from, _ := slices.BinarySearchFunc(reads, s.Start.Add(-2*time.Second), func(r Read, t time.Time) int { return r.End.Compare(t) })
	to, _ := slices.BinarySearchFunc(reads, s.End.Add(2*time.Second), func(r Read, t time.Time) int { return r.Start.Compare(t) })
	return reads[from:to]
}

// idleFor is how long a borrower holds its backend idle: the hog longer
// than the reader's poll interval, the others shorter.
func idleFor(tag string) time.Duration {
	if tag == "hog" {
		return 80 * time.Millisecond
	}
	return 15 * time.Millisecond
}

// borrow is one borrower's use of a backend: idle in a transaction (text or
// binary protocol) or pinned by a user variable, idle for idleFor, then released
// to the next borrower.
func borrow(c *sql.Conn, h *holdState, tag string, prep *sql.Stmt, round int) error {
	ctx := context.Background()
	exec := func(q string) error {
		_, err := c.ExecContext(ctx, q)
		return err
	}
	comment := " /* conn_tag:" + tag + " */"
	switch {
	case prep != nil:
		if err := exec("BEGIN"); err != nil {
			return err
		}
		if _, err := prep.ExecContext(ctx, round); err != nil {
			return err
		}
		h.set(true, true, tag)
		time.Sleep(idleFor(tag)) // the idle hold under test
		h.set(false, false, "")
		return exec("COMMIT")
	case tag == "pin":
		if err := exec("SET @v := " + strconv.Itoa(round) + comment); err != nil {
			return err
		}
		h.set(true, false, tag)
		time.Sleep(idleFor(tag))
		h.set(false, false, "")
		return exec("SELECT @v" + comment)
	default:
		if err := exec("BEGIN"); err != nil {
			return err
		}
		if err := exec(fmt.Sprintf("SELECT %d%s", round, comment)); err != nil {
			return err
		}
		h.set(true, true, tag)
		time.Sleep(idleFor(tag))
		h.set(false, false, "")
		return exec("COMMIT")
	}
}
