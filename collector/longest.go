package collector

import (
	"cmp"
	"slices"
	"time"
)

// longestKept is how many of a tag's longest holds each (target, source)
// keeps for the drill-down: a handful to read, bounded memory (the store
// caps the tags, and a tag unseen for the 5 m window loses its entry).
const longestKept = 5

// longestWindow is the window of the longest holds: the longest window of
// the figures, and the age at which an entry's tag is dropped (tagTTL).
const longestWindow = tagTTL

// heldSpan is one completed hold a source saw, for its tag's longest.
type heldSpan struct {
	tag  string
	hold DetailHold // Target and Source are set when served
}

// end is when the hold was returned.
func holdEnd(h *DetailHold) time.Time {
	return h.Start.Add(time.Duration(h.Seconds * float64(time.Second)))
}

// keepLongest keeps h if it is among the entry's longestKept longest holds
// that ended within longestWindow before now. Callers hold the store's mu.
func (e *entry) keepLongest(h DetailHold, now time.Time) {
	cut := now.Add(-longestWindow)
	e.longest = slices.DeleteFunc(e.longest, func(x DetailHold) bool { return holdEnd(&x).Before(cut) })
	if holdEnd(&h).Before(cut) {
		return
	}
	if len(e.longest) < longestKept {
		e.longest = append(e.longest, h)
		return
	}
	i := 0
	for j := range e.longest {
		if e.longest[j].Seconds < e.longest[i].Seconds {
			i = j
		}
	}
	if h.Seconds > e.longest[i].Seconds {
		e.longest[i] = h
	}
}

// addLongest offers completed holds of (target, source) to their tags'
// longest. It runs after the figures of the same batch were added, so a
// tag has its entry (or went to OverflowTag, whose entry takes the hold).
func (s *store) addLongest(target string, source Source, holds []heldSpan) {
	if len(holds) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.series[seriesKey{target, source}]
	if sr == nil {
		return
	}
	now := s.now()
	for i := range holds {
		e := sr.tags[holds[i].tag]
		if e == nil {
			e = sr.tags[OverflowTag]
		}
		if e != nil && holds[i].hold.Seconds > 0 {
			e.keepLongest(holds[i].hold, now)
		}
	}
}

// longestOf lists tag's longest holds that ended within the window, per
// target and source, longest first. Callers hold the store's mu.
func (s *store) longestOf(tag string) []DetailHold {
	cut := s.now().Add(-longestWindow)
	out := []DetailHold{}
	for k, sr := range s.series {
		e := sr.tags[tag]
		if e == nil {
			continue
		}
		for _, h := range e.longest {
			if !holdEnd(&h).Before(cut) {
				h.Target, h.Source = k.target, k.source
				out = append(out, h)
			}
		}
	}
	slices.SortFunc(out, func(a, b DetailHold) int {
		return cmp.Or(cmp.Compare(b.Seconds, a.Seconds), a.Start.Compare(b.Start), cmp.Compare(a.SessionID, b.SessionID))
	})
	return out
}
