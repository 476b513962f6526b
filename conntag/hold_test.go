package conntag

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestHoldSplitIdleTransaction(t *testing.T) {
	f := newFixture(t, WithHistograms())
	ctx := WithTag(context.Background(), "slow_caller")
	const idle = 200 * time.Millisecond
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(idle) // the behaviour under test: a caller idling while it holds a connection
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	m := f.metrics(t)
	hold := m["db.client.connection.use_time"]["slow_caller"]
	active := m["holdtime.connection.active_time"]["slow_caller"].sum
	idleS := m["holdtime.connection.idle_time"]["slow_caller"].sum
	total := m["holdtime.connection.hold_time"]["slow_caller"].sum
	if ops := m["db.client.operation.duration"]["slow_caller"].count; ops != 3 {
		t.Errorf("operation histogram count = %d, want 3", ops)
	}
	t.Logf("hold %.3fs (count %d), counter %.3fs, active %.4fs, idle %.3fs", hold.sum, hold.count, total, active, idleS)
	if hold.count != 1 || hold.sum < idle.Seconds() {
		t.Errorf("hold = %.3fs in %d holds, want one hold >= %v", hold.sum, hold.count, idle)
	}
	if d := total - hold.sum; d < -1e-9 || d > 1e-6 {
		t.Errorf("hold_time counter %.6f != use_time sum %.6f", total, hold.sum)
	}
	if active > 0.05 {
		t.Errorf("active = %.3fs, want small (three fast statements)", active)
	}
	if idleS < idle.Seconds()-0.001 || idleS > hold.sum {
		t.Errorf("idle = %.3fs, want about the %v the caller idled", idleS, idle)
	}
}

// TestHoldInProgressCounts shows that occupancy counts a hold while it is
// still open, so a long hold is visible before it ends.
func TestHoldInProgressCounts(t *testing.T) {
	f := newFixture(t)
	ctx := WithTag(context.Background(), "long_runner")
	c, err := f.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	first := f.metrics(t)["holdtime.connection.hold_time"]["long_runner"].sum
	time.Sleep(50 * time.Millisecond) // let the open hold age
	m := f.metrics(t)
	second := m["holdtime.connection.hold_time"]["long_runner"].sum
	if second-first < 0.05 {
		t.Errorf("open hold grew by %.3fs over 50ms", second-first)
	}
	if used := m["db.client.connection.count"]["long_runner/used"].sum; used != 1 {
		t.Errorf("used connections for long_runner = %v, want 1", used)
	}
	if m["holdtime.connection.holds"]["long_runner"].sum != 0 {
		t.Error("an open hold was recorded as finished")
	}
}

func TestConcurrentTagsAttributed(t *testing.T) {
	f := newFixture(t)
	f.db.SetMaxOpenConns(8)
	const workers, rounds = 6, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag := fmt.Sprintf("worker_%d", w)
			ctx := WithTag(context.Background(), tag)
			for range rounds {
				tx, err := f.db.BeginTx(ctx, nil)
				if err != nil {
					errs <- err
					return
				}
				// Each worker sleeps server-side for a time unique to it.
				if _, err := tx.ExecContext(ctx, "SELECT SLEEP(?)", 0.001*float64(w+1)); err != nil {
					errs <- err
					return
				}
				if err := tx.Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := f.metrics(t)
	for w := range workers {
		tag := fmt.Sprintf("worker_%d", w)
		holds := m["holdtime.connection.holds"][tag].sum
		hold := m["holdtime.connection.hold_time"][tag].sum
		ops := m["holdtime.client.operations"][tag].sum
		if holds != rounds {
			t.Errorf("%s: %v holds, want %d", tag, holds, rounds)
		}
		if ops != 3*rounds {
			t.Errorf("%s: %v operations, want %d", tag, ops, 3*rounds)
		}
		minHold := float64(rounds) * 0.001 * float64(w+1)
		if hold < minHold {
			t.Errorf("%s: hold %.3fs < the %.3fs it slept", tag, hold, minHold)
		}
	}
	if n := len(m["holdtime.connection.holds"]); n != workers {
		t.Errorf("holds under %d tags, want %d: %v", n, workers, m["holdtime.connection.holds"])
	}
}

// TestBadConnRetried kills the pool's only connection server-side. When
// database/sql borrows it again, the driver's ResetSession finds it dead
// (go-sql-driver's liveness check) and answers driver.ErrBadConn, which the
// wrapper must return untouched so that database/sql retries on a new
// connection; the dead connection's hold must not stay open.
func TestBadConnRetried(t *testing.T) {
	f := newFixture(t)
	f.db.SetMaxOpenConns(1)
	ctx := WithTag(context.Background(), "victim")
	var id int64
	if err := f.db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := f.target.Admin().Exec(fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatal(err)
	}
	var id2 int64
	if err := f.db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id2); err != nil {
		t.Fatalf("statement after KILL was not retried cleanly: %v", err)
	}
	if id2 == id {
		t.Fatalf("still on the killed connection %d", id)
	}
	m := f.metrics(t)
	if got := m["db.client.connection.count"]["victim/used"].sum; got != 0 {
		t.Errorf("a hold is still open after the statements: used=%v", got)
	}
	if got := m["holdtime.connection.holds"]["victim"].sum; got < 2 {
		t.Errorf("holds for victim = %v, want the killed one and the retry", got)
	}
}

