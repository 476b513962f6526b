package collector

import (
	"math"
	"testing"
	"time"
)

// TestStoreKeepsCountersMonotonic: whatever a source hands the store, no
// counter goes backwards or becomes NaN, and a delta with nothing in it
// makes no series.
func TestStoreKeepsCountersMonotonic(t *testing.T) {
	st := newStore(10, time.Now)
	st.addOne("t", SourceOTLP, "a", &figures{Hold: 2, Active: 1, Idle: 1, Stmts: 3})
	for _, f := range []figures{
		{Hold: math.NaN()}, {Hold: -1}, {Active: math.Inf(1)}, {Idle: -0.5}, {Stmts: math.Inf(-1)}, {Errors: -1},
	} {
		st.addOne("t", SourceOTLP, "a", &f)
		st.add("t", SourceOTLP, map[string]*tagDelta{"a": {Figures: f}})
	}
	st.add("t", SourceOTLP, map[string]*tagDelta{"a": {PinnedSecs: map[string]float64{"x": math.NaN()}}})
	st.add("t", SourceOTLP, map[string]*tagDelta{"empty": {}})
	sr := st.series[seriesKey{"t", SourceOTLP}]
	if got := sr.tags["a"].total; got != (figures{Hold: 2, Active: 1, Idle: 1, Stmts: 3}) {
		t.Errorf("a: %+v; the bad deltas moved it", got)
	}
	if sr.malformed != 13 {
		t.Errorf("malformed %v, want 13", sr.malformed)
	}
	if _, ok := sr.tags["empty"]; ok {
		t.Error("an empty delta made a series")
	}
}
