package collector

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkStoreAddAging measures one addOne with tag aging: "known" adds
// to one of 1000 tags already kept (the common path: a map lookup and the
// move to the newest end); "new" adds a new tag each time with nothing to
// expire (the baseline of churn); "churn" adds a new tag every time while
// the clock moves a second per add, so that each add also drops the tag
// that aged out (the list never holds more than 301); "flood" adds new
// tags to a full series whose tags are all fresh (every one overflows).
// Expiry costs the same whatever the number of tags: no scan.
func BenchmarkStoreAddAging(b *testing.B) {
	tags := make([]string, 100_000)
	for i := range tags {
		tags[i] = "tag_" + strconv.Itoa(i)
	}
	f := &figures{Hold: 1, Active: 0.5, Idle: 0.5, Stmts: 1}
	b.Run("known", func(b *testing.B) {
		now := time.Unix(1_800_000_000, 0)
		st := newStore(1000, func() time.Time { return now })
		for _, tag := range tags[:1000] {
			st.addOne("t", SourceOTLP, tag, f)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			st.addOne("t", SourceOTLP, tags[i%1000], f)
			i++
		}
	})
	b.Run("new", func(b *testing.B) {
		// A new tag every add, the clock still and the store renewed every
		// 1000 adds: the cost of a new entry without any expiry, the
		// baseline of churn.
		now := time.Unix(1_800_000_000, 0)
		st := newStore(1000, func() time.Time { return now })
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%1000 == 0 {
				b.StopTimer()
				st = newStore(1000, func() time.Time { return now })
				b.StartTimer()
			}
			st.addOne("t", SourceOTLP, tags[i%len(tags)], f)
			i++
		}
	})
	b.Run("churn", func(b *testing.B) {
		now := time.Unix(1_800_000_000, 0)
		st := newStore(1000, func() time.Time { return now })
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			now = now.Add(time.Second)
			st.addOne("t", SourceOTLP, tags[i%len(tags)], f)
			i++
		}
		if n := len(st.series[seriesKey{"t", SourceOTLP}].tags); n > int(tagTTL/time.Second)+1 {
			b.Fatalf("%d tags kept, want at most %d", n, tagTTL/time.Second+1)
		}
	})
	b.Run("flood", func(b *testing.B) {
		now := time.Unix(1_800_000_000, 0)
		st := newStore(1000, func() time.Time { return now })
		for _, tag := range tags[:1000] {
			st.addOne("t", SourceOTLP, tag, f)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			st.addOne("t", SourceOTLP, tags[1000+i%(len(tags)-1000)], f)
			i++
		}
	})
}
