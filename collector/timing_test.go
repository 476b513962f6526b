package collector

import "testing"

// skipTimingUnderRace skips a test that checks attribution accuracy against
// the clients' own timing. Those figures come from sampling and timing
// joins, and the race detector slows the clients, the collector and the
// poller several times over (on a 2-core machine under CI's parallel
// packages a 50 ms poll stretched enough to move 1 s of an 80 ms
// transaction's hold to its neighbour on the same pooled connection), so
// under -race the test measures the detector, not holdtime. `make test`
// runs these tests again without -race (its accuracy step); the code paths
// they drive stay covered under -race by the other tests of this package.
func skipTimingUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("accuracy against the clients' timing is checked without -race: make accuracy")
	}
}
