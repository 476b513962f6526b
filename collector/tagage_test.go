package collector

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdtime/holdtime/collector/internal/otlp"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// agingCollector is an OTLP collector with maxTags slots per source whose
// store reads a clock that stands still until the test moves it (the
// receiver checks spans against the real time; only the store's aging and
// windows see the test's clock), so that a boundary is exact. It returns
// the handler and the function that moves the clock forward.
func agingCollector(t *testing.T, maxTags int) (http.Handler, func(time.Duration)) {
	t.Helper()
	c, err := New(Config{MaxTags: maxTags, OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	var offset atomic.Int64
	c.st.now = func() time.Time { return base.Add(time.Duration(offset.Load())) }
	return c.Handler(), func(d time.Duration) { offset.Add(int64(d)) }
}

// sendHolds posts one valid 1 s hold span per tag and fails unless every
// span was accepted.
func sendHolds(t *testing.T, h http.Handler, tags ...string) {
	t.Helper()
	var spans []*tracepb.Span
	for _, tag := range tags {
		start, end, attrs := validHold(tag)
		spans = append(spans, span(otlp.SpanHold, start, end, attrs...))
	}
	if code, resp := post(t, h, exportRequest(spans...), "protobuf"); code != http.StatusOK || resp.GetPartialSuccess() != nil {
		t.Fatalf("export of %d holds: %d %v", len(tags), code, resp.GetPartialSuccess())
	}
}

// scrape reads /metrics into name{labels} -> value, labels as the text
// format writes them (sorted by name).
func scrape(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(getMetrics(t, h)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func otlpHold(tag string) string {
	return `holdtime_collector_hold_seconds_total{conn_tag="` + tag + `",source="otlp",target="app"}`
}

const otlpOverflow = `holdtime_collector_tags_overflow_total{source="otlp",target="app"}`

// tagsWithPrefix lists the conn_tag values of the OTLP hold counters that
// start with prefix.
func tagsWithPrefix(m map[string]float64, prefix string) []string {
	var out []string
	for k := range m {
		if rest, ok := strings.CutPrefix(k, `holdtime_collector_hold_seconds_total{conn_tag="`+prefix); ok && strings.HasSuffix(k, `",source="otlp",target="app"}`) {
			out = append(out, prefix+rest[:strings.IndexByte(rest, '"')])
		}
	}
	slices.Sort(out)
	return out
}

// checkMonotone fails unless every counter (a _total series) present in
// both scrapes is at least what it was.
func checkMonotone(t *testing.T, when string, prev, cur map[string]float64) {
	t.Helper()
	for k, v := range cur {
		if p, ok := prev[k]; ok && strings.Contains(k, "_total{") && v < p {
			t.Errorf("%s: %s went from %v to %v", when, k, p, v)
		}
	}
}

// TestTagSlotsAgeOut: junk fills the tag cap, and a real tag sent then goes
// to overflow; once the junk has been unseen for longer than the longest
// window, its series are gone from /metrics and a new real tag gets its own
// series in /metrics and /api/v1/top, not overflow. The cap still binds:
// only what does not fit now overflows.
func TestTagSlotsAgeOut(t *testing.T) {
	const maxTags = 50
	h, advance := agingCollector(t, maxTags)
	var junk []string
	for i := range maxTags {
		junk = append(junk, fmt.Sprintf("junk_%03d", i))
	}
	sendHolds(t, h, junk...)
	sendHolds(t, h, "real_before")
	m := scrape(t, h)
	if got := tagsWithPrefix(m, "junk_"); len(got) != maxTags {
		t.Fatalf("%d junk series, want the cap %d", len(got), maxTags)
	}
	if _, ok := m[otlpHold("real_before")]; ok || m[otlpOverflow] != 1 || m[otlpHold(OverflowTag)] != 1 {
		t.Fatalf("with the cap full, real_before must go to overflow: own series %v, overflow_total %v, overflow hold %v",
			ok, m[otlpOverflow], m[otlpHold(OverflowTag)])
	}

	// Unseen for exactly the longest window: still there.
	advance(tagTTL)
	if got := tagsWithPrefix(scrape(t, h), "junk_"); len(got) != maxTags {
		t.Fatalf("after %v unseen: %d junk series, want %d (a tag keeps its slot for the whole window)", tagTTL, len(got), maxTags)
	}
	advance(time.Second)
	after := scrape(t, h)
	if got := tagsWithPrefix(after, "junk_"); len(got) != 0 {
		t.Fatalf("after %v unseen, junk series still in /metrics: %v", tagTTL+time.Second, got)
	}
	// The collector's own tag and the source's counters stay, unchanged.
	if after[otlpOverflow] != 1 || after[otlpHold(OverflowTag)] != 1 {
		t.Errorf("overflow_total %v, overflow hold %v; want both still 1", after[otlpOverflow], after[otlpHold(OverflowTag)])
	}
	checkMonotone(t, "after aging", m, after)

	sendHolds(t, h, "real_after")
	m = scrape(t, h)
	if m[otlpHold("real_after")] != 1 {
		t.Errorf("real_after's hold series = %v, want its own series at 1 s", m[otlpHold("real_after")])
	}
	if m[otlpOverflow] != 1 || m[otlpHold(OverflowTag)] != 1 {
		t.Errorf("real_after went to overflow: overflow_total %v, overflow hold %v", m[otlpOverflow], m[otlpHold(OverflowTag)])
	}
	checkMonotone(t, "after real_after", after, m)
	for _, w := range []string{"10s", "1m", "5m"} {
		doc := getTop(t, h, "window="+w)
		if len(doc.Rows) != 1 || doc.Rows[0].Tag != "real_after" || doc.Rows[0].HoldSeconds != 1 {
			t.Errorf("/api/v1/top window %s: %+v; want only real_after, 1 s held", w, doc.Rows)
		}
	}

	// The slots are free again, and only what does not fit now overflows:
	// overflow and real_after hold two of them.
	var fresh []string
	for i := range maxTags - 2 + 3 {
		fresh = append(fresh, fmt.Sprintf("fresh_%03d", i))
	}
	sendHolds(t, h, fresh...)
	m = scrape(t, h)
	if got := tagsWithPrefix(m, "fresh_"); len(got) != maxTags-2 {
		t.Errorf("%d of %d fresh tags got a series, want %d", len(got), len(fresh), maxTags-2)
	}
	if m[otlpOverflow] != 1+3 {
		t.Errorf("overflow_total %v, want 4: the 3 fresh tags beyond the cap", m[otlpOverflow])
	}
}

// TestTagSeenWithinWindowKeepsSlot: a tag seen again within the longest
// window keeps its slot and its counter only grows, scrape after scrape,
// while junk seen once ages out around it; no slot is freed early.
func TestTagSeenWithinWindowKeepsSlot(t *testing.T) {
	// The cap counts the overflow entry too, once a tag has overflowed.
	h, advance := agingCollector(t, 4)
	sendHolds(t, h, "steady", "junk_1", "junk_2", "junk_3")
	prev := scrape(t, h)
	step := tagTTL - time.Minute // 4 m: within the window
	for i := 2; i <= 5; i++ {
		advance(step)
		mid := scrape(t, h)
		if mid[otlpHold("steady")] != float64(i-1) {
			t.Fatalf("step %d, before the hold: steady = %v, want %d", i, mid[otlpHold("steady")], i-1)
		}
		checkMonotone(t, fmt.Sprintf("step %d before", i), prev, mid)
		sendHolds(t, h, "steady", fmt.Sprintf("late_%d", i))
		cur := scrape(t, h)
		if cur[otlpHold("steady")] != float64(i) {
			t.Fatalf("step %d: steady = %v, want %d: it lost its slot or its count", i, cur[otlpHold("steady")], i)
		}
		checkMonotone(t, fmt.Sprintf("step %d", i), mid, cur)
		late := tagsWithPrefix(cur, "late_")
		if i == 2 {
			// The junk, seen 4 m ago, still holds its slots: late_2 overflows.
			if len(late) != 0 || len(tagsWithPrefix(cur, "junk_")) != 3 || cur[otlpOverflow] != 1 {
				t.Errorf("step 2: late %v, junk %v, overflow_total %v; want no late tag, the 3 junk tags, 1 overflow",
					late, tagsWithPrefix(cur, "junk_"), cur[otlpOverflow])
			}
		} else {
			// The junk is gone (8 m unseen); each late tag lasts until the
			// step after next, so the latest two have series.
			want := []string{fmt.Sprintf("late_%d", i)}
			if i > 3 {
				want = []string{fmt.Sprintf("late_%d", i-1), fmt.Sprintf("late_%d", i)}
			}
			if len(tagsWithPrefix(cur, "junk_")) != 0 || !slices.Equal(late, want) || cur[otlpOverflow] != 1 {
				t.Errorf("step %d: junk %v, late %v, overflow_total %v; want no junk, late %v, no new overflow",
					i, tagsWithPrefix(cur, "junk_"), late, cur[otlpOverflow], want)
			}
		}
		prev = cur
	}
	doc := getTop(t, h, "window=5m")
	var steady *TopRow
	for i := range doc.Rows {
		if doc.Rows[i].Tag == "steady" {
			steady = &doc.Rows[i]
		}
	}
	if steady == nil || steady.HoldSeconds != 2 {
		t.Errorf("/api/v1/top window 5m: steady %+v; want the last two holds (4 m apart), 2 s", steady)
	}
}

// TestExpireMatchesModel drives one series with random adds, gauge caps
// and clock steps and checks, after each, that the store keeps exactly the
// tags a plain model keeps: the cap, the collector's own tags never aged,
// every other tag dropped once unseen for longer than tagTTL; and that the
// aging list links exactly the aging tags, oldest first.
func TestExpireMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			now := time.Unix(1_800_000_000, 0)
			st := newStore(1+rng.IntN(20), func() time.Time { return now })
			model := map[string]int64{} // tag -> last seen (own tags: 0)
			var overflow float64
			for op := range 2000 {
				if rng.IntN(4) == 0 {
					now = now.Add(time.Duration(rng.IntN(120)) * time.Second)
				}
				tag := fmt.Sprintf("t%d", rng.IntN(40))
				if rng.IntN(30) == 0 {
					tag = []string{UnknownTag, UntaggedTag, OverflowTag}[rng.IntN(3)]
				}
				sec := now.Unix()
				for k, seen := range model {
					if !ownTag(k) && sec-seen > int64(tagTTL/time.Second) {
						delete(model, k)
					}
				}
				gauge := rng.IntN(3) == 0
				st.mu.Lock()
				sr := st.get("t", SourceOTLP)
				if gauge {
					st.capTag(sr, tag)
				} else {
					st.entryFor(sr, tag, 1)
				}
				st.mu.Unlock()
				switch _, known := model[tag]; {
				case known:
					model[tag] = sec
				case gauge && (tag == UnknownTag || tag == UntaggedTag):
					// capTag names them without a slot.
				case !gauge && ownTag(tag):
					model[tag] = sec // never capped
				case len(model) < st.maxTags:
					model[tag] = sec
				default:
					overflow++
					if !gauge {
						model[OverflowTag] = sec
					}
				}
				checkAgingList(t, op, st, sr, model)
				if sr.overflow != overflow {
					t.Fatalf("op %d: overflow %v, model %v", op, sr.overflow, overflow)
				}
			}
		})
	}
}

