package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/pprof/profile"
)

// The drill-down's hottest frames: the lines of the app's code that
// borrowed the drilled tag's connections, weighted by how long they kept
// them, read from the hold profile conntag serves (conntag.HoldProfile,
// mounted by the demo and flashsale --metrics-listen at holdProfilePath).
// top reads it itself, from the apps given with --hold-profile: the
// collector never sees the app's profile (it has the app's spans, not its
// stacks), and an app is often reachable only from where top runs.

const (
	// holdProfileTimeout bounds one read of an app's profile. A profile of a
	// few thousand samples is tens of kilobytes and is written in
	// milliseconds; an app that takes longer is overloaded or stuck, and the
	// drill-down says so rather than waiting on it.
	holdProfileTimeout = 3 * time.Second
	// holdProfileEvery is how often the drill-down reads the profiles again.
	// The profile is cumulative since the app started: its frames change
	// slowly, and each read walks every open hold of the app's pools under
	// their lock, so a read per refresh (every second by default) would
	// cost the app more than it tells.
	holdProfileEvery = 5 * time.Second
	// maxHoldProfileBytes bounds a profile read: conntag's profile is
	// bounded by its distinct stacks and tags; a larger body is not one.
	maxHoldProfileBytes = 64 << 20
	// recentWindow is the span of the drill-down's recent figures: the
	// difference between the latest read of a profile and the read about
	// this long before it (the profile is cumulative since the app started,
	// which in a long-running app buries what changed now).
	recentWindow = time.Minute
	// shownFrames is how many frames the drill-down lists by held seconds;
	// frames with holds open now, or held within the recent span, are
	// listed after them, up to maxFrames.
	shownFrames = 5
	maxFrames   = 8
)

// holdProfileApp is one --hold-profile URL and the name it is shown by:
// its host (and path, when not the usual one), never its credentials.
type holdProfileApp struct {
	name string
	url  string
}

// frameFetcher reads the apps' hold profiles. Its client carries no bearer
// token: HOLDTIME_TOKEN is the collector's secret, and an app is another
// party. Credentials written in a URL (user:pass@) go to that URL only, as
// basic auth, and are never shown.
type frameFetcher struct {
	hc      *http.Client
	apps    []holdProfileApp
	timeout time.Duration
	every   time.Duration
	window  time.Duration // recentWindow

	// reads are each app's earlier profiles, oldest first, for the recent
	// figures: guarded, since a drill into another tag may read while the
	// old tag's read is still on its way.
	mu    sync.Mutex
	reads map[string][]profileRead
}

// profileRead is one read of an app's profile.
type profileRead struct {
	at   time.Time
	prof *profile.Profile
}

// validateHoldProfileURLs checks the --hold-profile values; an error names
// the URL without its password.
func validateHoldProfileURLs(urls []string) error {
	for _, raw := range urls {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			// url.Parse's message quotes the URL, password included.
			return errors.New("--hold-profile: a value given is not a URL: give the app's profile URL such as http://127.0.0.1:9480" + holdProfilePath)
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			return fmt.Errorf("--hold-profile %s is not an http(s) URL such as http://127.0.0.1:9480%s", shownURL(u), holdProfilePath)
		case u.Query().Has("seconds"):
			return fmt.Errorf("--hold-profile %s: drop ?seconds=: top reads the cumulative profile, and a ?seconds=N read waits N seconds", shownURL(u))
		}
	}
	return nil
}

