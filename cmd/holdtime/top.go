package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/collector"
)

// topCmd shows the tags that keep connections busy, refreshed like top.
type topCmd struct {
	out   io.Writer
	in    io.Reader  // keys (q quits) when it is a terminal
	width func() int // the width lines are cut at; nil: the terminal's

	collectorURL string
	replayDir    string
	prometheus   string
	at           string
	proxysqlDSNs []string
	mysqlDSNs    []string
	interval     time.Duration
	timeout      time.Duration
	window       string
	sortKey      string
	layer        string
	filter       string
	limit        int
	once         bool
	jsonOut      bool
	color        string
	token        string
	promToken    string // Prometheus' own bearer token: never the collector's
	// tokenFlag and caFlag: given on the command line (not only from
	// HOLDTIME_TOKEN / HOLDTIME_CA_CERT, which are set for --collector and
	// ignored where they do not apply).
	tokenFlag, caFlag bool
	caCert            string

	// holdProfiles are the apps' hold profile URLs (--hold-profile);
	// holdProfileFlag: given on the command line, not only from the
	// environment. frames reads them for the drill-down.
	holdProfiles    []string
	holdProfileFlag bool
	frames          *frameFetcher

	filterRe *regexp.Regexp
	replay   *replayPlayer // with --replay: the playback clock
	// replayPaused starts the console paused (--at: the instant asked for).
	replayPaused bool
}

