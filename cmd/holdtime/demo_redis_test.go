package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/holdtime/holdtime/testenv"
)

// The second lesson's table: the Redis design misplaces units under each
// fault (the way its claim order predicts), the engine none.
func TestRedisLesson(t *testing.T) {
	testenv.RequireRedis(t)
	target := flashsaleTarget(t)
	runs, _, err := lessonRuns(t.Context(), target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range runs {
		r := run.r
		engine := strings.HasPrefix(run.design, "engine")
		switch {
		case run.fault == "none" || engine:
			if r.Oversold != 0 || r.Undersold != 0 || r.Leaked != 0 || r.Paid != r.Stock {
				t.Errorf("%s, %s: %+v", run.design, run.fault, r)
			}
		case strings.Contains(run.design, "ledger first") && strings.Contains(run.fault, "killed"):
			if r.Undersold == 0 || r.Undersold != r.KilledClaims || r.Oversold != 0 {
				t.Errorf("%s, %s: want one unit undersold per killed claim: %+v", run.design, run.fault, r)
			}
		case strings.Contains(run.design, "Redis first"):
			if r.Oversold == 0 || r.Oversold != r.KilledClaims || r.Undersold != 0 {
				t.Errorf("%s, %s: want one unit oversold per killed claim: %+v", run.design, run.fault, r)
			}
		case strings.Contains(run.fault, "snapshot"):
			if r.Oversold == 0 || r.Paid <= r.Stock {
				t.Errorf("%s, %s: want the units sold before the crash sold again: %+v", run.design, run.fault, r)
			}
		default:
			t.Errorf("unexpected row %s, %s", run.design, run.fault)
		}
		if engine && run.fault != "none" && (r.KilledClaims == 0 || r.Restarts != 1) {
			t.Errorf("the engine's faults did not happen: %+v", r)
		}
	}
	var out bytes.Buffer
	if err := writeLesson(&out, runs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lesson 2", "oversold", "Redis crashes, back from its last snapshot", "engine (skip_locked)", "--migrate"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lesson lacks %q:\n%s", want, out.String())
		}
	}
	t.Log("\n" + out.String())
}