// shownURL is u for a message: scheme, host and path, without the user
// information or the query, either of which may carry a secret (an app or a
// Prometheus served behind ?token=...). url.URL.Redacted keeps the query.
func shownURL(u *url.URL) string {
	if u.Scheme == "" && u.Host == "" {
		return u.Path
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// anyHTTPS reports whether one of the profile URLs is https: --ca-cert
// then also serves them.
func anyHTTPS(urls []string) bool {
	for _, raw := range urls {
		if u, err := url.Parse(raw); err == nil && u.Scheme == "https" {
			return true
		}
	}
	return false
}

// newFrameFetcher prepares reads of the profiles at urls (validated),
// trusting caCert besides the system's certificates.
func newFrameFetcher(urls []string, caCert string) (*frameFetcher, error) {
	hc, err := collectorHTTPClient("", caCert) // "": no bearer token, ever
	if err != nil {
		return nil, err
	}
	hc.Timeout = 0 // each read has its own deadline (frameFetcher.timeout)
	f := &frameFetcher{hc: hc, timeout: holdProfileTimeout, every: holdProfileEvery, window: recentWindow, reads: map[string][]profileRead{}}
	names := map[string]int{}
	for _, raw := range urls {
		u, _ := url.Parse(raw)
		names[u.Host]++
	}
	for _, raw := range urls {
		u, _ := url.Parse(raw)
		name := u.Host
		if names[u.Host] > 1 || u.Path != holdProfilePath && u.Path != "" {
			name += u.Path
		}
		f.apps = append(f.apps, holdProfileApp{name: name, url: raw})
	}
	return f, nil
}

// startFrames prepares the reads of --hold-profile, if any.
func (t *topCmd) startFrames() error {
	if len(t.holdProfiles) == 0 {
		return nil
	}
	f, err := newFrameFetcher(t.holdProfiles, t.caCert)
	if err != nil {
		return err
	}
	t.frames = f
	return nil
}

// tagFrames is what the apps' hold profiles say of one tag.
type tagFrames struct {
	tag    string
	frames []frameFigures // by held seconds, most first
	total  frameFigures   // the tag's, over every frame
	since  time.Time      // the earliest profile's start: the figures are cumulative since
	// recent is the span of the frames' recent figures (0: not known yet,
	// on the first read).
	recent time.Duration
	rates  []int64 // the profiles' sampling rates, distinct
	// answered counts the apps whose profile was read; failed are the
	// others, with why.
	answered int
	failed   []appFailure
}

type appFailure struct{ app, reason string }

// frameFigures are one frame's figures, summed over the apps: held and
// idle seconds of ended holds and their number (estimated: the sampled
// holds times the rate), the age of holds open now (exact), and the line
// that gave the connection back for most of the held seconds.
type frameFigures struct {
	function, file string
	line           int64
	held, idle     float64
	holds          float64
	open           float64
	releasedAt     string
	// recentHeld and recentIdle are held and idle over tagFrames.recent.
	recentHeld, recentIdle float64
}

// framesMsg is the answer of one read of the profiles for the drilled tag.
type framesMsg struct {
	tag string
	seq int
	f   tagFrames
}

// fetch reads every app's profile at once, each within f.timeout, and sums
// what they say of tag.
func (f *frameFetcher) fetch(ctx context.Context, tag string) tagFrames {
	profs := make([]*profile.Profile, len(f.apps))
	errs := make([]string, len(f.apps))
	// Each read is dated when it ended, not when the slowest app answered
	// (up to f.timeout later): the recent figures are the difference of
	// two reads of one app, over the time between them.
	ats := make([]time.Time, len(f.apps))
	var wg sync.WaitGroup
	for i, app := range f.apps {
		wg.Go(func() {
			profs[i], errs[i] = f.read(ctx, app.url)
			ats[i] = time.Now()
		})
	}
	wg.Wait()
	out := tagFrames{tag: tag}
	var ok, base []*profile.Profile
	for i, app := range f.apps {
		if errs[i] != "" {
			out.failed = append(out.failed, appFailure{app.name, errs[i]})
			continue
		}
		ok = append(ok, profs[i])
		b, span := f.baseline(app.url, profileRead{at: ats[i], prof: profs[i]})
		if span <= 0 {
			out.recent = -1 // an app without an earlier read: no recent figures yet
		} else if out.recent >= 0 {
			out.recent = max(out.recent, span)
			if b != nil {
				base = append(base, b)
			}
		}
	}
	out.answered = len(ok)
	out.recent = max(out.recent, 0)
	sumFrames(&out, ok, base)
	return out
}

// baseline records r, the latest read of app's profile, and returns the
// read to subtract from it for the recent figures: the latest one at least
// f.window old, else the oldest, and the span between them (0: no earlier
// read). Its profile is nil when the app restarted since: everything in r
// is recent.
func (f *frameFetcher) baseline(app string, r profileRead) (*profile.Profile, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reads := f.reads[app]
	// Reads older than twice the window are dropped: after a while away
	// from the drill-down, the recent figures start again rather than
	// span the absence.
	reads = slices.DeleteFunc(reads, func(old profileRead) bool { return r.at.Sub(old.at) > 2*f.window })
	var b *profileRead
	for i := range reads {
		if b == nil || r.at.Sub(reads[i].at) >= f.window {
			b = &reads[i]
		}
	}
	// Keep from the baseline on: the next read's baseline is this one or later.
	if b != nil {
		reads = reads[slices.IndexFunc(reads, func(x profileRead) bool { return x.at.Equal(b.at) }):]
	}
	f.reads[app] = append(slices.Clone(reads), r)
	if b == nil {
		return nil, 0
	}
	if b.prof.TimeNanos != r.prof.TimeNanos {
		return nil, r.at.Sub(b.at) // another start: the app restarted since
	}
	return b.prof, r.at.Sub(b.at)
}

// read reads one hold profile, cumulative (no ?seconds=: that would wait),
// and returns it, or a short reason why not that never holds the URL's
// credentials.
func (f *frameFetcher) read(ctx context.Context, raw string) (*profile.Profile, string) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, "not a URL" // validated already; the message would quote it
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return nil, fetchReason(err, f.timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		reason := "HTTP " + resp.Status
		switch resp.StatusCode {
		case http.StatusNotFound:
			reason += ": nothing served there (conntag's hold profile is mounted at " + holdProfilePath + " by the demo and flashsale --metrics-listen)"
		case http.StatusUnauthorized, http.StatusForbidden:
			reason += ": the app wants credentials (user:pass@ in the URL; the collector's token is never sent)"
		}
		return nil, reason
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHoldProfileBytes+1))
	if err != nil {
		return nil, fetchReason(err, f.timeout)
	}
	if len(body) > maxHoldProfileBytes {
		return nil, fmt.Sprintf("answered more than %d MiB: not a hold profile", maxHoldProfileBytes>>20)
	}
	prof, err := profile.ParseData(body)
	if err != nil || len(body) == 0 {
		what := "an empty body"
		if len(body) > 0 {
			what = fmt.Sprintf("%d bytes", len(body))
			if ct, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil {
				what += " of " + ct
			}
		}
		return nil, fmt.Sprintf("not a pprof profile (%s): is the URL the app's %s?", what, holdProfilePath)
	}
	if i := sampleIndex(prof, "held"); i < 0 || prof.SampleType[i].Unit != "nanoseconds" {
		var types []string
		for _, st := range prof.SampleType {
			types = append(types, st.Type)
		}
		return nil, fmt.Sprintf("a pprof profile, not a hold profile (its samples are %s, not held): is the URL the app's %s?",
			cmp.Or(strings.Join(types, ", "), "none"), holdProfilePath)
	}
	return prof, ""
}