func newTopCmd() *cobra.Command {
	t := &topCmd{}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of the tags that keep database connections busy",
		Long: `top ranks tags by occupancy: hold-seconds per second, the number of connections a
tag keeps busy on average over the span covered. A connection is held at three
layers, each a different scarce resource, and top shows each layer's occupancy and
the idle share of that hold side by side (a layer no source watches has no column):

  APP     a connection borrowed from the app's pool (conntag's spans, source otlp)
  PROXY   a ProxySQL backend bound to a client session (proxysql_events, else
          proxysql_processlist)
  SERVER  a MySQL server connection busy in a statement or an open transaction (mysql)

Within a layer one source is the headline and sources are never added up. --layer
chooses the layer that ranks the tags; by default (max) each tag is ranked by the
layer where it holds most, so a hog comes first wherever it holds. LAYER names the
layer that ranked the row; STMT/s, SESSIONS and PINS are that layer's ("-" where
it cannot know: the app's spans tell no sessions held now, only ProxySQL pins). An idle share
is red where it is waste: mostly idle at that layer, and mostly idle in the app too
when the app reports any tag (the server counts the round trips between a
transaction's statements as idle; only the app knows if it was busy then).

How to read a divergence: APP much larger than SERVER is a connection held idle in
the app outside a transaction (a slow call made while holding it); it costs app pool
slots. SERVER with no APP figure is another client, or an app without conntag.

Two rows are not tags: "unknown" is hold whose owner cannot be known (a transaction
whose statements no source saw), "untagged" is hold of statements seen without a
conn_tag comment. Neither is dropped. Holdtime's own polling is never counted.

The header says the span the figures cover (the window once the sources have run
that long) and each source's state: up, degraded (with the reason), DOWN, or
waiting (the OTLP receiver before the app's first span, a poll before its first
answer). Until a layer covers 2s its occupancy shows "warming". If the collector
cannot be reached, top says DOWN and retries every interval. q quits (also Ctrl-C).

It reads a running collector (--collector http://127.0.0.1:9479), or polls ProxySQL's
admin interface and/or MySQL directly with no daemon (--proxysql, --mysql), or reads
a Prometheus that scrapes one or more collectors (--prometheus http://127.0.0.1:9090):
each layer's figures (holdtime_collector_layer_*, the headline source's) summed per
tag over collectors and targets, a ProxySQL or MySQL target watched by two collectors
counted once (the larger), the app layer summed (each app exports to one collector);
the window must hold two scrapes (a 15s scrape interval needs --window 1m). Or it plays
back a recording made by holdtime collect --record DIR (--replay DIR): the proxy
layer as the collector ranked it at each recorded instant, from the processlist
samples, and from the events log when a copy of it is in the target's directory
(DIR/TARGET/events*). In the console, space pauses, left and right step a second,
[ and ] a minute, + and - change the speed (1x, 4x, 16x, 64x), g jumps to a time.
--at opens the console paused at an instant. With --once or --json it prints the
instant --at (default: the end); into a pipe without --at, a table every --interval
of the recording, as fast as it reads. A recording has the proxy layer only.
With a PROXY column comes WAIT: the statements of the tag waiting for a ProxySQL
backend, on average over the span (wait-seconds per second): what the tag suffers,
beside what it holds. The app pool's wait is per pool, not per tag (see conntag's docs).

In the console, Enter on a tag drills into it. With --hold-profile URL (one per app
instance: the hold profile of an app opened with conntag.WithHoldProfile; the demo and
flashsale --metrics-listen serve it at /debug/holdtime/profile), the drill-down also
shows the tag's hottest frames: the app's lines that borrowed the connections the tag
held, by held seconds (cumulative since the app started, and over the last minute),
with their idle share and the holds open now, summed over the apps, read every 5s in
the background; an app that is down, slow (3s) or serves something else is named with
why. The collector's token is never sent to these URLs; credentials in a URL
(user:pass@) go to that app only.

Polling directly, top waits up to --timeout for every source's first answer; a
source that refuses the connection or the login, or names an unknown database,
ends it at once with what to fix. A DSN without NAME= is named by its address
(a unix socket needs NAME=).

Every flag also reads HOLDTIME_ + its name in upper case (HOLDTIME_COLLECTOR,
HOLDTIME_MYSQL, HOLDTIME_PROXYSQL, ...), so DSNs need not appear in the process list;
';' separates the values of a repeatable flag there, so a DSN whose password holds
a ';' goes on the command line instead.`,
		Example: `  holdtime top --collector http://127.0.0.1:9479
  holdtime top --mysql 'monitor:secret@tcp(db:3306)/' --window 10s
  holdtime top --collector http://127.0.0.1:9479 --layer server
  holdtime top --collector http://127.0.0.1:9479 --hold-profile http://app1:9480/debug/holdtime/profile --hold-profile http://app2:9480/debug/holdtime/profile
  holdtime top --replay ./rec --at 14:03:20
  holdtime top --prometheus http://127.0.0.1:9090 --window 1m
  holdtime top --proxysql 'admin:admin@tcp(127.0.0.1:6032)/' --once --json`,
		Args: noArgs("give a running collector with --collector URL, DSNs to poll with --mysql or --proxysql (quote a DSN: its parentheses are special to the shell), --prometheus URL, or a recording with --replay DIR"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			t.out, t.in = cmd.OutOrStdout(), cmd.InOrStdin()
			t.tokenFlag, t.caFlag = cmd.Flags().Changed("token"), cmd.Flags().Changed("ca-cert")
			t.holdProfileFlag = cmd.Flags().Changed("hold-profile")
			if err := flagsFromEnv(cmd); err != nil {
				return err
			}
			if err := t.validate(); err != nil {
				return err
			}
			return t.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&t.collectorURL, "collector", "", "URL of a running collector")
	f.StringVar(&t.prometheus, "prometheus", "", "URL of a Prometheus scraping one or more collectors: per-tag figures summed over collectors and targets, each target counted once")
	f.StringVar(&t.replayDir, "replay", "", "play back a `holdtime collect --record` directory instead of watching live")
	f.StringVar(&t.at, "at", "", "with --replay: the instant to show first (15:04:05 on the recording's day, RFC 3339, or +DURATION from its start); --once and --json print that instant (default: the end)")
	f.StringArrayVar(&t.proxysqlDSNs, "proxysql", nil, "ProxySQL admin DSN to poll directly, [NAME=]user:pass@tcp(host:6032)/ (repeatable)")
	f.StringArrayVar(&t.holdProfiles, "hold-profile", nil, "URL of an app's conntag hold profile, such as http://127.0.0.1:9480"+holdProfilePath+
		" (repeatable: one per app instance): the console's drill-down shows the tag's hottest frames, the app's lines that held its connections; the collector's token is never sent there")
	f.StringArrayVar(&t.mysqlDSNs, "mysql", nil, "MySQL/MariaDB DSN to poll directly, [NAME=]user:pass@tcp(host:3306)/ (repeatable)")
	f.DurationVar(&t.interval, "interval", time.Second, "refresh interval")
	f.DurationVar(&t.timeout, "timeout", 10*time.Second, "how long to wait for the first answer of each source polled directly")
	f.StringVar(&t.window, "window", "1m", "window of the figures: 10s, 1m or 5m")
	f.StringVar(&t.sortKey, "sort", "occupancy", "sort key: "+strings.Join(collector.TopSortKeys, ", "))
	f.StringVar(&t.layer, "layer", collector.LayerMax, "the layer whose figures rank the tags: app, proxy, server, or max (each tag by the layer where it holds most)")
	f.StringVar(&t.filter, "filter", "", "show only tags matching this regular expression")
	f.IntVar(&t.limit, "limit", 0, "show at most this many tags (0: all)")
	f.BoolVar(&t.once, "once", false, "print one table and exit")
	f.BoolVar(&t.jsonOut, "json", false, "print JSON (one document per refresh)")
	f.StringVar(&t.color, "color", "auto", "colour: auto (on a terminal), always, never")
	f.StringVar(&t.token, "token", "", "bearer token of a collector run with --token (better: HOLDTIME_TOKEN); never sent to --prometheus")
	f.StringVar(&t.promToken, "prometheus-token", "", "bearer token of --prometheus (better: HOLDTIME_PROMETHEUS_TOKEN); send it over https off loopback")
	f.StringVar(&t.caCert, "ca-cert", "", "PEM certificate(s) to trust for an https collector, Prometheus or --hold-profile app, besides the system's (a self-signed one)")
	f.SetAnnotation("proxysql", dsnAnnotation, []string{"optional-name"})
	f.SetAnnotation("mysql", dsnAnnotation, []string{"optional-name"})
	return cmd
}

