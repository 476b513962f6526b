package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseWhen reads a --since/--until value: a duration before now (10m,
// 2h, 1d, 90s), an RFC 3339 time, 'YYYY-MM-DD HH:MM:SS[.ffffff]' (the form
// of ProxySQL's starttime/endtime fields, read in loc), or Unix
// microseconds as in starttime_timestamp_us.
func parseWhen(flag, v string, now time.Time, loc *time.Location) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, nil
	}
	if d, ok := relative(v); ok {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, loc); err == nil {
			return t, nil
		}
	}
	if us, err := strconv.ParseInt(v, 10, 64); err == nil && len(v) >= 13 && len(v) <= 17 && us > 0 {
		return time.UnixMicro(us), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: give a duration before now (10m, 2h, 1d), an RFC 3339 time (2026-12-02T08:41:00Z), "+
		"ProxySQL's 'YYYY-MM-DD HH:MM:SS[.ffffff]' (read in --tz) or Unix microseconds (starttime_timestamp_us)", flag, v)
}

// relative reads 10m, 2h, 1d, 1h30m: a positive duration, with d for days.
func relative(v string) (time.Duration, bool) {
	days := time.Duration(0)
	if i := strings.IndexByte(v, 'd'); i > 0 {
		n, err := strconv.Atoi(v[:i])
		if err != nil || n < 0 {
			return 0, false
		}
		days, v = time.Duration(n)*24*time.Hour, v[i+1:]
		if v == "" {
			return days, days > 0
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || days+d <= 0 {
		return 0, false
	}
	return days + d, true
}
