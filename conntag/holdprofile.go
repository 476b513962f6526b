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
// One borrow in rate records the borrower's stack. When that hold ends, the
// sample is added with the hold's seconds, its idle seconds (held minus
// statements) and one hold, each multiplied by rate: like the runtime's
// mutex profile, each sampled hold stands for the rate holds it represents,
// so the totals are unbiased estimates of all holds. The error of a path's
// figure shrinks with the number of its holds sampled; a rare path that
// holds for seconds shows once one of its holds is sampled, with rate times
// that hold's seconds.
//
// Stacks: database/sql's and conntag's own frames are left out, and so are
// the frames of database libraries at the leaf end (WithLibraryFrames;
// default DefaultLibraryFrames: database/sql, sqlx, gorm, ent, sqlc's
// generated queries), so the first frame is the user's line that asked the
// library for the connection. Samples whose visible stacks, labels and
// release sites are the same are one sample.
//
// Sample types:
//   - held (nanoseconds, the default): hold seconds of completed holds,
//     estimated (× rate).
//   - idle_held (nanoseconds): the part of held outside statements.
//   - holds (count): completed holds, estimated (× rate).
//   - dial (nanoseconds): time spent opening a new connection for the
//     borrower before its hold began, estimated (× rate). It is not part of
//     held: a hold starts when the borrower has a connection.
//   - held_open (nanoseconds): holds still open when the profile was
//     written and older than WithOpenHoldsAfter (default 1 s), by age, each
//     once, exactly (not estimated): a stuck or leaked transaction shows
//     while it is open. An open hold that was not sampled has no borrower
//     stack: it shows under the frame "conntag.(hold not sampled)", with its
//     tag. With ?seconds=N, held_open is the state at the end of the window.
//
// Labels: conn_tag (the hold's tag; "other" past WithMaxTags), pool
// (WithPoolName) and released_at, the user's line that gave the connection
// back (the Commit, Rows.Close or Conn.Close; "unknown" when database/sql
// gave it back on its own, for example on a cancelled context): the code
// between the leaf frame and released_at is what held the connection. For
// held_open samples released_at is "open".
//
// Totals: pprof's header reads "Total samples = 7.6s (25.4%)" for held: the
// hold seconds of the window, and their share of the window's duration,
// which is the average number of connections held, ×100 (25.4 % = 0.25 of a
// connection on average). Summed over holds, not connections: two
// connections held for the whole window show as 200 %.
//
// The profile is cumulative since NewHoldProfile; ?seconds=N serves the
// difference over the next N seconds, like the runtime's profiles, and
// go tool pprof -diff_base compares two.
type HoldProfile struct {
	rate      int64
	start     time.Time
	libs      []string
	openAfter time.Duration

	mu      sync.Mutex
	entries map[profileKey]*profileValue
	pools   map[*instr]struct{} // for held_open: the pools writing here
}

// maxReleaseDepth bounds the stack taken when a sampled hold ends: enough
// to get past database/sql's frames to the caller's.
const maxReleaseDepth = 24

type profileKey struct {
	stack     [maxProfileDepth]uintptr
	release   [maxReleaseDepth]uintptr
	tag, pool string
}

type profileValue struct {
	held, idle, holds, dial int64 // already multiplied by the rate
}

// HoldProfileOption configures NewHoldProfile.
type HoldProfileOption func(*HoldProfile)

// DefaultLibraryFrames returns the frames trimmed from the leaf end of a
// hold profile's stacks by default (see WithLibraryFrames): database/sql,
// sqlx, gorm and its drivers, ent (its runtime, and generated packages
// named ent), and sqlc's generated query files.
func DefaultLibraryFrames() []string {
	return []string{"database/sql.", "github.com/jmoiron/sqlx.", "gorm.io/", "entgo.io/ent", "*/ent.", "*/ent/", "file:.sql.go"}
}

// WithLibraryFrames sets the frames trimmed from the leaf end of the
// profile's stacks, so that the first frame is the code that called the
// library. An entry is a function-name prefix ("gorm.io/"), or
// "*text", a function name containing text ("*/ent." for generated ent
// packages), or "file:suffix", a frame whose file name ends with suffix
// ("file:.sql.go" for sqlc's output). Frames of these libraries further up
// the stack stay. It replaces DefaultLibraryFrames; pass those too to add to
// them.
func WithLibraryFrames(entries ...string) HoldProfileOption {
	return func(p *HoldProfile) { p.libs = append([]string(nil), entries...) }
}