func (t *topCmd) validate() error {
	sources := 0
	if t.collectorURL != "" {
		sources++
		u, err := url.Parse(t.collectorURL)
		switch {
		case err != nil:
			// url.Parse's message quotes the URL, password included.
			return errors.New("--collector: the value given is not a URL: give an http(s) URL such as http://127.0.0.1:9479")
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			return fmt.Errorf("--collector %s is not an http(s) URL such as http://127.0.0.1:9479", shownURL(u))
		}
	}
	if t.prometheus != "" {
		sources++
		if t.tokenFlag {
			return errors.New("--token is the collector's: give Prometheus' own with --prometheus-token (or HOLDTIME_PROMETHEUS_TOKEN)")
		}
		t.token = "" // HOLDTIME_TOKEN is the collector's secret: never sent to Prometheus
		u, err := url.Parse(t.prometheus)
		switch {
		case err != nil:
			return errors.New("--prometheus: the value given is not a URL: give an http(s) URL such as http://127.0.0.1:9090")
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			return fmt.Errorf("--prometheus %s is not an http(s) URL such as http://127.0.0.1:9090", shownURL(u))
		}
	}
	if t.replayDir != "" {
		sources++
		if t.tokenFlag || t.caFlag {
			return errors.New("--token and --ca-cert are for --collector: a replay reads files")
		}
		t.token, t.caCert = "", "" // from the environment, for another use
	}
	if t.replayDir != "" && len(t.holdProfiles) > 0 {
		if t.holdProfileFlag {
			return errors.New("--hold-profile reads a running app: a recording has no hold profile (drop --hold-profile with --replay)")
		}
		t.holdProfiles = nil // from the environment, for live use
	}
	if (t.once || t.jsonOut) && len(t.holdProfiles) > 0 {
		if t.holdProfileFlag {
			return errors.New("--hold-profile feeds the console's drill-down: --once and --json print the table only (drop --hold-profile)")
		}
		t.holdProfiles = nil // from the environment, for the console
	}
	if err := validateHoldProfileURLs(t.holdProfiles); err != nil {
		return err
	}
	if t.replayDir != "" && (t.layer == string(collector.LayerApp) || t.layer == string(collector.LayerServer)) {
		return fmt.Errorf("--layer %s: a recording has the proxy layer only (the MySQL server and the app's spans are not recorded): use --layer proxy or max", t.layer)
	}
	if t.at != "" && t.replayDir == "" {
		return errors.New("--at is a time in a recording: give it with --replay DIR")
	}
	if len(t.proxysqlDSNs)+len(t.mysqlDSNs) > 0 {
		sources++
		// --ca-cert also serves an https --hold-profile.
		httpsApp := anyHTTPS(t.holdProfiles)
		if t.tokenFlag || t.caFlag && !httpsApp {
			return errors.New("--token and --ca-cert are for --collector (--ca-cert also for an https --hold-profile): polling directly needs neither")
		}
		t.token = ""
		if !httpsApp {
			t.caCert = ""
		}
	}
	switch {
	case sources == 0:
		return errors.New("nothing to watch: give --collector URL, --proxysql/--mysql DSNs to poll directly, --prometheus URL, or --replay DIR to play a recording back")
	case sources > 1:
		return errors.New("give one of --collector, --proxysql/--mysql, --prometheus or --replay")
	}
	if _, ok := map[string]bool{"10s": true, "1m": true, "5m": true}[t.window]; !ok {
		return fmt.Errorf("--window %q: use 10s, 1m or 5m", t.window)
	}
	if !slices.Contains(collector.TopLayers, t.layer) {
		return fmt.Errorf("--layer %q: use one of %s", t.layer, strings.Join(collector.TopLayers, ", "))
	}
	if !slices.Contains(collector.TopSortKeys, t.sortKey) {
		return fmt.Errorf("--sort %q: use one of %s", t.sortKey, strings.Join(collector.TopSortKeys, ", "))
	}
	if t.interval < 100*time.Millisecond {
		return fmt.Errorf("--interval %v: use at least 100ms", t.interval)
	}
	if t.timeout <= 0 {
		return fmt.Errorf("--timeout %v: give how long to wait for each source's first answer, such as 10s", t.timeout)
	}
	if t.limit < 0 {
		// As /api/v1/top?limit= does.
		return fmt.Errorf("--limit %d: give 0 to show every tag, or a positive number of tags", t.limit)
	}
	if t.color != "auto" && t.color != "always" && t.color != "never" {
		return fmt.Errorf("--color %q: use auto, always or never", t.color)
	}
	if t.filter != "" {
		re, err := regexp.Compile(t.filter)
		if err != nil {
			return fmt.Errorf("--filter: %w", err)
		}
		t.filterRe = re
	}
	return nil
}

