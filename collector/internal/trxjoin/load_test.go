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
	secs := 3.0
	if v := os.Getenv("TRXJOIN_LOAD_SECONDS"); v != "" {
		var err error
		if secs, err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatalf("TRXJOIN_LOAD_SECONDS=%q: %v", v, err)
		}
	}
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
		readsMu sync.Mutex
		samples []truthSample
		errs    = make(chan error, nb+2)
	)
	// Borrowers: each round a different tag takes the backend at once
	// after the previous one let it go.
	for i, b := range bs {
		wg.Go(func() {
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
			h := states[i]
			for round := i; ctx.Err() == nil; round++ {
				tag := tags[round%len(tags)]
				if err := borrow(b.conn, h, tag, prep[tag], round); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// The reader: the MySQL source's polls, every 10 ms.
	wg.Go(func() {
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
	})
	// The sampler: ProxySQL's processlist samples, every 7 ms. A sample
	// counts only when the backend was idle and held by one borrower
	// from before its start to after its end.
	// Consecutive samples of one idle hold form a run, passed to Decide as
	// one Sample from the first one's start to the last one's end (what the
	// ProxySQL sampler knows as one hold).
	wg.Go(func() {
		lastGen, lastIdx := make([]uint64, nb), make([]int, nb)
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
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mon.read() // brackets the last samples

	type key struct {
		inTrx bool
		q     Quality
		right bool
	}
	counts := map[key]int{}
	byTag := map[string]*[3]int{}
	for _, tag := range tags {
		byTag[tag] = &[3]int{}
	}
	pending, insideHolds, insideButNot := 0, 0, 0
	for _, s := range samples {
		got := Decide(window(mon.reads, s.Sample), s.Sample)
		if got.Pending {
			pending++
			continue
		}
		byTag[s.tag][got.Quality]++
		// A read inside the span saw the backend while the session held it
		// idle: no rule it meets uses time, so a text-protocol hold is exact
		// whatever the load (a binary-protocol Execute's tag can still be
		// ambiguous: several prepared statements' COUNT_EXECUTE moved).
		for _, r := range mon.reads {
			if s.tag == "checkout" || s.tag == "refund" {
				break
			}
			if !r.Start.Before(s.Start) && !r.End.After(s.End) {
				insideHolds++
				if got.Quality != Exact {
					insideButNot++
				}
				break
			}
		}
		right := got.Tag == s.tag
		counts[key{s.InTrx, got.Quality, right}]++
		if got.Quality == Inferred && !right && os.Getenv("TRXJOIN_DUMP_INFERRED") != "" {
			t.Logf("inferred wrong: sample of %q (in trx %v) %v..%v named %q (%s)", s.tag, s.InTrx, s.Start.Format("05.000000"), s.End.Format("05.000000"), got.Tag, got.Reason)
		}
		if got.Quality == Exact && !right {
			t.Errorf("exact but wrong: sample of %q (in trx %v) named %q (%s)", s.tag, s.InTrx, got.Tag, got.Reason)
			if os.Getenv("TRXJOIN_DUMP") != "" {
				for i, r := range mon.reads {
					if r.End.Before(s.Start) && i+1 < len(mon.reads) && !mon.reads[i+1].End.Before(s.Start) || r.Start.After(s.End) && !mon.reads[i-1].Start.After(s.End) {
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
		}
	}
	for _, inTrx := range []bool{true, false} {
		kind := map[bool]string{true: "in transaction", false: "pinned"}[inTrx]
		total := 0
		for k, n := range counts {
			if k.inTrx == inTrx {
				total += n
			}
		}
		t.Logf("%s: %d holds: exact %d (wrong %d), inferred %d (wrong %d), unknown %d", kind, total,
			counts[key{inTrx, Exact, true}]+counts[key{inTrx, Exact, false}], counts[key{inTrx, Exact, false}],
			counts[key{inTrx, Inferred, true}]+counts[key{inTrx, Inferred, false}], counts[key{inTrx, Inferred, false}],
			counts[key{inTrx, Unknown, false}])
		if total == 0 {
			t.Errorf("no %s sample taken", kind)
		}
	}
	t.Logf("%d reads in %.1f s, %d holds still pending", len(mon.reads), secs, pending)
	for _, tag := range tags {
		c := byTag[tag]
		t.Logf("%-8s holds: exact %d, inferred %d, unknown %d", tag, c[Exact], c[Inferred], c[Unknown])
	}
	if insideButNot > 0 {
		t.Errorf("%d text-protocol holds with a read inside their idle span were not exact", insideButNot)
	}
	t.Logf("%d text-protocol holds had a read inside their idle span, all exact", insideHolds)
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
