package main

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/holdtime/holdtime/collector"
)

// stdinName is how the report names standard input.
const stdinName = "-"

// analyzeInputs is what the arguments resolve to.
type analyzeInputs struct {
	events      []string // events log paths; stdinName for standard input
	processlist []string // processlist recordings
	notes       []string // what the report should say about the inputs
}

// resolveInputs expands the arguments: "-" is standard input, a file an
// events log, a directory a `collect --record` directory (its
// processlist.tsv recordings, and any events log copied into it).
func resolveInputs(args, processlist []string) (analyzeInputs, error) {
	in := analyzeInputs{processlist: slices.Clone(processlist)}
	stdin := 0
	for _, a := range args {
		if a == stdinName {
			if stdin++; stdin > 1 {
				return in, fmt.Errorf("- (standard input) given twice: it can be read once")
			}
			in.events = append(in.events, a)
			continue
		}
		st, err := os.Stat(a)
		if err != nil {
			return in, fmt.Errorf("input %s: %w: check the path and that this user can read it", a, err)
		}
		if !st.IsDir() {
			in.events = append(in.events, a)
			continue
		}
		ev, pl, err := scanRecording(a)
		if err != nil {
			return in, err
		}
		if len(ev) == 0 && len(pl) == 0 {
			return in, fmt.Errorf("directory %s has no processlist.tsv recording and no events log (events*.json*, *.json, *.json.gz): "+
				"give a `holdtime collect --record` directory or the files themselves", a)
		}
		in.events = append(in.events, ev...)
		in.processlist = append(in.processlist, pl...)
		targets := map[string]bool{}
		for _, e := range ev {
			targets[filepath.Dir(e)] = true
		}
		if len(targets) > 1 {
			// ProxySQL session ids restart at 1 on every proxy: read as one
			// stream, two proxies' sessions of the same id would be one.
			in.notes = append(in.notes, fmt.Sprintf("%s holds events logs of %d targets: they are read as one log, so two proxies' sessions with the same id are attributed as one; analyze each target's directory apart for exact holds", a, len(targets)))
		}
	}
	return in, nil
}

// scanRecording lists a recording directory's inputs: DIR/processlist.tsv
// and DIR/TARGET/processlist.tsv, and events logs at the same two levels.
// The stats table recordings are not hold data and are left out.
func scanRecording(dir string) (events, processlist []string, err error) {
	for _, pattern := range []string{"*", "*/*"} {
		matches, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return nil, nil, err
		}
		for _, m := range matches {
			st, err := os.Stat(m)
			if err != nil || st.IsDir() {
				continue
			}
			base := filepath.Base(m)
			switch {
			case base == "processlist.tsv" || strings.HasSuffix(base, "processlist_samples.tsv"):
				processlist = append(processlist, m)
			case strings.HasPrefix(base, "events") || strings.HasSuffix(base, ".json") || strings.HasSuffix(base, ".json.gz"):
				events = append(events, m)
			}
		}
	}
	return events, processlist, nil
}

// eventSource is one events log input being read.
type eventSource struct {
	name   string
	reader *collector.EventsReader
	stats  collector.ReadStats
	// dups counts events already read from an earlier input; dupOf names
	// those inputs.
	dups  int64
	dupOf map[string]bool
	stop  func() bool // stops closing standard input on ctx's end
	keep  *os.File    // standard input on the poller: its finalizer would close fd 0
	// rememberFromUS: events ending before this cannot be in a later
	// input, and are not remembered.
	rememberFromUS int64
}

// eventStream reads the events log inputs one after another, standard
// input first and files oldest first, and drops any event an earlier
// input already had: the same file given twice (by a symlink, a copy, a
// decompressed copy) or a rotated log that overlaps the next counts once.
type eventStream struct {
	ctx     context.Context
	cfg     collector.EventsLogConfig
	stdin   io.Reader
	sources []*eventSource
	cur     int
	// seen maps each event's content hash to the input it came from. Only
	// kept with more than one input, and only for the events a later input
	// can hold too (see rememberFrom): about 55 bytes each.
	seen map[uint64]int
	err  error
}

func newEventStream(ctx context.Context, paths []string, stdin io.Reader, cfg collector.EventsLogConfig) *eventStream {
	s := &eventStream{ctx: ctx, cfg: cfg, stdin: stdin}
	var files []string
	for _, p := range paths {
		if p == stdinName {
			s.sources = append(s.sources, &eventSource{name: stdinName})
		} else {
			files = append(files, p)
		}
	}
	ordered, first := orderByFirstEvent(ctx, files, cfg)
	for _, p := range ordered {
		s.sources = append(s.sources, &eventSource{name: p})
	}
	if len(s.sources) > 1 {
		s.seen = make(map[uint64]int)
		s.rememberFrom(first)
	}
	return s
}

// firstEvent is where a file's first event starts and ends.
type firstEvent struct{ startUS, endUS int64 }

