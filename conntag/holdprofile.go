package conntag

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"
)

// DefaultHoldProfileRate is the sampling rate of a HoldProfile made with a
// rate of 0: one borrow in 100 records its stack. A sampled borrow costs
// 2–4 µs (the stack walk, and a map update when the hold ends); at this rate
// the profile added 40–100 ns per hold on average to a one-statement hold on
// the stub driver, over conntag's default (BenchmarkStatementInterleaved,
// 2-core VM, noisy). At 100 holds a second a path that takes 1 % of them is
// sampled about once a minute.
const DefaultHoldProfileRate = 100

// maxProfileDepth bounds the stack recorded per sampled borrow. database/sql
// and conntag take about a dozen frames of it; the rest is the borrower's.
const maxProfileDepth = 48

// HoldProfile is a pprof profile of connection holding: which code borrowed
// the connections, weighted by how long it kept them. Pass it to
// WithHoldProfile (one profile may serve several pools; the pool name is a
// label), then write it with WriteTo or serve it with its ServeHTTP method,
// where net/http/pprof is mounted:
//
//	hp := conntag.NewHoldProfile(0)
//	db, err := conntag.Open("mysql", dsn, conntag.WithHoldProfile(hp))
//	http.Handle("/debug/holdtime/profile", hp)
//
// and read it like any Go profile:
//
//	go tool pprof -http=: http://app/debug/holdtime/profile?seconds=30
//
// One borrow in rate records the borrower's stack (the goroutine that
// borrowed the connection, without database/sql's and conntag's own
// frames). When that hold ends, the sample is added with the hold's seconds,
// its idle seconds (held minus statements) and one hold, each multiplied by
// rate: like the runtime's mutex profile, each sampled hold stands for the
// rate holds it represents, so the totals are unbiased estimates of all
// holds. The error of a path's figure shrinks with the number of its holds
// sampled; a rare path that holds for seconds shows once one of its holds is
// sampled, with rate times that hold's seconds. Holds still open are not in
// the profile.
//
// Sample types: held (nanoseconds, the default), idle_held (nanoseconds) and
// holds (count). Labels: conn_tag (the hold's tag; "other" past WithMaxTags)
// and pool (WithPoolName).
//
// The profile is cumulative since NewHoldProfile; ?seconds=N serves the
// difference over the next N seconds, like the runtime's profiles, and
// go tool pprof -diff_base compares two.
type HoldProfile struct {
	rate  int64
	start time.Time

	mu      sync.Mutex
	entries map[profileKey]*profileValue
}

type profileKey struct {
	stack     [maxProfileDepth]uintptr
	tag, pool string
}

type profileValue struct {
	held, idle, holds int64 // already multiplied by the rate
}

// NewHoldProfile returns an empty profile that samples one borrow in rate
// (0: DefaultHoldProfileRate; 1: every borrow).
func NewHoldProfile(rate int) *HoldProfile {
	if rate <= 0 {
		rate = DefaultHoldProfileRate
	}
	return &HoldProfile{rate: int64(rate), start: time.Now(), entries: make(map[profileKey]*profileValue)}
}

// Rate is the profile's sampling rate: one borrow in Rate is recorded.
func (p *HoldProfile) Rate() int { return int(p.rate) }

// WithHoldProfile records a sampled subset of holds into p (see
// HoldProfile). Off by default; without it no stack is taken and nothing
// is added to a statement.
func WithHoldProfile(p *HoldProfile) Option {
	return func(c *config) { c.holdProfile = p }
}

// profileSlot is a connection's sampled hold in progress: kept per
// connection and reused, so a sampled borrow allocates nothing.
type profileSlot struct {
	on    bool
	n     int
	stack [maxProfileDepth]uintptr
}

