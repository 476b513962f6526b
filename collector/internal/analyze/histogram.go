package analyze

import "math/bits"

// histSub is the number of buckets per power of two: values are kept with a
// relative error under 1/histSub (1.6%), in fixed memory per tag.
const histSub = 64

// histBuckets covers 0 .. 2^46 microseconds (over two years).
const histBuckets = (46 - 6 + 1) * histSub

// histogram counts durations in microseconds into log-linear buckets, so
// percentiles need no per-hold memory.
type histogram struct {
	counts [histBuckets]uint32
	n      uint64
}

func histIndex(v int64) int {
	if v < histSub {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	exp := bits.Len64(uint64(v)) // >= 7
	sub := int(uint64(v)>>(exp-7)) & (histSub - 1)
	i := (exp-6)*histSub + sub
	return min(i, histBuckets-1)
}

// histValue is the middle of bucket i.
func histValue(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	exp := i/histSub + 6
	sub := i % histSub
	lo := int64(histSub+sub) << (exp - 7)
	width := int64(1) << (exp - 7)
	return lo + width/2
}

func (h *histogram) add(v int64) {
	h.counts[histIndex(v)]++
	h.n++
}

// quantile returns the q-quantile (0..1) in microseconds.
func (h *histogram) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += uint64(c)
		if seen >= rank {
			return histValue(i)
		}
	}
	return histValue(histBuckets - 1)
}