// topSource yields the ranking q asks for and the state of its sources.
type topSource interface {
	top(ctx context.Context, q collector.TopQuery) (collector.TopResponse, error)
}

// minCovered is the span a layer's figures must cover before top shows its
// occupancy and rate: a source credits holds that began before it started
// (a span ends, a running transaction is found), and divided by the first
// milliseconds they read as hundreds of connections.
const minCovered = 2 * time.Second

// Waste, as top and the demo paint it: at least this idle share of a hold
// of at least this occupancy.
const (
	wasteIdleShare = 0.5
	wasteOccupancy = 0.1
)

func (t *topCmd) query() collector.TopQuery {
	w, _ := time.ParseDuration(t.window) // validated
	return collector.TopQuery{Window: w, Layer: t.layer, Sort: t.sortKey}
}

func (t *topCmd) run(ctx context.Context) error {
	var src topSource
	var down string // what a failed answer is, in the header
	if t.replayDir != "" {
		return t.runReplay(ctx)
	}
	if err := t.startFrames(); err != nil { // topframes.go
		return err
	}
	if t.prometheus != "" {
		hc, err := collectorHTTPClient(t.promToken, t.caCert)
		if err != nil {
			return err
		}
		p, err := newPromTop(t.prometheus, hc)
		if err != nil {
			return err
		}
		src, down = p, "prometheus"
	} else if t.collectorURL != "" {
		hc, err := collectorHTTPClient(t.token, t.caCert)
		if err != nil {
			return err
		}
		c, err := collector.NewClient(t.collectorURL, hc)
		if err != nil {
			return err
		}
		src = httpTop{c}
		down = "collector" // the error names its address
	} else {
		local, err := startLocalTop(ctx, t.proxysqlDSNs, t.mysqlDSNs, t.timeout)
		if err != nil {
			return err
		}
		defer local.stop()
		src = local
		// A direct poll has nothing to show until its first samples; a
		// single table gathers for one interval first, and until every
		// layer covers minCovered.
		if err := local.waitFirstPoll(ctx, t.timeout); err != nil {
			return err
		}
		if t.once {
			if err := local.waitCovered(ctx, t.query(), t.interval, max(minCovered, t.interval)+t.timeout); err != nil {
				return err
			}
		}
	}
	term := isTerminal(t.out)
	color := t.color == "always" || t.color == "auto" && term
	live := term && !t.once && !t.jsonOut
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if live {
		if f, ok := t.in.(*os.File); ok && isTerminal(f) {
			// A terminal both ways: the interactive console (keys, drill-down).
			return t.runInteractive(ctx, src, down, f, color)
		}
	}
	keys := false
	if live {
		// Whatever ends top, the terminal is left as it was found: signals
		// end it through ctx, and the deferred calls below restore it.
		var stopSignals context.CancelFunc
		ctx, stopSignals = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
		defer stopSignals()
		if f, ok := t.in.(*os.File); ok && isTerminal(f) {
			if restore, err := rawMode(f); err == nil {
				defer restore()
				stop := make(chan struct{})
				var wg sync.WaitGroup
				wg.Go(func() { readQuitKey(f, stop, cancel) })
				defer wg.Wait()
				defer close(stop)
				keys = true
			}
		}
		fmt.Fprint(t.out, "\x1b[?1049h\x1b[?25l") // alternate screen, hide cursor
		defer fmt.Fprint(t.out, "\x1b[?25h\x1b[?1049l")
	}
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	var lastAnswer time.Time
	for {
		resp, err := src.top(ctx, t.query())
		if ctx.Err() != nil {
			return nil // q, Ctrl-C or a signal: how top ends
		}
		if err != nil && t.once {
			return err
		}
		var b strings.Builder
		if live {
			b.WriteString("\x1b[H\x1b[2J")
		}
		width := 0
		if live {
			width = t.termWidth()
		}
		switch {
		case err != nil && t.jsonOut:
			doc, _ := json.Marshal(map[string]any{"at": time.Now().UTC(), "error": err.Error()})
			b.Write(append(doc, '\n'))
		case err != nil:
			// Losing the collector is not the end of top: it says so, and
			// asks again at the next tick.
			t.renderDown(&b, down, err, lastAnswer, width, color, keys)
		case t.jsonOut:
			lastAnswer = time.Now()
			resp.Rows = t.arrange(resp.Rows)
			resp.Window, resp.Sort = t.window, t.sortKey
			doc, err := json.Marshal(resp)
			if err != nil {
				return err
			}
			b.Write(append(doc, '\n'))
		default:
			lastAnswer = time.Now()
			t.render(&b, resp, width, color, keys)
		}
		if _, err := io.WriteString(t.out, b.String()); err != nil {
			return err
		}
		if t.once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (t *topCmd) termWidth() int {
	if t.width != nil {
		return t.width()
	}
	return termWidth(t.out)
}

// arrange filters, sorts and cuts the rows.
func (t *topCmd) arrange(rows []collector.TopRow) []collector.TopRow {
	if t.filterRe != nil {
		rows = slices.DeleteFunc(rows, func(r collector.TopRow) bool { return !t.filterRe.MatchString(r.Tag) })
	}
	collector.SortTop(rows, t.sortKey)
	if t.limit > 0 && len(rows) > t.limit {
		rows = rows[:t.limit]
	}
	return rows
}

// render draws one refresh: what the figures cover and where they come
// from, then the table.
func (t *topCmd) render(b *strings.Builder, resp collector.TopResponse, width int, color, keys bool) {
	view := newTopView(resp)
	rows := t.arrange(resp.Rows)
	clock := time.Now().Format("15:04:05")
	if t.replay != nil {
		clock = "replay " + t.replay.rec.describeAt(resp.At)
	}
	title := fmt.Sprintf("holdtime top  window %s, covered %s  ranked by %s layer, %s  %d tags  %s", t.window,
		view.covered(), cmp.Or(resp.Layer, t.layer), t.sortKey, len(rows), clock)
	if keys {
		title += "  (q quits)"
	}
	printLine(b, width, color, plain(title))
	printLine(b, width, color, sourcesLine(resp.Sources)...)
	view.table(rows).write(b, width, color)
	if len(rows) == 0 {
		printLine(b, width, color, plain("(no tag has held a connection in the window)"))
	}
	if view.stale {
		printLine(b, width, color, plain("~ stale: a source of that layer is down; its figures are as last reported"))
	}
}

// renderDown draws a refresh whose answer failed.
func (t *topCmd) renderDown(b *strings.Builder, what string, err error, last time.Time, width int, color, keys bool) {
	title := fmt.Sprintf("holdtime top  window %s  %s", t.window, time.Now().Format("15:04:05"))
	if keys {
		title += "  (q quits)"
	}
	printLine(b, width, color, plain(title))
	since := "no answer yet"
	if !last.IsZero() {
		since = "last answer at " + last.Format("15:04:05")
	}
	printLine(b, width, color, plain(what+" "), cell{"DOWN", "31"},
		plain(fmt.Sprintf(": %v; retrying every %v (%s)", err, t.interval, since)))
}

// sourcesLine lists every source with its state: up, degraded (why),
// DOWN (why), waiting (an OTLP receiver before the app's first span, a
// poll before its first answer).
func sourcesLine(sources []collector.SourceStatus) []cell {
	cells := []cell{plain("sources:")}
	if len(sources) == 0 {
		cells = append(cells, plain(" none"))
	}
	for i, s := range sources {
		if i > 0 {
			cells = append(cells, plain(","))
		}
		cells = append(cells, plain(" "+s.Target+"/"+string(s.Source)+" "))
		state := cmp.Or(s.State, map[bool]string{true: collector.StateUp, false: collector.StateDown}[s.Up])
		switch state {
		case collector.StateDown:
			cells = append(cells, cell{"DOWN", "31"})
		case collector.StateDegraded:
			cells = append(cells, cell{"degraded", "33"})
		default:
			cells = append(cells, plain(state))
		}
		if state != collector.StateUp && s.Reason != "" {
			cells = append(cells, plain(" ("+s.Reason+")"))
		}
		if s.Layer != "" && !s.Headline {
			cells = append(cells, plain(" (cross-check)"))
		}
		if s.JoinOnly {
			cells = append(cells, plain(" (join only)"))
		}
	}
	return cells
}

// topView draws rows of one TopResponse, as top and the demo show them.
type topView struct {
	resp   collector.TopResponse
	layers []collector.Layer // the layers the answer has, in display order
	appSaw bool              // the app layer has figures for some tag
	stale  bool              // a drawn figure is stale
}

func newTopView(resp collector.TopResponse) *topView {
	v := &topView{resp: resp}
	for _, l := range collector.Layers {
		if resp.Layers[l] != nil {
			v.layers = append(v.layers, l)
		}
	}
	if len(v.layers) == 0 {
		v.layers = collector.Layers
	}
	for _, r := range resp.Rows {
		if r.Layers[collector.LayerApp] != nil {
			v.appSaw = true
		}
	}
	return v
}

// covered says the span the figures actually cover: one figure when every
// layer covers the same, else each layer's.
func (v *topView) covered() string {
	var parts []string
	same := true
	var first float64 = -1
	for _, l := range v.layers {
		ls := v.resp.Layers[l]
		if ls == nil {
			continue
		}
		if first < 0 {
			first = ls.CoveredSeconds
		} else if math.Abs(ls.CoveredSeconds-first) >= 0.5 {
			same = false
		}
		parts = append(parts, string(l)+" "+seconds(ls.CoveredSeconds))
	}
	if same || len(parts) == 0 {
		return seconds(v.resp.CoveredSeconds)
	}
	return strings.Join(parts, ", ")
}

func seconds(s float64) string {
	if s < 10 {
		return fmt.Sprintf("%.1fs", s)
	}
	return fmt.Sprintf("%.0fs", s)
}

// warming reports whether layer l covers too short a span for rates.
func (v *topView) warming(l collector.Layer) bool {
	ls := v.resp.Layers[l]
	return ls != nil && ls.CoveredSeconds < minCovered.Seconds()
}

// wasteAt reports whether r is painted as waste at layer l: that layer's
// figures are mostly idle, and the app, when it sees any tag, confirms it
// (its own figures for r are mostly idle too). The server and the proxy
// count the time between a transaction's statements as idle, round trips
// included; only the app knows whether it was busy then. With no app
// figures at all (no conntag app sends spans), a layer's own figures are
// all there is.
func (v *topView) wasteAt(r collector.TopRow, l collector.Layer) bool {
	idleWaste := func(l collector.Layer) bool {
		lf := r.Layers[l]
		return lf != nil && !v.warming(l) && lf.IdleShare >= wasteIdleShare && lf.Occupancy >= wasteOccupancy
	}
	if !idleWaste(l) {
		return false
	}
	return l == collector.LayerApp || !v.appSaw || idleWaste(collector.LayerApp)
}

// table lays out rows: per layer its occupancy and idle share, then the
// ranked layer's name, statements per second, sessions and pins. The first
// tag, the top holder, is bold.
func (v *topView) table(rows []collector.TopRow) *table {
	tb := &table{left: map[int]bool{0: true}}
	head := []cell{plain("TAG")}
	for _, l := range v.layers {
		head = append(head, plain(strings.ToUpper(string(l))), plain("IDLE"))
		if l == collector.LayerProxy {
			head = append(head, plain("WAIT"))
		}
	}
	head = append(head, plain("LAYER"), plain("STMT/s"), plain("SESSIONS"), plain("PINS"))
	tb.left[len(head)-4] = true
	tb.add(head...)
	for i, r := range rows {
		tag := plain(r.Tag)
		if i == 0 {
			tag.style = "1"
		}
		cells := []cell{tag}
		for _, l := range v.layers {
			lf := r.Layers[l]
			switch {
			case lf == nil:
				cells = append(cells, plain("-"), plain("-"))
				if l == collector.LayerProxy {
					cells = append(cells, plain("-"))
				}
				continue
			case v.warming(l):
				cells = append(cells, plain("warming"))
			default:
				occ := fmt.Sprintf("%.2f", lf.Occupancy)
				if lf.Stale {
					occ += "~"
					v.stale = true
				}
				cells = append(cells, plain(occ))
			}
			idle := plain("-")
			if lf.HoldSeconds > 0 {
				idle = plain(fmt.Sprintf("%.0f%%", 100*lf.IdleShare))
			}
			if v.wasteAt(r, l) {
				idle.style = "31" // mostly idle while held, and the app agrees: the waste
			}
			cells = append(cells, idle)
			if l == collector.LayerProxy {
				// Statements waiting for a backend, on average: a rate,
				// like occupancy, over the same span.
				wait := "warming"
				if !v.warming(l) {
					wait = fmt.Sprintf("%.2f", lf.WaitSeconds/max(lf.CoveredSeconds, 1e-3))
				}
				cells = append(cells, plain(wait))
			}
		}
		rate := "warming"
		switch {
		case r.Source == collector.SourceProxySQLProcesslist:
			rate = "-" // sampling sees sessions, not every statement they ran
		case !v.warming(r.Layer):
			rate = fmt.Sprintf("%.1f", r.StatementsPerSecond)
			if r.StatementsLowerBound {
				rate = "≥" + rate
			}
		}
		// The app's spans tell no sessions held now, and only ProxySQL pins
		// a backend to a session: there the figure is unknown, not zero.
		sessions, pins := "-", "-"
		if r.Layer != collector.LayerApp {
			sessions = strconv.Itoa(r.Sessions)
		}
		if r.Layer == collector.LayerProxy {
			pins = strconv.Itoa(r.PinnedSessions)
		}
		cells = append(cells, plain(string(r.Layer)), plain(rate), plain(sessions), plain(pins))
		tb.add(cells...)
	}
	return tb
}

// httpTop reads a running collector's /api/v1/top.
type httpTop struct{ c *collector.Client }

func (h httpTop) top(ctx context.Context, q collector.TopQuery) (collector.TopResponse, error) {
	return h.c.Top(ctx, q)
}

func (h httpTop) tagDetail(ctx context.Context, tag string) (collector.TagDetail, error) {
	return h.c.TagDetail(ctx, tag)
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