// sampleBorrow decides whether the hold starting now on c is sampled and,
// if so, records the borrower's stack. Each borrow is sampled with
// probability 1/rate, independently; the connection draws the number of
// borrows to its next sample from the geometric distribution, so an
// unsampled borrow costs a decrement rather than a random number.
func (p *HoldProfile) sampleBorrow(c *conn) {
	if c.prof != nil {
		c.prof.on = false
	}
	if p.rate > 1 {
		if !c.profDrawn {
			c.profDrawn, c.profSkip = true, p.nextSkip()
		}
		if c.profSkip > 0 {
			c.profSkip--
			return
		}
		c.profSkip = p.nextSkip()
	}
	if c.prof == nil {
		c.prof = new(profileSlot)
	}
	c.prof.on = true
	c.prof.n = runtime.Callers(3, c.prof.stack[:])
}

// nextSkip draws the number of unsampled borrows before the next sampled
// one: geometric with success probability 1/rate.
func (p *HoldProfile) nextSkip() int64 {
	u := 1 - rand.Float64() // (0, 1]
	return int64(math.Log(u) / math.Log1p(-1/float64(p.rate)))
}

// endHold adds c's sampled hold, if it was sampled.
func (p *HoldProfile) endHold(c *conn, tag, pool string, held, idle int64) {
	s := c.prof
	if s == nil || !s.on {
		return
	}
	s.on = false
	k := profileKey{tag: tag, pool: pool}
	copy(k.stack[:], s.stack[:s.n])
	p.mu.Lock()
	v := p.entries[k]
	if v == nil {
		v = new(profileValue)
		p.entries[k] = v
	}
	v.held += held * p.rate
	v.idle += idle * p.rate
	v.holds += p.rate
	p.mu.Unlock()
}

// snapshot copies the cumulative values.
func (p *HoldProfile) snapshot() map[profileKey]profileValue {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[profileKey]profileValue, len(p.entries))
	for k, v := range p.entries {
		m[k] = *v
	}
	return m
}

// Profile returns the profile as it is now, cumulative since NewHoldProfile.
func (p *HoldProfile) Profile() *profile.Profile {
	return p.build(p.snapshot(), nil, p.start, time.Now())
}

// WriteTo writes the cumulative profile in pprof's gzipped protobuf format.
func (p *HoldProfile) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	err := p.Profile().Write(cw)
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// ServeHTTP serves the profile in pprof's format: cumulative, or with
// ?seconds=N the holds that ended during the next N seconds (at most one
// hour; the request's deadline must allow it).
func (p *HoldProfile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	sec := r.FormValue("seconds")
	if sec == "" {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="holdtime-hold-profile"`)
		if _, err := p.WriteTo(w); err != nil {
			http.Error(w, "conntag: writing the hold profile: "+err.Error(), http.StatusInternalServerError)
		}
		return
	}
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || n <= 0 || n > 3600 {
		http.Error(w, "conntag: seconds must be a whole number of seconds from 1 to 3600, not "+strconv.Quote(sec), http.StatusBadRequest)
		return
	}
	d := time.Duration(n) * time.Second
	if dl, ok := r.Context().Deadline(); ok && time.Until(dl) < d {
		http.Error(w, "conntag: the profile window is longer than the request's deadline (the server's WriteTimeout?)", http.StatusBadRequest)
		return
	}
	from, before := time.Now(), p.snapshot()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.Context().Done():
		return
	case <-t.C:
	}
	to, after := time.Now(), p.snapshot()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="holdtime-hold-profile"`)
	if err := p.build(after, before, from, to).Write(w); err != nil {
		http.Error(w, "conntag: writing the hold profile: "+err.Error(), http.StatusInternalServerError)
	}
}

