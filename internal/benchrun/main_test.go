package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	out := `goos: linux
BenchmarkClaim/items=1/conc=16/alone-2         	    3000	   1795246 ns/op	       557.0 claims/s	    5509 B/op	     106 allocs/op
BenchmarkLoopback/conntag-2 	 20000	 210 ns/op	 1.013 b/a
BenchmarkX 	 10	 5 ns/op
BenchmarkX 	 10	 4 ns/op	 2.0 b/a
BenchmarkX 	 10	 9 ns/op	 1.0 b/a
BenchmarkX 	 10	 7 ns/op	 3.0 b/a
--- FAIL: BenchmarkY
BenchmarkZ-8	garbage
PASS
`
	res := results{}
	parse(strings.NewReader(out), res)
	for _, c := range []struct {
		bench, unit string
		want        float64
	}{
		{"BenchmarkClaim/items=1/conc=16/alone", "claims/s", 557},
		{"BenchmarkClaim/items=1/conc=16/alone", "allocs/op", 106},
		{"BenchmarkLoopback/conntag", "b/a", 1.013},
		{"BenchmarkX", "ns/op", 4}, // the least disturbed of 4 runs
		{"BenchmarkX", "b/a", 2},   // the median of 3
		{"BenchmarkLoopback/conntag", "b/a", 1.013},
	} {
		if got, ok := get(res, c.bench, c.unit); !ok || got != c.want {
			t.Errorf("%s %s = %v, %v; want %v", c.bench, c.unit, got, ok, c.want)
		}
	}
	if len(res) != 3 {
		t.Errorf("parsed %d benchmarks, want 3: %v", len(res), res)
	}
}

// TestRenderTargets: a target checked on every run fails on the worst
// round, and a figure whose benchmark did not report is "not measured",
// never a number.
func TestRenderTargets(t *testing.T) {
	round := func(ratio float64) results {
		return results{"BenchmarkEngineVsMinimal/work=2ms/conc=32": {"engine/minimal": {ratio}}}
	}
	md := render(machine{}, "make bench", 3, false, []results{round(0.95), round(0.79), round(1.1)}, nil)
	for _, want := range []string{
		"| work 2ms, 32 concurrent: engine / minimal | minimal loop | 0.950 | 0.790 – 1.100 | 0.950, 0.790, 1.100 | × | ≥ 0.8 every run: **not met** (0.790) |",
		"| work 2ms, 64 concurrent: engine / minimal | minimal loop | not measured |",
		"work 2ms, 32 concurrent: engine / minimal: 0.790 ×, target ≥ 0.8 every run",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	md = render(machine{}, "make bench", 3, false, []results{round(0.95), round(0.85), round(1.1)}, nil)
	if !strings.Contains(md, "≥ 0.8 every run: met |") {
		t.Error("a target met in every round is not reported met")
	}
}
