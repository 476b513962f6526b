package conntag

import (
	"math/rand/v2"
	"time"
)

// SpanSampling chooses which holds get a "db.connection.hold" span
// (WithHoldSpanSampling). A hold gets one when it lasted at least MinHold,
// or was idle at least MinIdle, and otherwise with probability Rate. The
// zero value gives no hold spans at all.
//
// Sampling decides only which spans are made: the per-tag counters (hold,
// active and idle seconds, holds, connections held now) and the histograms
// count every hold whatever it says, so the app's figures stay exact.
type SpanSampling struct {
	// MinHold: holds at least this long always get a span. 0: no such rule.
	MinHold time.Duration
	// MinIdle: holds idle (held outside driver calls) at least this long
	// always get a span. 0: no such rule.
	MinIdle time.Duration
	// Rate is the probability, from 0 to 1, that a hold no rule chose gets
	// a span anyway. Its span carries holdtime.hold.sample_weight = 1/Rate,
	// so a consumer that sums spans can weight them back to unbiased
	// totals; spans a rule chose carry weight 1.
	Rate float64
}

// WithHoldSpanSampling makes hold spans only for the holds s chooses (see
// SpanSampling), instead of for every hold. It matters only with
// WithTracerProvider. Statement spans are not affected: leave them to the
// TracerProvider's sampler, or turn them off with WithoutStatementSpans.
func WithHoldSpanSampling(s SpanSampling) Option {
	return func(c *config) {
		s.Rate = min(max(s.Rate, 0), 1)
		s.MinHold, s.MinIdle = max(s.MinHold, 0), max(s.MinIdle, 0)
		c.holdSampling = &s
	}
}

// WithoutStatementSpans keeps the hold spans of WithTracerProvider and
// drops the span per statement: the hold spans are what holdtime's
// collector needs (they name the ProxySQL session a hold went through), and
// a span per statement costs more than everything else conntag does for it.
func WithoutStatementSpans() Option {
	return func(c *config) { c.noStmtSpans = true }
}

// holdSpanWeight says whether the hold that just ended gets a span and
// with which weight (0: no span). Without sampling every hold gets one, of
// weight 1.
func (in *instr) holdSpanWeight(held, idle int64) float64 {
	s := in.cfg.holdSampling
	if s == nil {
		return 1
	}
	if s.MinHold > 0 && held >= int64(s.MinHold) || s.MinIdle > 0 && idle >= int64(s.MinIdle) {
		return 1
	}
	if s.Rate > 0 && (s.Rate >= 1 || rand.Float64() < s.Rate) {
		return 1 / s.Rate
	}
	return 0
}