func TestKilledMidTransaction(t *testing.T) {
	f := newFixture(t)
	ctx := WithTag(context.Background(), "killed_tx")
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := f.target.Admin().Exec(fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatal(err)
	}
	_, err = tx.ExecContext(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("statement on a killed transaction succeeded")
	}
	_ = tx.Rollback()
	// The pool recovers and the books balance.
	if _, err := f.db.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	m := f.metrics(t)
	if got := m["db.client.connection.count"]["killed_tx/used"].sum; got != 0 {
		t.Errorf("a hold is still open: used=%v", got)
	}
	if m["holdtime.connection.holds"]["killed_tx"].sum < 2 {
		t.Errorf("holds: %v", m["holdtime.connection.holds"])
	}
}

func TestInnerErrorsUntouched(t *testing.T) {
	f := newFixture(t)
	ctx := WithTag(context.Background(), "bad_sql")
	_, err := f.db.ExecContext(ctx, "SELEC 1")
	if err == nil || !strings.Contains(err.Error(), "Error 1064") {
		t.Fatalf("syntax error not passed through: %v", err)
	}
	var me interface{ Error() string }
	if !errors.As(err, &me) {
		t.Fatal("error lost its type")
	}
	if got := f.metrics(t)["holdtime.client.operations"]; got["bad_sql"].sum != 1 {
		t.Errorf("failed statement not recorded: %v", got)
	}
}

func TestLongHoldReported(t *testing.T) {
	reports := make(chan LongHold, 4)
	f := newFixture(t, WithLongHoldThreshold(20*time.Millisecond, func(h LongHold) { reports <- h }))
	ctx := WithTag(context.Background(), "leaky")
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var h LongHold
	select {
	case h = <-reports:
	case <-time.After(10 * time.Second):
		t.Fatal("no long-hold report")
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if h.Tag != "leaky" || h.Held < 20*time.Millisecond {
		t.Errorf("report = %+v", h)
	}
	if !strings.Contains(h.Acquirer, "TestLongHoldReported") {
		t.Errorf("acquirer stack does not name the test:\n%s", h.Acquirer)
	}
	// A short hold is not reported: hold one briefly, then a long one as a
	// barrier. The short hold started first with the same threshold, so a
	// report of it would arrive before the barrier's.
	if _, err := f.db.ExecContext(WithTag(context.Background(), "short"), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	barrier, err := f.db.BeginTx(WithTag(context.Background(), "barrier"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer barrier.Rollback()
	select {
	case h := <-reports:
		if h.Tag != "barrier" {
			t.Errorf("reported %+v, want only the barrier's long hold", h)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report of the barrier's long hold")
	}
	if got := f.metrics(t)["holdtime.connection.long_holds"]["leaky"].sum; got != 1 {
		t.Errorf("long holds counted for leaky = %v, want 1", got)
	}
}

func TestTagCap(t *testing.T) {
	f := newFixture(t, WithMaxTags(3))
	for i := range 10 {
		ctx := WithTag(context.Background(), fmt.Sprintf("bogus_%d", i))
		if _, err := f.db.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	ops := f.metrics(t)["holdtime.client.operations"]
	// The default tag takes the first place under the cap, two bogus tags
	// the others, the rest goes to "other".
	if len(ops) != 3 || ops["bogus_0"].sum != 1 || ops["bogus_1"].sum != 1 {
		t.Errorf("tags in metrics: %v", ops)
	}
	if ops[OverflowTag].sum != 8 {
		t.Errorf("overflow count = %v, want 8: %v", ops[OverflowTag].sum, ops)
	}
}

func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := trace.NewTracerProvider(trace.WithSpanProcessor(rec))
	f := newFixture(t, WithTracerProvider(tp), WithSessionID())
	ctx := WithTag(context.Background(), "traced")
	c, err := f.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var serverID string
	if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&serverID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	var stmt, hold bool
	for _, s := range rec.Ended() {
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["conn_tag"] != "traced" || attrs["db.system.name"] != "mysql" {
			continue
		}
		switch s.Name() {
		case "SELECT":
			stmt = attrs["db.operation.name"] == "SELECT"
		case "db.connection.hold":
			hold = attrs["holdtime.hold.statements"] == "2" && attrs["holdtime.hold.idle_seconds"] != "" &&
				attrs["holdtime.session_id"] == serverID
		}
	}
	if !stmt || !hold {
		t.Errorf("spans: statement=%v hold=%v; got %d spans", stmt, hold, len(rec.Ended()))
	}
}

func TestWithoutMetricsStillTags(t *testing.T) {
	f := newFixture(t, WithoutMetrics())
	f.logStatements(t)
	if _, err := f.db.ExecContext(WithTag(context.Background(), "plain"), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(f.statementsSeen(t), "\n"), "SELECT 1 /* conn_tag:plain */") {
		t.Error("statement not tagged with metrics off")
	}
	if m := f.metrics(t); len(m) != 0 {
		t.Errorf("metrics recorded with metrics off: %v", m)
	}
}
