package collector

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTagDetailThroughTheHandler: /api/v1/tag gives a tag's gauges per
// target (pins, transactions, lock waits as waiter or blocker, locks,
// deadlocks), not another tag's; without ?tag= it is a 400 that says what
// to give; a collector without the endpoint is ErrNoTagDetail.
func TestTagDetailThroughTheHandler(t *testing.T) {
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	c.st.setGauges("db", SourceMySQL, func(_ *series, g *gauges) {
		g.trx = map[string]trxFigures{"hog": {count: 2, maxAge: 3.5, rowsLocked: 7}, "other": {count: 1}}
		g.waits = map[[2]string]int{{"victim", "hog"}: 3, {"a", "b"}: 1}
		g.locks = &lockFigures{locks: map[[3]string]int{{"hog", "record", "held"}: 7, {"other", "record", "held"}: 1},
			deadlocks: map[[2]string]float64{{"victim", "hog"}: 2}}
	})
	c.st.setGauges("px", SourceProxySQLProcesslist, func(_ *series, g *gauges) {
		g.pinned = map[[2]string]int{{"hog", PinReasonTransaction}: 2, {"other", PinReasonUserVariable}: 1}
	})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	cl, err := NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cl.TagDetail(context.Background(), "hog")
	if err != nil {
		t.Fatal(err)
	}
	if d.Tag != "hog" || len(d.Transactions) != 1 || d.Transactions[0] != (DetailTransactions{Target: "db", Open: 2, OldestSeconds: 3.5, RowsLocked: 7}) {
		t.Errorf("transactions %+v", d.Transactions)
	}
	if len(d.Pins) != 1 || d.Pins[0] != (DetailPin{Target: "px", Reason: PinReasonTransaction, Sessions: 2}) {
		t.Errorf("pins %+v", d.Pins)
	}
	if len(d.LockWaits) != 1 || d.LockWaits[0].BlockerTag != "hog" || d.LockWaits[0].Waits != 3 {
		t.Errorf("lock waits %+v", d.LockWaits)
	}
	if len(d.Locks) != 1 || d.Locks[0].Count != 7 || len(d.Deadlocks) != 1 || d.Deadlocks[0].Count != 2 {
		t.Errorf("locks %+v, deadlocks %+v", d.Locks, d.Deadlocks)
	}
	if d.Sessions == nil || len(d.Unknown) == 0 {
		t.Errorf("sessions %v (want an empty list, not null), unknown %v", d.Sessions, d.Unknown)
	}
	// An API user learns where the frames are; holdtime top drops the
	// note by its prefix.
	if note := strings.Join(d.Unknown, "\n"); !strings.HasPrefix(note, "frames: ") || !strings.Contains(note, "holdtime top --hold-profile") ||
		!strings.Contains(note, "/debug/holdtime/profile") || !strings.Contains(note, "go tool pprof") {
		t.Errorf("unknown %q: want the frames note saying where the frames come from", d.Unknown)
	}

	resp, err := http.Get(srv.URL + "/api/v1/tag")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("without ?tag=: %s", resp.Status)
	}

	old := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(old.Close)
	ocl, _ := NewClient(old.URL, nil)
	if _, err := ocl.TagDetail(context.Background(), "hog"); !errors.Is(err, ErrNoTagDetail) {
		t.Errorf("a collector without /api/v1/tag: %v", err)
	}
	old.Close()
	if _, err := ocl.TagDetail(context.Background(), "hog"); err == nil || !strings.Contains(err.Error(), "cannot reach the collector") {
		t.Errorf("a collector that is down: %v", err)
	}
}