// fetchReason says in a few words why an app's profile could not be read.
// The http client's error names the URL; only its cause is kept.
func fetchReason(err error, timeout time.Duration) string {
	var ne interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("no answer within %v: the app is overloaded or stuck", timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "down: connection refused"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "unreachable: " + unwrapURLError(err).Error()
}

func sampleIndex(p *profile.Profile, typ string) int {
	return slices.IndexFunc(p.SampleType, func(st *profile.ValueType) bool { return st.Type == typ })
}

// sumFrames adds up, over profs, the samples of out.tag by their leaf
// frame: the borrower's own line (conntag leaves database/sql's and the
// libraries' frames out), as conntag.HottestFrame does.
func sumFrames(out *tagFrames, profs, base []*profile.Profile) {
	byFrame, released := frameSums(out, profs)
	before, _ := frameSums(&tagFrames{tag: out.tag}, base)
	for k, fr := range byFrame {
		fr.recentHeld, fr.recentIdle = fr.held, fr.idle
		if b := before[k]; b != nil {
			fr.recentHeld, fr.recentIdle = fr.held-b.held, fr.idle-b.idle
		}
		var best float64
		for site, h := range released[k] {
			if fr.releasedAt == "" || h > best || h == best && site < fr.releasedAt {
				fr.releasedAt, best = site, h
			}
		}
		out.total.held += fr.held
		out.total.idle += fr.idle
		out.total.holds += fr.holds
		out.total.open += fr.open
		out.total.recentHeld += fr.recentHeld
		out.frames = append(out.frames, *fr)
	}
	slices.SortFunc(out.frames, func(a, b frameFigures) int {
		return cmp.Or(cmp.Compare(b.held, a.held), cmp.Compare(b.open, a.open), cmp.Compare(a.function, b.function),
			cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line))
	})
	// The top frames by held seconds, then those holding connections open
	// now or held recently that are not among them: a stuck transaction
	// has no ended hold, and a new path of a long-running app little
	// cumulative hold.
	shown := out.frames[:min(shownFrames, len(out.frames))]
	for _, fr := range out.frames[len(shown):] {
		if (fr.open > 0 || out.recent > 0 && fr.recentHeld > 0) && len(shown) < maxFrames {
			shown = append(shown, fr)
		}
	}
	out.frames = shown
}

