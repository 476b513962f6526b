package attrib

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// eventLine is one events log line of session thread, as ProxySQL writes it.
func eventLine(thread int, startUS, endUS int64, query string) string {
	return fmt.Sprintf(`{"event":"COM_QUERY","thread_id":%d,"starttime_timestamp_us":%d,"endtime_timestamp_us":%d,"duration_us":%d,"query":%q,"hostgroup_id":0,"server":"db:3306"}`,
		thread, startUS, endUS, endUS-startUS, query)
}

// absurdLines are lines with times no ProxySQL wrote, each rejected by
// itself (parse) or by the log's clock.
func absurdLines(nearUS int64) []string {
	year2099 := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	return []string{
		eventLine(3, -9e18, 9e18, "/* conn_tag:evil */ SELECT 1"),                       // the outside test's line
		eventLine(3, 9e18-1, 9e18, "/* conn_tag:evil */ SELECT 1"),                      // a window ending in the year 294247
		eventLine(3, year2099, year2099+10, "/* conn_tag:evil */ BEGIN"),                // plausible, far ahead
		eventLine(3, 1, 2, "/* conn_tag:evil */ SELECT 1"),                              // plausible, far behind
		eventLine(3, nearUS-8*24*3600e6, nearUS, "/* conn_tag:evil */ SELECT SLEEP(1)"), // a statement of 8 days
		strings.Replace(eventLine(3, nearUS, nearUS+5, "/* conn_tag:evil */ SELECT 1"), `"duration_us":5`, `"duration_us":-9000000000000000000`, 1),
	}
}

func TestParseEventRejectsAbsurdTimes(t *testing.T) {
	for i, line := range absurdLines(1796200038250235) {
		if i == 2 || i == 3 {
			continue // plausible on its own: the log's clock rejects it
		}
		var ev Event
		var scratch []byte
		if err := parseEvent([]byte(line), &ev, &scratch); err == nil {
			t.Errorf("accepted %s", line)
		}
	}
}

// TestEventClockKeepsEveryRealEvent: a jump the next event agrees with is
// the log moving on (a quiet day, a clock step, another instance's file),
// not corruption: nothing real is lost, wherever the corrupt line sits.
func TestEventClockKeepsEveryRealEvent(t *testing.T) {
	const day = 24 * 3600e6
	const t0 = 1796200038250235
	type step struct {
		end  int64
		real bool
	}
	for _, tc := range []struct {
		name   string
		events []step
	}{
		{"quiet days", []step{{t0, true}, {t0 + 1e6, true}, {t0 + 3*day, true}, {t0 + 3*day + 1, true}, {t0 + 9*day, true}, {t0 + 9*day + 1, true}}},
		{"clock stepped back", []step{{t0, true}, {t0 + 1, true}, {t0 - day, true}, {t0 - day + 5, true}}},
		// What the clock cannot tell from corruption: a jump with nothing
		// after it, and a first event the second disagrees with when the
		// third sides with the second. Both are counted and explained.
		{"jump at the very end", []step{{t0, true}, {t0 + 1, true}, {t0 + 9*day, false}}},
		{"first event, then a clock step", []step{{t0, false}, {t0 - day, true}, {t0 - day + 5, true}}},
		{"corrupt first", []step{{5, false}, {t0, true}, {t0 + 1, true}}},
		{"corrupt second", []step{{t0, true}, {5, false}, {t0 + 1, true}}},
		{"corrupt between", []step{{t0, true}, {t0 + 1, true}, {t0 + 90*day, false}, {t0 + 2, true}}},
		{"corrupt last", []step{{t0, true}, {t0 + 1, true}, {t0 - 90*day, false}}},
		{"lone event", []step{{t0, true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newEventClock(0)
			var got, rejected []int64
			var d clockDecision
			take := func() {
				for _, e := range d.emit[:d.nemit] {
					got = append(got, e.EndUS)
				}
				for range d.reject[:d.nrej] {
					rejected = append(rejected, 0)
				}
			}
			var want []int64
			for i, s := range tc.events {
				ev := Event{EndUS: s.end, Query: []byte(fmt.Sprint(i))}
				c.admit(&ev, LineRef{Line: int64(i + 1)}, &d)
				take()
				if s.real {
					want = append(want, s.end)
				}
			}
			c.flush(&d)
			take()
			if fmt.Sprint(got) != fmt.Sprint(want) || len(rejected) != len(tc.events)-len(want) {
				t.Errorf("passed %v, rejected %d; want %v in order, %d rejected", got, len(rejected), want, len(tc.events)-len(want))
			}
		})
	}
}
