package collector

import (
	"context"
	"math"
	"testing"
	"time"
)

// replay feeds a processlist recording (and, if given, an events log) to a
// ProxySQL session state machine the way the daemon does, sample by sample,
// events up to each sample's time first, and returns the store.
func replay(t testing.TB, samples, events string, grace time.Duration) *store {
	t.Helper()
	clock := time.Unix(1_800_000_000, 0)
	st := newStore(1000, func() time.Time { return clock })
	ps := newProxySQLSessions("px", st, ProcesslistConfig{}, events != "", false, grace, nil)
	pr, err := OpenProcesslist([]string{samples})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var er *EventsReader
	haveEvent := false
	if events != "" {
		er = OpenEventsLog(context.Background(), []string{events}, EventsLogConfig{})
		defer er.Close()
		haveEvent = er.Next()
	}
	var rows []ProcesslistRow
	var at, first time.Time
	// Only events of the sampled window count: a capture's events log can
	// hold other runs. Events from 1 s before the first sample to 1 s after
	// the last are kept, so a transaction open at either edge is whole.
	flush := func() {
		if first.IsZero() {
			first = at
		}
		for haveEvent && er.Event().EndUS <= at.UnixMicro() {
			if er.Event().StartUS >= first.Add(-time.Second).UnixMicro() {
				ps.addEvent(er.Event())
			}
			haveEvent = er.Next()
		}
		ps.sample(at, rows)
		rows = rows[:0]
	}
	for pr.Next() {
		r := *pr.Row()
		if !r.SampleTime.Equal(at) && !at.IsZero() {
			flush()
		}
		at = r.SampleTime
		rows = append(rows, r)
	}
	flush()
	for haveEvent && er.Event().StartUS <= at.Add(time.Second).UnixMicro() {
		ps.addEvent(er.Event())
		haveEvent = er.Next()
	}
	ps.finish()
	if err := pr.Err(); err != nil {
		t.Fatal(err)
	}
	return st
}

func holdOf(st *store, target string, src Source, tag string) float64 {
	sr := st.series[seriesKey{target, src}]
	if sr == nil || sr.tags[tag] == nil {
		return 0
	}
	return sr.tags[tag].total.Hold
}

func TestReplayWorkloadAccuracy(t *testing.T) {
	want := loadExpected(t)
	with := replay(t, "testdata/workload_processlist_samples.tsv", "testdata/workload_events_slice.json.gz", 5*time.Second)
	alone := replay(t, "testdata/workload_processlist_samples.tsv", "", 5*time.Second)
	var total float64
	for name, w := range want {
		tag := expectedTagName(name)
		ev := holdOf(with, "px", SourceProxySQLEvents, tag)
		pl := holdOf(with, "px", SourceProxySQLProcesslist, tag)
		pa := holdOf(alone, "px", SourceProxySQLProcesslist, tag)
		total += w.HoldingSeconds
		t.Logf("%-20s want %7.3f  events %7.3f (%+5.1f%%)  samples+events %7.3f (%+5.1f%%)  samples alone %7.3f (%+5.1f%%)",
			tag, w.HoldingSeconds, ev, pct(ev, w.HoldingSeconds), pl, pct(pl, w.HoldingSeconds), pa, pct(pa, w.HoldingSeconds))
		// The headline figure with the events log is the events log's.
		if math.Abs(pct(ev, w.HoldingSeconds)) > 15 {
			t.Errorf("%s: events log hold %.3f s is %+.1f%% off the client's %.3f s (bound 15%%)", tag, ev, pct(ev, w.HoldingSeconds), w.HoldingSeconds)
		}
		// Sampling is a cross-check: 100 ms samples of ~6 ms transactions
		// read up to ~20% high (inventory_reserve: +18%).
		if math.Abs(pct(pl, w.HoldingSeconds)) > 25 {
			t.Errorf("%s: sampled hold with the events log %.3f s is %+.1f%% off (bound 25%%)", tag, pl, pct(pl, w.HoldingSeconds))
		}
	}
	unknownWith := holdOf(with, "px", SourceProxySQLProcesslist, UnknownTag)
	unknownAlone := holdOf(alone, "px", SourceProxySQLProcesslist, UnknownTag)
	t.Logf("unknown: samples+events %.3f s, samples alone %.3f s (%.0f%% of the %.3f s the client held)",
		unknownWith, unknownAlone, 100*unknownAlone/total, total)
	// Without the events log the hog's idle-in-transaction time cannot be
	// tagged: it must show as unknown (about 30 s), not vanish.
	if unknownAlone < 25 || holdOf(alone, "px", SourceProxySQLProcesslist, "checkout_tax_quote") != 0 {
		t.Errorf("samples alone: unknown %.3f s; want the hog's ~30 s there", unknownAlone)
	}
	if unknownWith > 0.05*total {
		t.Errorf("with the events log %.3f s stays unknown", unknownWith)
	}
	with.now = func() time.Time { return time.Unix(1_800_000_005, 0) }
	with.setHeadline("px", SourceProxySQLEvents)
	top, _ := with.top(time.Minute)
	top = rank(top, TopQuery{})
	if len(top) == 0 || top[0].Tag != "checkout_tax_quote" || top[0].Source != SourceProxySQLEvents {
		t.Errorf("top: %+v; want checkout_tax_quote first, from the events log", top)
	}
}

func pct(got, want float64) float64 { return 100 * (got - want) / want }