type frameKey struct {
	function, file string
	line           int64
}

// frameSums sums the samples of out.tag in profs by leaf frame, with the
// held seconds of each release site; it notes the profiles' start and
// rates in out.
func frameSums(out *tagFrames, profs []*profile.Profile) (map[frameKey]*frameFigures, map[frameKey]map[string]float64) {
	type key = frameKey
	byFrame := map[key]*frameFigures{}
	released := map[key]map[string]float64{}
	for _, p := range profs {
		if p.TimeNanos > 0 {
			if t := time.Unix(0, p.TimeNanos); out.since.IsZero() || t.Before(out.since) {
				out.since = t
			}
		}
		if p.Period > 0 && !slices.Contains(out.rates, p.Period) {
			out.rates = append(out.rates, p.Period)
		}
		held, idle, holds, open := sampleIndex(p, "held"), sampleIndex(p, "idle_held"), sampleIndex(p, "holds"), sampleIndex(p, "held_open")
		value := func(s *profile.Sample, i int) float64 {
			if i < 0 || i >= len(s.Value) {
				return 0
			}
			return float64(s.Value[i])
		}
		for _, s := range p.Sample {
			if len(s.Label["conn_tag"]) == 0 || s.Label["conn_tag"][0] != out.tag ||
				len(s.Location) == 0 || len(s.Location[0].Line) == 0 || s.Location[0].Line[0].Function == nil {
				continue
			}
			l := s.Location[0].Line[0]
			k := key{l.Function.Name, l.Function.Filename, l.Line}
			fr := byFrame[k]
			if fr == nil {
				fr = &frameFigures{function: k.function, file: k.file, line: k.line}
				byFrame[k] = fr
				released[k] = map[string]float64{}
			}
			h := value(s, held) / 1e9
			fr.held += h
			fr.idle += value(s, idle) / 1e9
			fr.holds += value(s, holds)
			fr.open += value(s, open) / 1e9
			if r := s.Label["released_at"]; len(r) > 0 && r[0] != "open" {
				released[k][r[0]] += h
			}
		}
	}
	return byFrame, released
}

// sinceText says when a cumulative profile began: the time of day, with
// the date when that was not in the last day.
func sinceText(since, now time.Time) string {
	if now.Sub(since) >= 24*time.Hour {
		return since.Local().Format("2006-01-02 15:04")
	}
	return since.Local().Format("15:04:05")
}

// ratesText lists the profiles' sampling rates: "100", "10 or 100".
func (fr *tagFrames) ratesText() string {
	var rates []string
	for _, r := range fr.rates {
		rates = append(rates, strconv.FormatInt(r, 10))
	}
	return cmp.Or(strings.Join(rates, " or "), "?")
}

// shortFrame is a frame as the drill-down shows it: the function without
// its package path, the file without its directory.
func shortFrame(function, file string, line int64) string {
	if i := strings.LastIndex(function, "/"); i >= 0 {
		function = function[i+1:]
	}
	if line <= 0 {
		return function
	}
	return function + " " + filepath.Base(file) + ":" + strconv.FormatInt(line, 10)
}

// shortSite shortens a released_at label, "function /path/file.go:12", to
// "file.go:12": its function is most often the borrower's own.
func shortSite(site string) string {
	_, loc, ok := strings.Cut(site, " ")
	if !ok {
		return site // unknown: database/sql gave it back on its own
	}
	return filepath.Base(loc)
}

// fetchFrames reads the apps' profiles for the drilled tag in the
// background: on drilling in, then every f.every while the drill-down is
// open and not paused; one read at a time.
func (m *topModel) fetchFrames() tea.Cmd {
	f := m.t.frames
	if f == nil || m.drill == "" || m.paused && m.frames != nil {
		return nil
	}
	if m.framesWait != 0 && m.framesWaitTag == m.drill {
		return nil
	}
	if m.frames != nil && m.frames.tag == m.drill && m.now().Sub(m.framesAsked) < f.every {
		return nil
	}
	m.framesSeq++
	tag, ctx, seq := m.drill, m.ctx, m.framesSeq
	m.framesWait, m.framesWaitTag, m.framesAsked = seq, tag, m.now()
	return func() tea.Msg { return framesMsg{tag: tag, seq: seq, f: f.fetch(ctx, tag)} }
}

