//go:build race

package collector

// raceDetector: this test binary runs under the race detector.
const raceDetector = true
