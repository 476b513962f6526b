package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/holdtime/holdtime/conntag"
)

// holdProfilePath is where the demo and flashsale --metrics-listen serve
// conntag's hold profile, next to where net/http/pprof would be.
const holdProfilePath = "/debug/holdtime/profile"

// serveHoldProfile mounts a new hold profile sampling one borrow in rate (0:
// conntag's default) on mux and, when out is not nil, prints the command
// that reads it.
func serveHoldProfile(mux *http.ServeMux, rate int, out io.Writer, base string) *conntag.HoldProfile {
	hp := conntag.NewHoldProfile(rate)
	mux.Handle(holdProfilePath, hp)
	if out != nil {
		fmt.Fprintf(out, "hold profile  go tool pprof -http=: %s%s   (which lines hold the connections)\n\n", base, holdProfilePath)
	}
	return hp
}

// writeHoldProfileLesson ends the demo with the hog's hottest frame, read
// from the hold profile (the line whose borrowed connection was held
// longest), not from a name written into the demo.
func writeHoldProfileLesson(w io.Writer, hp *conntag.HoldProfile, tag, base string) {
	prof := hp.Profile()
	frame, share := conntag.HottestFrame(prof, map[string]string{"conn_tag": tag})
	if frame == "" {
		fmt.Fprintf(w, "\nThe hold profile sampled none of %s's holds (one borrow in %d is sampled); run longer to see its line.\n", tag, hp.Rate())
		return
	}
	fn, loc, _ := strings.Cut(frame, " ")
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		fn = fn[i+1:]
	}
	fmt.Fprintf(w, "\nWhich line? The hold profile puts %.0f%% of %s's held seconds on one borrow: %s at %s.\n"+
		"The slow call made while holding that connection is in the same function, after that line. The same, for any\n"+
		"app with conntag.WithHoldProfile:\n"+
		"  go tool pprof -tagfocus=conn_tag=%s -list '%s' %s%s?seconds=30\n",
		100*share, tag, fn, filepath.Base(loc), tag, strings.TrimSuffix(fn[strings.LastIndex(fn, ".")+1:], ")"), base, holdProfilePath)
}