func (m *topModel) gotFrames(msg framesMsg) {
	if msg.seq == m.framesWait {
		m.framesWait = 0
	}
	if msg.tag == m.drill && msg.seq == m.framesSeq {
		m.frames = &msg.f
	}
}

// viewFrames draws the drill-down's hottest frames part.
func (m *topModel) viewFrames(b *strings.Builder) {
	w := m.width
	printLine(b, w, m.color, plain(""))
	switch {
	case m.replay != nil:
		printLine(b, w, m.color, cell{"hottest frames", "1"}, plain(": not recorded (a recording has no hold profile)"))
		return
	case m.t.frames == nil:
		printLine(b, w, m.color, cell{"hottest frames", "1"}, plain(": give --hold-profile http://APP"+holdProfilePath+
			" (an app with conntag.WithHoldProfile) to see which lines of the app hold this tag's connections"))
		return
	case m.frames == nil || m.frames.tag != m.drill:
		printLine(b, w, m.color, cell{"hottest frames", "1"}, plain(": asking the app…"))
		return
	}
	fr := m.frames
	apps := len(m.t.frames.apps)
	title := "hottest frames: the app's lines that held the tag's connections"
	if fr.answered > 0 {
		from := "the app's hold profile"
		if apps > 1 {
			from = fmt.Sprintf("hold profiles of %d of %d apps, summed", fr.answered, apps)
		}
		sampled := "every borrow sampled"
		if len(fr.rates) != 1 || fr.rates[0] != 1 {
			sampled = "one borrow in " + fr.ratesText() + " sampled: estimates"
		}
		title += fmt.Sprintf(" (%s since %s; %s)", from, sinceText(fr.since, m.now()), sampled)
	}
	printLine(b, w, m.color, cell{title, "1"})
	for _, f := range fr.failed {
		printLine(b, w, m.color, plain("  "+f.app+": "), cell{f.reason, "31"})
	}
	switch {
	case fr.answered == 0:
		return
	case len(fr.frames) == 0:
		printLine(b, w, m.color, plain(fmt.Sprintf("  no hold of %s sampled in the app's profile yet (the app samples one borrow in %s; a tag it never ran has none)",
			fr.tag, fr.ratesText())))
		return
	}
	tb := &table{left: map[int]bool{6: true, 7: true}}
	// LAST: held seconds over the recent span, beside the cumulative ones.
	last := "LAST s"
	if fr.recent > 0 {
		last = "LAST " + seconds(fr.recent.Seconds())
	}
	tb.add(plain("HELD s"), plain("SHARE"), plain("IDLE"), plain(last), plain("HOLDS"), plain("OPEN s"), plain("BORROWED AT"), plain("GIVEN BACK AT"))
	for _, f := range fr.frames {
		recent := "-" // the first read: nothing to subtract yet
		if fr.recent > 0 {
			recent = fmt.Sprintf("%.2f", f.recentHeld)
		}
		share, idle := "-", "-"
		if fr.total.held > 0 {
			share = fmt.Sprintf("%.0f%%", 100*f.held/fr.total.held)
		}
		if f.held > 0 {
			idle = fmt.Sprintf("%.0f%%", 100*f.idle/f.held)
		}
		open := "-"
		if f.open > 0 {
			open = fmt.Sprintf("%.1f", f.open)
		}
		idleCell := plain(idle)
		if f.held > 0 && f.idle/f.held >= wasteIdleShare {
			idleCell.style = "31" // held mostly outside statements: the waste
		}
		tb.add(plain(fmt.Sprintf("%.2f", f.held)), plain(share), idleCell, plain(recent), plain(fmt.Sprintf("%.0f", f.holds)), plain(open),
			plain(shortFrame(f.function, f.file, f.line)), plain(cmp.Or(shortSite(f.releasedAt), "-")))
	}
	tb.write(b, w, m.color)
}

// hideFramesUnknown drops the collector's "frames: not served" note when
// top reads the frames itself (or says how to).
func hideFramesUnknown(unknown []string) []string {
	return slices.DeleteFunc(slices.Clone(unknown), func(u string) bool { return strings.HasPrefix(u, "frames:") })
}
