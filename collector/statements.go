package collector

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
)

// A tag's statements by time keep statementsKept digests per (target,
// source), each in stmtBuckets buckets of stmtSpan seconds covering the 5 m
// window: about 2 KiB per tag, within the store's cap on tags.
const (
	statementsKept = 8
	stmtBuckets    = 10
	stmtSpan       = int64(tagTTL/time.Second) / stmtBuckets
	stmtTextMax    = 200
)

// digestDelta is what one digest poll added for one digest of one tag.
type digestDelta struct {
	tag, digest, text string
	count, seconds    float64
}

type stmtBucket struct {
	sec            int64
	count, seconds float64
}

// stmtFigures is one digest of one tag in the window.
type stmtFigures struct {
	digest, text string
	b            [stmtBuckets]stmtBucket
}

func (f *stmtFigures) add(sec int64, count, seconds float64) {
	start := sec - sec%stmtSpan
	b := &f.b[(sec/stmtSpan)%stmtBuckets]
	if b.sec != start {
		*b = stmtBucket{sec: start}
	}
	b.count += count
	b.seconds += seconds
}

// window sums the buckets of the 5 m window before sec.
func (f *stmtFigures) window(sec int64) (count, seconds float64) {
	oldest := sec - sec%stmtSpan - (stmtBuckets-1)*stmtSpan
	for i := range f.b {
		if b := &f.b[i]; b.sec >= oldest && b.sec <= sec {
			count += b.count
			seconds += b.seconds
		}
	}
	return count, seconds
}

// addStatements adds one poll's digest deltas to their tags' statements,
// after the poll's figures were added (a tag the poll held back or
// rejected has no entry and its digests are skipped). A tag with
// statementsKept digests takes a new one in place of the one with the
// least time in the window, when the new one has more.
func (s *store) addStatements(target string, source Source, deltas []digestDelta) {
	if len(deltas) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.series[seriesKey{target, source}]
	if sr == nil {
		return
	}
	sec := s.now().Unix()
	for i := range deltas {
		dd := &deltas[i]
		e := sr.tags[dd.tag]
		if e == nil {
			continue
		}
		j := slices.IndexFunc(e.stmts, func(f *stmtFigures) bool { return f.digest == dd.digest })
		if j < 0 {
			f := &stmtFigures{digest: strings.Clone(dd.digest), text: strings.Clone(attrib.Truncate(dd.text, stmtTextMax))}
			if len(e.stmts) < statementsKept {
				e.stmts = append(e.stmts, f)
				j = len(e.stmts) - 1
			} else {
				least, leastSec := 0, 0.0
				for k, g := range e.stmts {
					if _, v := g.window(sec); k == 0 || v < leastSec {
						least, leastSec = k, v
					}
				}
				if dd.seconds <= leastSec {
					continue
				}
				e.stmts[least], j = f, least
			}
		}
		e.stmts[j].add(sec, dd.count, dd.seconds)
	}
}

// statementsOf lists tag's digests with time in the window, per target and
// source, most time first. Callers hold the store's mu.
func (s *store) statementsOf(tag string) []DetailStatement {
	sec := s.now().Unix()
	out := []DetailStatement{}
	for k, sr := range s.series {
		e := sr.tags[tag]
		if e == nil {
			continue
		}
		for _, f := range e.stmts {
			if n, v := f.window(sec); n > 0 || v > 0 {
				out = append(out, DetailStatement{Target: k.target, Source: k.source, Digest: f.digest, Text: f.text, Count: n, HoldSeconds: v})
			}
		}
	}
	slices.SortFunc(out, func(a, b DetailStatement) int {
		return cmp.Or(cmp.Compare(b.HoldSeconds, a.HoldSeconds), strings.Compare(a.Target+a.Digest, b.Target+b.Digest))
	})
	return out
}
