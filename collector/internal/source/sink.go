// Package source has what every source of the collector shares: the
// figures it writes per tag. A source writes them; only the store reads
// them.
package source

import "math"

// Figures are the additive per-tag quantities. Seconds are float64 because
// sampled holds are fractions of a sample interval.
type Figures struct {
	Hold, Idle, Active, Stmts, Errors float64
	// Wait is time statements spent waiting for a connection (ProxySQL:
	// for a backend), not part of hold.
	Wait float64
}

// Sane reports whether every figure is finite and not negative: what a
// counter may be moved by. NaN fails every comparison, so it fails here.
func (f *Figures) Sane() bool {
	for _, v := range [...]float64{f.Hold, f.Idle, f.Active, f.Stmts, f.Errors, f.Wait} {
		if !(v >= 0 && v <= math.MaxFloat64) {
			return false
		}
	}
	return true
}

// Add adds g to f.
func (f *Figures) Add(g *Figures) {
	f.Hold += g.Hold
	f.Idle += g.Idle
	f.Active += g.Active
	f.Stmts += g.Stmts
	f.Errors += g.Errors
	f.Wait += g.Wait
}

// TagDelta is what one source adds for one tag in one batch.
type TagDelta struct {
	Figures
	PinnedSecs map[string]float64
	// Obs is how many observations (spans, holds, sampled rows) the delta
	// sums: what holdtime_collector_tags_overflow_total counts when the
	// tag goes to OverflowTag. Zero counts as one.
	Obs float64
}
