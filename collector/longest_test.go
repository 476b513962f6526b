package collector

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestLongestHoldsBoundedAndAged: a tag keeps its longestKept longest
// holds, a longer one replaces the shortest, a hold that ended more than
// the window ago is dropped, and another tag's holds are not its.
func TestLongestHoldsBoundedAndAged(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	st := newStore(10, func() time.Time { return now })
	st.addOne("px", SourceProxySQLEvents, "hog", &figures{Hold: 1})
	st.addOne("px", SourceProxySQLEvents, "other", &figures{Hold: 1})
	var holds []heldSpan
	for i := range 8 {
		holds = append(holds, heldSpan{tag: "hog", hold: DetailHold{SessionID: int64(i), Start: now.Add(-time.Minute), Seconds: float64(i + 1)}})
	}
	holds = append(holds, heldSpan{tag: "other", hold: DetailHold{SessionID: 99, Start: now.Add(-time.Minute), Seconds: 100}},
		heldSpan{tag: "hog", hold: DetailHold{SessionID: 50, Start: now.Add(-longestWindow - time.Minute), Seconds: 50}})
	st.addLongest("px", SourceProxySQLEvents, holds)
	st.mu.Lock()
	got := st.longestOf("hog")
	st.mu.Unlock()
	if len(got) != longestKept {
		t.Fatalf("kept %d holds, want %d: %+v", len(got), longestKept, got)
	}
	for i, h := range got {
		if want := float64(8 - i); h.Seconds != want || h.Target != "px" || h.Source != SourceProxySQLEvents {
			t.Errorf("hold %d: %+v, want %.0f s on px's events log", i, h, want)
		}
	}
	now = now.Add(longestWindow)
	st.mu.Lock()
	got = st.longestOf("hog")
	st.mu.Unlock()
	if len(got) != 0 {
		t.Errorf("holds that ended more than the window ago: %+v", got)
	}
}

// TestStatementsBoundedAndAged: a tag keeps statementsKept digests, a new
// digest with more time takes the place of the one with the least, one
// with less is dropped; a digest's time leaves the window after 5 m.
func TestStatementsBoundedAndAged(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	st := newStore(10, func() time.Time { return now })
	st.addOne("px", SourceProxySQLDigest, "hog", &figures{Active: 1})
	var deltas []digestDelta
	for i := range statementsKept {
		deltas = append(deltas, digestDelta{tag: "hog", digest: fmt.Sprint("d", i), text: "SELECT ?", count: 1, seconds: float64(i + 1)})
	}
	deltas = append(deltas, digestDelta{tag: "hog", digest: "d0", count: 1, seconds: 1}, // d0: 2 s
		digestDelta{tag: "hog", digest: "small", count: 1, seconds: 0.5},
		digestDelta{tag: "hog", digest: "big", count: 3, seconds: 100},
		digestDelta{tag: "nobody", digest: "x", count: 1, seconds: 1000})
	st.addStatements("px", SourceProxySQLDigest, deltas)
	st.mu.Lock()
	got := st.statementsOf("hog")
	st.mu.Unlock()
	if len(got) != statementsKept || got[0].Digest != "big" || got[0].Count != 3 || got[0].Target != "px" {
		t.Fatalf("statements %+v, want %d with big first", got, statementsKept)
	}
	for _, s := range got {
		if s.Digest == "small" {
			t.Errorf("statement %+v", s)
		}
	}
	// d0 and d1 tie at 2 s, the least: big took the first of them.
	has := func(d string) bool {
		return slices.ContainsFunc(got, func(s DetailStatement) bool { return s.Digest == d })
	}
	if has("d0") || !has("d1") {
		t.Errorf("d0 kept or d1 dropped: %+v", got)
	}
	now = now.Add(tagTTL)
	st.mu.Lock()
	got = st.statementsOf("hog")
	st.mu.Unlock()
	if len(got) != 0 {
		t.Errorf("statements older than the window: %+v", got)
	}
}

// TestHeldDigestKeepsItsStatements: the digests of a tag seen only in
// digest text wait with its figures, and come with them once another
// source shows the tag.
func TestHeldDigestKeepsItsStatements(t *testing.T) {
	d := newDigestState()
	row := func(n int64) digestRow {
		return digestRow{key: digestKey{digest: "0x1"}, text: "/* conn_tag:late */ SELECT ?", count: n, firstSeen: 100, sumUS: n * 1000}
	}
	now := time.Unix(1_800_000_000, 0)
	batch := map[string]*tagDelta{}
	d.apply([]digestRow{row(1)}, true, batch)
	d.apply([]digestRow{row(3)}, true, batch)
	d.checkTags(now, batch, func(string) bool { return false })
	if len(batch) != 0 || len(d.deltas) != 0 {
		t.Fatalf("a tag no other source showed: batch %v, deltas %+v", batch, d.deltas)
	}
	clear(batch)
	d.apply([]digestRow{row(4)}, true, batch)
	d.checkTags(now, batch, func(string) bool { return true })
	var n float64
	for _, dd := range d.deltas {
		if dd.tag != "late" || dd.digest != "0x1" {
			t.Errorf("delta %+v", dd)
		}
		n += dd.count
	}
	if n != 3 {
		t.Errorf("once shown: deltas %+v, want late's 0x1 with 3 statements (2 held, 1 now)", d.deltas)
	}
}
