package analyze

import (
	"math"
	"testing"
)

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for v := int64(1); v <= 100000; v++ {
		h.add(v * 10)
	}
	for _, tt := range []struct {
		q    float64
		want float64
	}{{0.5, 500000}, {0.99, 990000}, {1, 1000000}} {
		got := float64(h.quantile(tt.q))
		if math.Abs(got-tt.want)/tt.want > 0.02 {
			t.Errorf("quantile(%v) = %v, want %v within 2%%", tt.q, got, tt.want)
		}
	}
	for _, v := range []int64{0, 1, 63, 64, 65, 127, 128, 1 << 20, 1<<45 + 12345} {
		got := histValue(histIndex(v))
		if v > 0 && math.Abs(float64(got-v))/float64(v) > 1.0/histSub {
			t.Errorf("bucket of %d reads back as %d", v, got)
		}
	}
}