// build turns values (minus base, when not nil) into a pprof profile whose
// stacks are the borrowers' frames, innermost first, without database/sql's
// and conntag's own.
func (p *HoldProfile) build(values, base map[profileKey]profileValue, from, to time.Time) *profile.Profile {
	exe, _ := os.Executable()
	m := &profile.Mapping{ID: 1, File: exe, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "held", Unit: "nanoseconds"},
			{Type: "idle_held", Unit: "nanoseconds"},
			{Type: "holds", Unit: "count"},
		},
		DefaultSampleType: "held",
		PeriodType:        &profile.ValueType{Type: "holds", Unit: "count"},
		Period:            p.rate,
		TimeNanos:         from.UnixNano(),
		DurationNanos:     to.Sub(from).Nanoseconds(),
		Mapping:           []*profile.Mapping{m},
		Comments:          []string{"conntag hold profile: where connections were borrowed, weighted by how long they were held"},
	}
	funcs := map[[2]string]*profile.Function{}
	locs := map[uintptr]*profile.Location{}
	location := func(pc uintptr) *profile.Location {
		if l, ok := locs[pc]; ok {
			return l
		}
		// One location per return address; inlined calls become its
		// extra lines, innermost first, as in the runtime's profiles.
		l := &profile.Location{ID: uint64(len(prof.Location) + 1), Mapping: m, Address: uint64(pc)}
		frames := runtime.CallersFrames([]uintptr{pc})
		for {
			f, more := frames.Next()
			if !internalFrame(f) && f.Function != "" {
				key := [2]string{f.Function, f.File}
				fn := funcs[key]
				if fn == nil {
					fn = &profile.Function{ID: uint64(len(prof.Function) + 1), Name: f.Function, SystemName: f.Function, Filename: f.File}
					funcs[key] = fn
					prof.Function = append(prof.Function, fn)
				}
				l.Line = append(l.Line, profile.Line{Function: fn, Line: int64(f.Line)})
			}
			if !more {
				break
			}
		}
		locs[pc] = l
		if len(l.Line) > 0 {
			prof.Location = append(prof.Location, l)
		}
		return l
	}
	for k, v := range values {
		if b, ok := base[k]; ok {
			v.held -= b.held
			v.idle -= b.idle
			v.holds -= b.holds
		}
		if v.holds == 0 {
			continue
		}
		s := &profile.Sample{
			Value: []int64{v.held, v.idle, v.holds},
			Label: map[string][]string{"conn_tag": {k.tag}, "pool": {k.pool}},
		}
		for _, pc := range k.stack {
			if pc == 0 {
				break
			}
			if l := location(pc); len(l.Line) > 0 {
				s.Location = append(s.Location, l)
			}
		}
		prof.Sample = append(prof.Sample, s)
	}
	return prof
}

// internalFrame reports a frame of database/sql or of conntag itself (not
// its tests): they say nothing about who borrowed.
func internalFrame(f runtime.Frame) bool {
	return strings.HasPrefix(f.Function, "database/sql.") ||
		strings.HasPrefix(f.Function, instrumentationName+".") && !strings.HasSuffix(f.File, "_test.go")
}

// HottestFrame returns the frame of p's default sample type (held) with
// the most flat value in prof: the borrower's own line that kept
// connections longest, as "function file:line", and that value's share of
// the total. It returns "" when prof has no samples. Labels narrow it to
// the samples that carry every given label (for example conn_tag).
func HottestFrame(prof *profile.Profile, labels map[string]string) (frame string, share float64) {
	flat := map[string]int64{}
	var total int64
	for _, s := range prof.Sample {
		match := true
		for k, v := range labels {
			if len(s.Label[k]) == 0 || s.Label[k][0] != v {
				match = false
			}
		}
		if !match || len(s.Location) == 0 || len(s.Location[0].Line) == 0 {
			continue
		}
		line := s.Location[0].Line[0]
		key := fmt.Sprintf("%s %s:%d", line.Function.Name, line.Function.Filename, line.Line)
		flat[key] += s.Value[0]
		total += s.Value[0]
	}
	var best int64
	for k, v := range flat {
		if v > best || v == best && k < frame {
			frame, best = k, v
		}
	}
	if total == 0 {
		return "", 0
	}
	return frame, float64(best) / float64(total)
}
