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
	st.addOne("t", SourceOTLP, "a", &figures{hold: 2, active: 1, idle: 1, stmts: 3})
	for _, f := range []figures{
		{hold: math.NaN()}, {hold: -1}, {active: math.Inf(1)}, {idle: -0.5}, {stmts: math.Inf(-1)}, {errors: -1},
	} {
		st.addOne("t", SourceOTLP, "a", &f)
		st.add("t", SourceOTLP, map[string]*tagDelta{"a": {figures: f}})
	}
	st.add("t", SourceOTLP, map[string]*tagDelta{"a": {pinnedSecs: map[string]float64{"x": math.NaN()}}})
	st.add("t", SourceOTLP, map[string]*tagDelta{"empty": {}})
	sr := st.series[seriesKey{"t", SourceOTLP}]
	if got := sr.tags["a"].total; got != (figures{hold: 2, active: 1, idle: 1, stmts: 3}) {
		t.Errorf("a: %+v; the bad deltas moved it", got)
	}
	if sr.malformed != 13 {
		t.Errorf("malformed %v, want 13", sr.malformed)
	}
	if _, ok := sr.tags["empty"]; ok {
		t.Error("an empty delta made a series")
	}
}