// WithOpenHoldsAfter sets the age from which an open hold is in the profile
// as held_open (default 1 s).
func WithOpenHoldsAfter(d time.Duration) HoldProfileOption {
	return func(p *HoldProfile) {
		if d > 0 {
			p.openAfter = d
		}
	}
}

// NewHoldProfile returns an empty profile that samples one borrow in rate
// (0: DefaultHoldProfileRate; 1: every borrow).
func NewHoldProfile(rate int, opts ...HoldProfileOption) *HoldProfile {
	if rate <= 0 {
		rate = DefaultHoldProfileRate
	}
	p := &HoldProfile{rate: int64(rate), start: time.Now(), libs: DefaultLibraryFrames(), openAfter: time.Second,
		entries: make(map[profileKey]*profileValue), pools: make(map[*instr]struct{})}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Rate is the profile's sampling rate: one borrow in Rate is recorded.
func (p *HoldProfile) Rate() int { return int(p.rate) }

// WithHoldProfile records a sampled subset of holds into p (see
// HoldProfile). Off by default; without it no stack is taken and nothing
// is added to a statement.
func WithHoldProfile(p *HoldProfile) Option {
	return func(c *config) { c.holdProfile = p }
}

func (p *HoldProfile) addPool(in *instr) {
	p.mu.Lock()
	p.pools[in] = struct{}{}
	p.mu.Unlock()
}

func (p *HoldProfile) removePool(in *instr) {
	p.mu.Lock()
	delete(p.pools, in)
	p.mu.Unlock()
}

// profileSlot is a connection's sampled hold in progress: kept per
// connection and reused, so a sampled borrow allocates nothing. The
// borrowing goroutine writes it under conn.profMu, which the profile's
// writer takes to read the stacks of open holds.
type profileSlot struct {
	on    bool
	n     int
	dial  int64
	stack [maxProfileDepth]uintptr
}

// sampleBorrow decides whether the hold starting now on c is sampled and,
// if so, records the borrower's stack. Each borrow is sampled with
// probability 1/rate, independently; the connection draws the number of
// borrows to its next sample from the geometric distribution, so an
// unsampled borrow costs a decrement rather than a random number.
func (p *HoldProfile) sampleBorrow(c *conn) {
	dial := c.dialNanos
	c.dialNanos = 0
	if c.prof != nil && c.prof.on {
		c.profMu.Lock()
		c.prof.on = false
		c.profMu.Unlock()
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
	var stack [maxProfileDepth]uintptr
	n := runtime.Callers(3, stack[:])
	c.profMu.Lock()
	if c.prof == nil {
		c.prof = new(profileSlot)
	}
	c.prof.on, c.prof.n, c.prof.dial, c.prof.stack = true, n, dial, stack
	c.profMu.Unlock()
}

// nextSkip draws the number of unsampled borrows before the next sampled
// one: geometric with success probability 1/rate.
func (p *HoldProfile) nextSkip() int64 {
	u := 1 - rand.Float64() // (0, 1]
	return int64(math.Log(u) / math.Log1p(-1/float64(p.rate)))
}

// endHold adds c's sampled hold, if it was sampled, with the stack that
// gives the connection back.
func (p *HoldProfile) endHold(c *conn, tag, pool string, held, idle int64) {
	s := c.prof
	if s == nil || !s.on {
		return
	}
	k := profileKey{tag: tag, pool: pool}
	runtime.Callers(3, k.release[:])
	c.profMu.Lock()
	s.on = false
	copy(k.stack[:], s.stack[:s.n])
	dial := s.dial
	c.profMu.Unlock()
	p.mu.Lock()
	v := p.entries[k]
	if v == nil {
		v = new(profileValue)
		p.entries[k] = v
	}
	v.held += held * p.rate
	v.idle += idle * p.rate
	v.holds += p.rate
	v.dial += dial * p.rate
	p.mu.Unlock()
}

// openHold is a hold in progress older than the threshold.
type openHold struct {
	stack     [maxProfileDepth]uintptr // zero: not sampled
	tag, pool string
	age       int64
}

// openHolds lists the holds of p's pools open for at least openAfter.
func (p *HoldProfile) openHolds() []openHold {
	p.mu.Lock()
	pools := make([]*instr, 0, len(p.pools))
	for in := range p.pools {
		pools = append(pools, in)
	}
	p.mu.Unlock()
	var out []openHold
	for _, in := range pools {
		now := in.now()
		in.connMu.Lock()
		for c := range in.conns {
			start := c.holdStart.Load()
			if start == 0 || now-start < int64(p.openAfter) {
				continue
			}
			ts := c.holdTag.Load()
			if ts == nil {
				ts = in.deflt
			}
			o := openHold{tag: ts.metrics.name, pool: in.cfg.poolName, age: now - start}
			c.profMu.Lock()
			if c.prof != nil && c.prof.on {
				copy(o.stack[:], c.prof.stack[:c.prof.n])
			}
			c.profMu.Unlock()
			out = append(out, o)
		}
		in.connMu.Unlock()
	}
	return out
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

// build turns values (minus base, when not nil), and the holds open now,
// into a pprof profile whose stacks are the borrowers' frames, innermost
// first, without database/sql's and conntag's own, trimmed of library
// frames at the leaf.
func (p *HoldProfile) build(values, base map[profileKey]profileValue, from, to time.Time) *profile.Profile {
	exe, _ := os.Executable()
	m := &profile.Mapping{ID: 1, File: exe, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "held", Unit: "nanoseconds"},
			{Type: "idle_held", Unit: "nanoseconds"},
			{Type: "holds", Unit: "count"},
			{Type: "dial", Unit: "nanoseconds"},
			{Type: "held_open", Unit: "nanoseconds"},
		},
		DefaultSampleType: "held",
		PeriodType:        &profile.ValueType{Type: "holds", Unit: "count"},
		Period:            p.rate,
		TimeNanos:         from.UnixNano(),
		DurationNanos:     to.Sub(from).Nanoseconds(),
		Mapping:           []*profile.Mapping{m},
		Comments: []string{
			"conntag hold profile: where connections were borrowed, weighted by how long they were held",
			"held: hold seconds (estimated, x rate); its share of the duration is the average number of connections held x100",
		},
	}
	b := &profileBuilder{p: p, prof: prof, m: m, funcs: map[[2]string]*profile.Function{}, locs: map[locKey]*profile.Location{},
		samples: map[sampleKey]*profile.Sample{}}
	for k, v := range values {
		if bv, ok := base[k]; ok {
			v.held -= bv.held
			v.idle -= bv.idle
			v.holds -= bv.holds
			v.dial -= bv.dial
		}
		if v.holds == 0 {
			continue
		}
		b.add(k.stack[:], b.releaseSite(k.release[:]), k.tag, k.pool, []int64{v.held, v.idle, v.holds, v.dial, 0})
	}
	for _, o := range p.openHolds() {
		b.add(o.stack[:], "open", o.tag, o.pool, []int64{0, 0, 0, 0, o.age})
	}
	return prof
}

// locKey is a location: a return address, less the lines trimmed from it
// as library frames at the leaf.
type locKey struct {
	pc      uintptr
	trimmed int
}

// sampleKey is what makes samples one: the visible stack and the labels.
type sampleKey struct {
	locs                string // location ids
	tag, pool, released string
}

type profileBuilder struct {
	p       *HoldProfile
	prof    *profile.Profile
	m       *profile.Mapping
	funcs   map[[2]string]*profile.Function
	locs    map[locKey]*profile.Location
	samples map[sampleKey]*profile.Sample
}

// frameLines are the visible frames at pc, innermost first: inlined calls
// are extra lines of one location, as in the runtime's profiles.
func frameLines(pc uintptr) []runtime.Frame {
	var out []runtime.Frame
	frames := runtime.CallersFrames([]uintptr{pc})
	for {
		f, more := frames.Next()
		if !internalFrame(f) && f.Function != "" {
			out = append(out, f)
		}
		if !more {
			return out
		}
	}
}

// library reports a frame of one of the profile's libraries.
func (p *HoldProfile) library(f runtime.Frame) bool {
	for _, e := range p.libs {
		switch {
		case strings.HasPrefix(e, "file:"):
			if strings.HasSuffix(f.File, e[len("file:"):]) {
				return true
			}
		case strings.HasPrefix(e, "*"):
			if strings.Contains(f.Function, e[1:]) {
				return true
			}
		default:
			if strings.HasPrefix(f.Function, e) {
				return true
			}
		}
	}
	return false
}

func (b *profileBuilder) function(f runtime.Frame) *profile.Function {
	key := [2]string{f.Function, f.File}
	fn := b.funcs[key]
	if fn == nil {
		fn = &profile.Function{ID: uint64(len(b.prof.Function) + 1), Name: f.Function, SystemName: f.Function, Filename: f.File}
		b.funcs[key] = fn
		b.prof.Function = append(b.prof.Function, fn)
	}
	return fn
}

func (b *profileBuilder) location(k locKey, lines []runtime.Frame) *profile.Location {
	if l, ok := b.locs[k]; ok {
		return l
	}
	l := &profile.Location{ID: uint64(len(b.prof.Location) + 1), Mapping: b.m, Address: uint64(k.pc)}
	for _, f := range lines {
		l.Line = append(l.Line, profile.Line{Function: b.function(f), Line: int64(f.Line)})
	}
	b.locs[k] = l
	b.prof.Location = append(b.prof.Location, l)
	return l
}

// visible returns the stack's locations: conntag's and database/sql's
// frames out, library frames out from the leaf up to the first other one.
func (b *profileBuilder) visible(stack []uintptr) []*profile.Location {
	var out []*profile.Location
	atLeaf := true
	for _, pc := range stack {
		if pc == 0 {
			break
		}
		lines := frameLines(pc)
		trimmed := 0
		if atLeaf {
			for trimmed < len(lines) && b.p.library(lines[trimmed]) {
				trimmed++
			}
			if trimmed < len(lines) {
				atLeaf = false
			}
		}
		if trimmed == len(lines) {
			continue
		}
		out = append(out, b.location(locKey{pc, trimmed}, lines[trimmed:]))
	}
	return out
}

// releaseSite is the first frame of a release stack that is neither
// internal nor a library's, as "function file:line".
func (b *profileBuilder) releaseSite(stack []uintptr) string {
	for _, pc := range stack {
		if pc == 0 {
			break
		}
		for _, f := range frameLines(pc) {
			if !b.p.library(f) {
				return f.Function + " " + f.File + ":" + strconv.Itoa(f.Line)
			}
		}
	}
	return "unknown"
}

// notSampled is the frame of an open hold whose borrow was not sampled.
var notSampled = runtime.Frame{Function: instrumentationName + ".(hold not sampled)", File: "conntag"}

func (b *profileBuilder) add(stack []uintptr, released, tag, pool string, values []int64) {
	locs := b.visible(stack)
	if len(locs) == 0 && stack[0] == 0 {
		locs = []*profile.Location{b.location(locKey{}, []runtime.Frame{notSampled})}
	}
	var ids strings.Builder
	for _, l := range locs {
		ids.WriteString(strconv.FormatUint(l.ID, 36))
		ids.WriteByte(',')
	}
	k := sampleKey{locs: ids.String(), tag: tag, pool: pool, released: released}
	if s := b.samples[k]; s != nil {
		for i, v := range values {
			s.Value[i] += v
		}
		return
	}
	s := &profile.Sample{
		Location: locs,
		Value:    values,
		Label:    map[string][]string{"conn_tag": {tag}, "pool": {pool}, "released_at": {released}},
	}
	b.samples[k] = s
	b.prof.Sample = append(b.prof.Sample, s)
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

// internalFrame reports a frame of database/sql or of conntag itself (not
// its tests): they say nothing about who borrowed.
func internalFrame(f runtime.Frame) bool {
	return strings.HasPrefix(f.Function, "database/sql.") ||
		strings.HasPrefix(f.Function, instrumentationName+".") && !strings.HasSuffix(f.File, "_test.go")
}