// orderByFirstEvent sorts files by their first event's start, so rotated
// files given in any order are read oldest first; unreadable ones go last.
// It returns each file's first event.
func orderByFirstEvent(ctx context.Context, paths []string, cfg collector.EventsLogConfig) ([]string, map[string]firstEvent) {
	first := make(map[string]firstEvent, len(paths))
	if len(paths) > 1 {
		for _, p := range paths {
			if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
				continue // peeking a FIFO would eat what it holds
			}
			r := collector.OpenEventsLog(ctx, []string{p}, cfg)
			if r.Next() {
				first[p] = firstEvent{r.Event().StartUS, r.Event().EndUS}
			}
			r.Close()
		}
	}
	out := slices.Clone(paths)
	slices.SortStableFunc(out, func(a, b string) int {
		fa, oka := first[a]
		fb, okb := first[b]
		switch {
		case oka && okb:
			return cmp.Compare(fa.startUS, fb.startUS)
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0
	})
	return out, first
}

// dedupSlackUS is how far before a later file's first event an event can
// end and still be in that file too: ProxySQL writes an event when it
// ends, its threads a little out of order.
const dedupSlackUS = 10_000_000

// rememberFrom sets, for each input, the end time from which its events
// must be remembered: only an event a later input can also hold, one that
// ends after (about) that input's first event, can be read twice. A
// rotated log then costs memory for its overlap with the next, not for
// its length; an input whose first event is unknown (standard input, a
// FIFO) makes every earlier input remembered whole.
func (s *eventStream) rememberFrom(first map[string]firstEvent) {
	from := int64(math.MaxInt64)
	for i := len(s.sources) - 1; i >= 0; i-- {
		s.sources[i].rememberFromUS = from
		f, ok := first[s.sources[i].name]
		if !ok || s.sources[i].name == stdinName {
			from = math.MinInt64
		} else if from != math.MinInt64 {
			from = min(from, f.endUS-dedupSlackUS)
		}
	}
}

func (s *eventStream) open(src *eventSource) {
	if src.name != stdinName {
		src.reader = collector.OpenEventsLog(s.ctx, []string{src.name}, s.cfg)
		return
	}
	in := s.stdin
	if f, ok := in.(*os.File); ok {
		if pf, restore := interruptibleStdin(f); pf != nil {
			in = pf
			src.keep = pf
			// Closing it is what ends a read waiting on the pipe at Ctrl-C.
			stopClose := context.AfterFunc(s.ctx, func() { pf.Close() })
			src.stop = func() bool { restore(); return stopClose() }
		}
	}
	src.reader = collector.NewEventsReader(s.ctx, in, "(stdin)", s.cfg)
}

// Next advances to the next event not seen before; false at the end of
// all input or on an error (see Err).
func (s *eventStream) Next() bool {
	for s.cur < len(s.sources) {
		src := s.sources[s.cur]
		if src.reader == nil {
			s.open(src)
		}
		if !src.reader.Next() {
			src.stats = src.reader.Stats()
			if err := src.reader.Err(); err != nil {
				s.err = err
				src.reader.Close()
				return false
			}
			src.reader.Close()
			s.cur++
			continue
		}
		if s.seen == nil {
			return true
		}
		k := eventKey(src.reader.Event())
		if first, ok := s.seen[k]; ok && first != s.cur {
			src.dups++
			if src.dupOf == nil {
				src.dupOf = map[string]bool{}
			}
			src.dupOf[s.sources[first].name] = true
			continue
		}
		if src.reader.Event().EndUS >= src.rememberFromUS {
			s.seen[k] = s.cur
		}
		return true
	}
	return false
}

// Event is the event Next found.
func (s *eventStream) Event() *collector.Event { return s.sources[s.cur].reader.Event() }

// Err is the error that stopped reading, if any.
func (s *eventStream) Err() error { return s.err }

// Close releases the input being read.
func (s *eventStream) Close() {
	for _, src := range s.sources {
		if src.reader != nil {
			src.stats = src.reader.Stats()
			src.reader.Close()
		}
		if src.stop != nil {
			src.stop()
		}
	}
}

// eventKey hashes what makes an event itself: the same statement of the
// same session at the same microsecond is the same event wherever it is
// read from.
func eventKey(e *collector.Event) uint64 {
	h := fnv.New64a()
	var b [8 * 4]byte
	for i, v := range []int64{int64(e.ThreadID), e.StartUS, e.EndUS, int64(e.Type)} {
		for j := range 8 {
			b[i*8+j] = byte(v >> (8 * j))
		}
	}
	h.Write(b[:])
	h.Write(e.Client)
	h.Write([]byte{0})
	h.Write(e.Query)
	return h.Sum64()
}

// duplicateNotes says, per input, what de-duplication dropped.
func (s *eventStream) duplicateNotes() []string {
	var notes []string
	for _, src := range s.sources {
		if src.dups == 0 {
			continue
		}
		of := slices.Sorted(func(yield func(string) bool) {
			for n := range src.dupOf {
				if !yield(n) {
					return
				}
			}
		})
		if src.dups == src.stats.Events {
			notes = append(notes, fmt.Sprintf("duplicate input: %s has the same events as %s (all %d already read): counted once",
				src.name, strings.Join(of, ", "), src.dups))
		} else {
			notes = append(notes, fmt.Sprintf("overlapping input: %d of %s's %d events were already read from %s: counted once",
				src.dups, src.name, src.stats.Events, strings.Join(of, ", ")))
		}
	}
	return notes
}