func checkAgingList(t *testing.T, op int, st *store, sr *series, model map[string]int64) {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	var keys, want []string
	for k := range sr.tags {
		keys = append(keys, k)
	}
	for k := range model {
		want = append(want, k)
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("op %d: store keeps %v, model %v", op, keys, want)
	}
	n := 0
	var prev *entry
	for e := sr.oldest; e != nil; prev, e = e, e.newer {
		n++
		if e.older != prev || sr.tags[e.tag] != e || ownTag(e.tag) {
			t.Fatalf("op %d: aging list broken at %q", op, e.tag)
		}
		if prev != nil && e.seen < prev.seen {
			t.Fatalf("op %d: %q (seen %d) after %q (seen %d)", op, e.tag, e.seen, prev.tag, prev.seen)
		}
		if e.seen != model[e.tag] {
			t.Fatalf("op %d: %q seen %d, model %d", op, e.tag, e.seen, model[e.tag])
		}
	}
	if sr.newest != prev {
		t.Fatalf("op %d: newest is not the list's last", op)
	}
	own := 0
	for k := range sr.tags {
		if ownTag(k) {
			own++
		}
	}
	if n+own != len(sr.tags) {
		t.Fatalf("op %d: %d tags in the aging list, %d own, %d in all", op, n, own, len(sr.tags))
	}
}

// TestTagTTLIsTheLongestWindow: aging waits out exactly the longest window
// Top offers, so dropping a tag never changes a ranking.
func TestTagTTLIsTheLongestWindow(t *testing.T) {
	var longest time.Duration
	for _, d := range topWindows {
		longest = max(longest, d)
	}
	if tagTTL != longest {
		t.Fatalf("tagTTL %v, longest window %v", tagTTL, longest)
	}
	var e entry
	at := time.Unix(1_800_000_003, 0)
	e.addAt(at.Unix(), &figures{Hold: 1})
	for _, d := range topWindows {
		if sum, _ := e.window(at.Add(tagTTL+time.Second), d); sum != (figures{}) {
			t.Errorf("window %v, %v after the last add: %+v; a tag aged out would take figures with it", d, tagTTL+time.Second, sum)
		}
	}
}
