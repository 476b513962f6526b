package main

import (
	"fmt"
	"math/bits"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/holdtime/holdtime/collector"
)

// groupFields are the dimensions --group-by accepts, in display order.
var groupFields = []string{"tag", "user", "host", "hostgroup", "digest"}

// parseGroupBy reads --group-by: a comma list of groupFields.
func parseGroupBy(v []string) ([]string, error) {
	var out []string
	for _, f := range v {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "client" || f == "client_host" {
			f = "host"
		}
		if !slices.Contains(groupFields, f) {
			return nil, fmt.Errorf("--group-by %q: use one or more of %s, comma-separated", f, strings.Join(groupFields, ","))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		out = []string{"tag"}
	}
	return out, nil
}

// digestConfig is what the digest needs from the command line.
type digestConfig struct {
	groupBy    []string
	from, to   time.Time
	tags       []string
	users      []string
	hostgroups []int
	top        int
}

// stmt is one statement of a session's hold not yet emitted.
type stmt struct {
	endUS, durUS int64
	digest       string
	query        string
}

// maxPendingStatements bounds what one session's open hold remembers of
// its statements; a transaction longer than that still counts whole, its
// later statements just do not reach the digest lists.
const maxPendingStatements = 2000

// maxQuerySample is how much of a statement the report keeps as example.
const maxQuerySample = 300

// digester sums holds per group, in memory bounded by the groups, their
// top lists and the open sessions.
type digester struct {
	cfg          digestConfig
	fromUS, toUS int64
	pending      map[uint64][]stmt
	strs         map[string]string
	groups       map[string]*groupAgg
	firstUS      int64
	lastUS       int64
	seenTags     map[string]bool
}

type groupAgg struct {
	key                map[string]string
	hold, idle         int64
	holds, txns, stmts int64
	maxUS              int64
	openPins           int64
	hist               logHist
	longest            []analyzeHold
	digests            map[string]*digestAgg
	users, hosts       map[string]*nameAgg
	samples            int64
}

type digestAgg struct {
	count, us int64
	query     string
}

type nameAgg struct {
	us, holds int64
}

func newDigester(cfg digestConfig) *digester {
	d := &digester{cfg: cfg, pending: map[uint64][]stmt{}, strs: map[string]string{}, groups: map[string]*groupAgg{},
		toUS: 1<<63 - 1, seenTags: map[string]bool{}}
	if !cfg.from.IsZero() {
		d.fromUS = cfg.from.UnixMicro()
	}
	if !cfg.to.IsZero() {
		d.toUS = cfg.to.UnixMicro()
	}
	return d
}

func (d *digester) intern(b []byte) string {
	if s, ok := d.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(d.strs) < 100000 {
		d.strs[s] = s
	}
	return s
}

// addEvent remembers a statement for the hold its session will emit.
func (d *digester) addEvent(e *collector.Event) {
	if e.Hostgroup < 0 {
		return // answered by ProxySQL itself: no backend held
	}
	p := d.pending[e.ThreadID]
	if len(p) >= maxPendingStatements {
		return
	}
	q := e.Query
	if len(q) > maxQuerySample {
		q = q[:maxQuerySample]
	}
	digest := d.intern(e.Digest)
	if digest == "" {
		digest = "-"
	}
	d.pending[e.ThreadID] = append(p, stmt{endUS: e.EndUS, durUS: e.EndUS - e.StartUS, digest: digest, query: string(q)})
}

// boundaryStatement: BEGIN, COMMIT and the like open or close a hold but
// say nothing of what it did.
func boundaryStatement(q string) bool {
	q = strings.TrimSpace(stripComments(q))
	up := strings.ToUpper(q[:min(len(q), 20)])
	for _, p := range []string{"BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK", "SET AUTOCOMMIT"} {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	return false
}

func stripComments(q string) string {
	for {
		q = strings.TrimSpace(q)
		if !strings.HasPrefix(q, "/*") {
			return q
		}
		i := strings.Index(q, "*/")
		if i < 0 {
			return q
		}
		q = q[i+2:]
	}
}

// addHold is the Attributor's emit function.
func (d *digester) addHold(h *collector.Hold) {
	p := d.pending[h.SessionID]
	n := 0
	for n < len(p) && p[n].endUS <= h.EndUS {
		n++
	}
	stmts := p[:n]
	if n == len(p) {
		delete(d.pending, h.SessionID)
	} else {
		d.pending[h.SessionID] = slices.Clone(p[n:])
	}
	if h.Kind == collector.HoldLocal {
		return
	}
	d.seenTags[h.Tag] = d.seenTags[h.Tag] || len(d.seenTags) < 1000
	f := &d.cfg
	if (len(f.tags) > 0 && !slices.Contains(f.tags, h.Tag)) || (len(f.users) > 0 && !slices.Contains(f.users, h.User)) ||
		(len(f.hostgroups) > 0 && !slices.Contains(f.hostgroups, h.Hostgroup)) {
		return
	}
	start, end := max(h.StartUS, d.fromUS), min(h.EndUS, d.toUS)
	if end < start || (end == start && (h.StartUS < d.fromUS || h.StartUS >= d.toUS)) {
		return
	}
	if d.firstUS == 0 || start < d.firstUS {
		d.firstUS = start
	}
	d.lastUS = max(d.lastUS, end)
	digest, query := "-", ""
	for _, s := range stmts {
		if !boundaryStatement(s.query) {
			digest, query = s.digest, s.query
			break
		}
	}
	host := hostOf(h.Client)
	g := d.group(map[string]string{"tag": h.Tag, "user": h.User, "host": host,
		"hostgroup": strconv.Itoa(h.Hostgroup), "digest": digest})
	clipped := end - start
	dur := h.DurationUS()
	frac := 1.0
	if dur > 0 {
		frac = float64(clipped) / float64(dur)
	}
	active := min(h.ActiveUS, dur)
	g.hold += clipped
	g.idle += int64(float64(dur-active) * frac)
	g.holds++
	g.stmts += int64(h.Statements)
	if h.Kind == collector.HoldTransaction {
		g.txns++
	}
	addName(g.users, h.User, clipped, 1)
	addName(g.hosts, host, clipped, 1)
	for _, s := range stmts {
		da := g.digests[s.digest]
		if da == nil {
			if len(g.digests) >= 1000 {
				continue
			}
			da = &digestAgg{query: s.query}
			g.digests[s.digest] = da
		}
		da.count++
		da.us += s.durUS
	}
	if h.EndUnknown {
		g.openPins++ // its length is unknown: in no percentile
		return
	}
	g.hist.add(dur)
	g.maxUS = max(g.maxUS, dur)
	if len(g.longest) < d.cfg.top || secondsOf(dur) > g.longest[len(g.longest)-1].Seconds {
		g.longest = keepTop(g.longest, analyzeHold{
			Start: time.UnixMicro(h.StartUS).UTC(), Seconds: secondsOf(dur), IdleSeconds: secondsOf(dur - active),
			Kind: h.Kind.String(), SessionID: h.SessionID, User: h.User, Client: h.Client, Hostgroup: h.Hostgroup,
			Tag: h.Tag, Statements: h.Statements, Digest: digest, Query: query, Truncated: h.Truncated,
		}, d.cfg.top)
	}
}

// addSample counts a processlist sample's hold, when no events log gives
// exact holds.
func (d *digester) addSample(s *collector.SampledHold) {
	if s.Waiting {
		return // waiting for a backend: not a hold
	}
	d.seenTags[s.Tag] = d.seenTags[s.Tag] || len(d.seenTags) < 1000
	f := &d.cfg
	if (len(f.tags) > 0 && !slices.Contains(f.tags, s.Tag)) || (len(f.users) > 0 && !slices.Contains(f.users, s.User)) ||
		(len(f.hostgroups) > 0 && !slices.Contains(f.hostgroups, s.Hostgroup)) {
		return
	}
	at := s.At.UnixMicro()
	if at < d.fromUS || at >= d.toUS {
		return
	}
	if d.firstUS == 0 || at < d.firstUS {
		d.firstUS = at
	}
	us := int64(s.Seconds * 1e6)
	d.lastUS = max(d.lastUS, at+us)
	g := d.group(map[string]string{"tag": s.Tag, "user": s.User, "host": "-",
		"hostgroup": strconv.Itoa(s.Hostgroup), "digest": "-"})
	g.hold += us
	if s.Pinned {
		g.idle += us
	}
	g.samples++
	addName(g.users, s.User, us, 0)
}

func addName(m map[string]*nameAgg, name string, us, holds int64) {
	n := m[name]
	if n == nil {
		if len(m) >= 1000 {
			return
		}
		n = &nameAgg{}
		m[name] = n
	}
	n.us += us
	n.holds += holds
}

func (d *digester) group(all map[string]string) *groupAgg {
	var kb strings.Builder
	key := make(map[string]string, len(d.cfg.groupBy))
	for _, f := range d.cfg.groupBy {
		key[f] = all[f]
		kb.WriteString(all[f])
		kb.WriteByte(0)
	}
	k := kb.String()
	g := d.groups[k]
	if g == nil {
		if len(d.groups) >= 10000 {
			return d.group(map[string]string{"tag": collector.OverflowTag, "user": "-", "host": "-", "hostgroup": "-", "digest": "-"})
		}
		g = &groupAgg{key: key, digests: map[string]*digestAgg{}, users: map[string]*nameAgg{}, hosts: map[string]*nameAgg{}}
		d.groups[k] = g
	}
	return g
}

func hostOf(client string) string {
	if h, _, err := net.SplitHostPort(client); err == nil {
		return h
	}
	if client == "" {
		return "-"
	}
	return client
}

func secondsOf(us int64) float64 { return float64(us) / 1e6 }

func keepTop(list []analyzeHold, h analyzeHold, n int) []analyzeHold {
	i := sort.Search(len(list), func(i int) bool { return list[i].Seconds < h.Seconds })
	list = slices.Insert(list, i, h)
	return list[:min(len(list), n)]
}

// logHist counts microsecond durations in log-linear buckets (64 per power
// of two: under 1.6% error), so percentiles need no per-hold memory.
type logHist struct {
	counts map[int]int64
	n      int64
}

func histIdx(v int64) int {
	if v < 64 {
		return int(max(v, 0))
	}
	exp := bits.Len64(uint64(v))
	return (exp-6)*64 + int(uint64(v)>>(exp-7))&63
}

func histMid(i int) int64 {
	if i < 64 {
		return int64(i)
	}
	exp, sub := i/64+6, i%64
	return int64(64+sub)<<(exp-7) + (int64(1)<<(exp-7))/2
}

func (h *logHist) add(v int64) {
	if h.counts == nil {
		h.counts = map[int]int64{}
	}
	h.counts[histIdx(v)]++
	h.n++
}

func (h *logHist) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n-1)) + 1
	idx := make([]int, 0, len(h.counts))
	for i := range h.counts {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var seen int64
	for _, i := range idx {
		if seen += h.counts[i]; seen >= rank {
			return histMid(i)
		}
	}
	return histMid(idx[len(idx)-1])
}

// decades are the hold histogram's bucket upper bounds, as pt-query-digest
// shows them.
var decades = []struct {
	label string
	leUS  int64
}{{"1us", 1}, {"10us", 10}, {"100us", 100}, {"1ms", 1e3}, {"10ms", 1e4}, {"100ms", 1e5}, {"1s", 1e6}, {"10s", 1e7}, {"10s+", 1<<63 - 1}}

func (h *logHist) decades() []int64 {
	out := make([]int64, len(decades))
	for i, c := range h.counts {
		v := histMid(i)
		for j, dc := range decades {
			if v <= dc.leUS {
				out[j] += c
				break
			}
		}
	}
	return out
}
