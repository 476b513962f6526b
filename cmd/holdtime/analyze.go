package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/internal/termtext"
)

// analyzeCmd reports backend hold per group (tag, user, host, hostgroup,
// digest) from what ProxySQL already wrote, as pt-query-digest does for
// query time.
type analyzeCmd struct {
	in          io.Reader
	out, errOut io.Writer
	now         func() time.Time

	processlist  []string
	since, until string
	tz           string
	groupBy      []string
	tags         []string
	users        []string
	hostgroups   []int
	jsonOut      bool
	format       string
	top          int
}

func newAnalyzeCmd() *cobra.Command { return newAnalyzeCommand(&analyzeCmd{now: time.Now}) }

// newAnalyzeCommand binds a's flags; tests pass their own clock.
func newAnalyzeCommand(a *analyzeCmd) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "analyze [flags] INPUT...",
		Short: "Profile backend hold per tag (user, host, hostgroup, digest) from ProxySQL's events log and recordings",
		Long: `analyze reads ProxySQL's JSON events log (mysql-eventslog_format=2, plain or gzip,
detected by content) and reports how long backend connections were held, like
pt-query-digest: a profile table ranking the groups by hold seconds, then each
group's longest holds, top digests, users and client hosts, and hold histogram.

An INPUT is a file, - for standard input, or a 'holdtime collect --record'
directory (its processlist.tsv recordings, and any events log copied into it).
Files are read oldest first whatever their order. The same events read twice
(one file given twice, through a symlink or as a copy, or rotated logs that
overlap) count once, and the report says which input repeated which.

A hold is a transaction (BEGIN to COMMIT) or an autocommit statement; its digest
is that of its first statement other than BEGIN/COMMIT. Without an events log,
holds are estimated from processlist samples. Input with nothing that matches
the filters is an error that says so (exit status 1).`,
		Example: `  holdtime analyze /var/lib/proxysql/events.json.*
  zcat events.json.*.gz | holdtime analyze --since 2h -
  holdtime analyze --group-by tag,user --since '2026-12-02 08:41:00' --until 2026-12-02T09:00:00Z events.json
  holdtime analyze --json ./rec`,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.in = cmd.InOrStdin()
			a.out = cmd.OutOrStdout()
			a.errOut = cmd.ErrOrStderr()
			return a.run(cmd.Context(), args)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&a.processlist, "processlist", nil, "processlist recording to read besides the inputs (repeatable)")
	f.StringVar(&a.since, "since", "", "only hold after this: 10m, 2h, 1d (before now), RFC 3339, 'YYYY-MM-DD HH:MM:SS[.ffffff]' as ProxySQL logs it, or Unix microseconds")
	f.StringVar(&a.until, "until", "", "only hold before this (same forms as --since)")
	f.StringVar(&a.since, "from", "", "same as --since")
	f.StringVar(&a.until, "to", "", "same as --until")
	_ = f.MarkHidden("from")
	_ = f.MarkHidden("to")
	f.StringVar(&a.tz, "tz", "UTC", "time zone of times without one in --since/--until (ProxySQL logs its host's local time): UTC, Local or an IANA name")
	f.StringSliceVar(&a.groupBy, "group-by", []string{"tag"}, "group by these, comma-separated: tag, user, host (client host), hostgroup, digest")
	f.StringSliceVar(&a.tags, "tag", nil, "only these tags (repeatable or comma-separated)")
	f.StringSliceVar(&a.users, "user", nil, "only these ProxySQL users")
	f.IntSliceVar(&a.hostgroups, "hostgroup", nil, "only these hostgroups")
	f.BoolVar(&a.jsonOut, "json", false, "print JSON (same as --format json)")
	f.StringVar(&a.format, "format", "table", "output format: table, markdown or json")
	f.IntVar(&a.top, "top", 5, "entries per detail list (longest holds, digests, users, hosts)")
	return cmd
}

// config validates the options.
func (a *analyzeCmd) config() (digestConfig, error) {
	cfg := digestConfig{tags: a.tags, users: a.users, hostgroups: a.hostgroups, top: a.top}
	if a.jsonOut {
		if a.format != "table" && a.format != "json" {
			return cfg, fmt.Errorf("--json and --format %s disagree: give one of them", a.format)
		}
		a.format = "json"
	}
	switch a.format {
	case "table", "markdown", "json":
	default:
		return cfg, fmt.Errorf("unknown --format %q: use table, markdown or json", a.format)
	}
	if a.top < 1 {
		return cfg, fmt.Errorf("--top %d: give at least 1", a.top)
	}
	var err error
	if cfg.groupBy, err = parseGroupBy(a.groupBy); err != nil {
		return cfg, err
	}
	loc := time.UTC
	if a.tz != "" && a.tz != "UTC" {
		if loc, err = time.LoadLocation(a.tz); err != nil {
			return cfg, fmt.Errorf("--tz %q: %w: give UTC, Local or an IANA name such as Europe/Paris", a.tz, err)
		}
	}
	now := a.now()
	if cfg.from, err = parseWhen("--since", a.since, now, loc); err != nil {
		return cfg, err
	}
	if cfg.to, err = parseWhen("--until", a.until, now, loc); err != nil {
		return cfg, err
	}
	if !cfg.from.IsZero() && !cfg.to.IsZero() && !cfg.from.Before(cfg.to) {
		return cfg, fmt.Errorf("--since %s is not before --until %s: swap them", a.since, a.until)
	}
	return cfg, nil
}

func (a *analyzeCmd) run(ctx context.Context, args []string) error {
	cfg, err := a.config()
	if err != nil {
		return err
	}
	if len(args) == 0 && len(a.processlist) == 0 {
		return errors.New("no input: give ProxySQL events log files, - for standard input, a `collect --record` directory, or --processlist FILE")
	}
	in, err := resolveInputs(args, a.processlist)
	if err != nil {
		return err
	}
	rep, err := analyzeRun(ctx, cfg, in, a.in)
	if err != nil {
		return err
	}
	if rep.Partial {
		fmt.Fprintln(a.errOut, "holdtime: interrupted: the report covers only the input read until then (marked PARTIAL)")
	}
	for _, n := range rep.Notes {
		if strings.HasPrefix(n, "duplicate input") || strings.HasPrefix(n, "overlapping input") || strings.Contains(n, "events logs of") {
			fmt.Fprintf(a.errOut, "holdtime: warning: %s\n", termtext.Line(n))
		}
	}
	for _, src := range rep.Inputs {
		for _, w := range src.Warnings {
			fmt.Fprintf(a.errOut, "holdtime: warning: %s\n", termtext.Line(w))
		}
		if src.Malformed > 0 {
			fmt.Fprintf(a.errOut, "holdtime: warning: %s: skipped %d malformed lines\n", termtext.Line(src.Name), src.Malformed)
		}
	}
	if a.format == "json" {
		return rep.writeJSON(a.out) // JSON escapes control characters itself
	}
	ew := &errWriter{w: a.out}
	rep.writeText(ew, a.format == "markdown")
	return ew.err
}

// analyzeRun reads the inputs, events and samples merged in time order so
// that a sample sees its session's state in the events log, and digests
// them.
func analyzeRun(ctx context.Context, cfg digestConfig, in analyzeInputs, stdin io.Reader) (*analyzeReport, error) {
	dg := newDigester(cfg)
	attr := collector.NewAttributor(collector.AttributorConfig{}, dg.addHold)
	var events *eventStream
	if len(in.events) > 0 {
		events = newEventStream(ctx, in.events, stdin, collector.EventsLogConfig{})
		defer events.Close()
	}
	var samples *collector.ProcesslistReader
	var sampler *collector.SampleAttributor
	if len(in.processlist) > 0 {
		var err error
		if samples, err = collector.OpenProcesslist(in.processlist); err != nil {
			return nil, err
		}
		defer samples.Close()
		var tagOf func(uint64) (string, bool)
		emit := dg.addSample
		if events != nil {
			tagOf = attr.TagOf
			emit = func(*collector.SampledHold) {} // the events log has the exact holds
		}
		sampler = collector.NewSampleAttributor(collector.ProcesslistConfig{}, tagOf, emit)
	}
	haveEvent := events != nil && events.Next()
	haveRow := samples != nil && samples.Next()
	for haveEvent || haveRow {
		if haveRow && (!haveEvent || samples.Row().SampleTime.UnixMicro() <= events.Event().EndUS) {
			sampler.Add(samples.Row())
			haveRow = samples.Next()
			continue
		}
		dg.addEvent(events.Event())
		attr.Add(events.Event())
		haveEvent = events.Next()
	}
	interrupted := false
	if events != nil {
		if err := events.Err(); err != nil {
			if ctx.Err() == nil {
				return nil, err
			}
			interrupted = true
		}
	}
	if samples != nil {
		if err := samples.Err(); err != nil && ctx.Err() == nil {
			return nil, err
		}
		sampler.Flush()
	}
	attr.Flush()
	rep := dg.report(cfg.top)
	rep.Partial = interrupted || ctx.Err() != nil
	rep.Notes = append(rep.Notes, in.notes...)
	rep.HoldsFrom = "events_log"
	var evCount, rows int64
	if events != nil {
		events.Close()
		for _, src := range events.sources {
			st := src.stats
			evCount += st.Events
			s := analyzeSource{Name: src.name, Kind: "events_log", Lines: st.Lines, Events: st.Events, Malformed: st.Malformed,
				DuplicateEvents: src.dups, DuplicateOf: slices.Sorted(maps.Keys(src.dupOf)), Warnings: st.Warnings}
			if s.DuplicateOf == nil {
				s.DuplicateOf = []string{}
			}
			if s.Warnings == nil {
				s.Warnings = []string{}
			}
			rep.Inputs = append(rep.Inputs, s)
		}
		rep.Notes = append(rep.Notes, events.duplicateNotes()...)
	}
	if samples != nil {
		st := sampler.Stats()
		rows = st.Rows
		mal, _ := samples.Malformed()
		rep.Inputs = append(rep.Inputs, analyzeSource{Name: strings.Join(in.processlist, ", "), Kind: "processlist",
			Lines: st.Rows + mal, Events: st.Rows, Malformed: mal, DuplicateOf: []string{}, Warnings: []string{}})
		if events == nil {
			rep.HoldsFrom = "processlist"
			rep.Notes = append(rep.Notes, fmt.Sprintf("holds estimated from %d processlist samples (sampling error about ±20%% on short transactions; no holds count, digest or client host)", st.Samples))
		} else {
			rep.Notes = append(rep.Notes, fmt.Sprintf("processlist: %d samples, %.3f s of sampled backend hold (a cross-check; hold seconds come from the events log)", st.Samples, st.HeldSeconds))
		}
	}
	if rep.Partial {
		rep.Notes = append([]string{fmt.Sprintf("PARTIAL: interrupted after %d events; the report covers the input read until then", evCount)}, rep.Notes...)
	}
	if len(rep.Groups) == 0 {
		if rep.Partial {
			return nil, fmt.Errorf("interrupted before any hold was read: %w", context.Canceled)
		}
		if evCount == 0 && rows == 0 {
			return nil, fmt.Errorf("%w: the input has no valid event or sample: is it ProxySQL's JSON events log (mysql-eventslog_format=2)?", collector.ErrNothingToReport)
		}
		window := ""
		if !cfg.from.IsZero() || !cfg.to.IsZero() {
			window = " between " + fmtWhen(cfg.from) + " and " + fmtWhen(cfg.to) + " UTC"
		}
		return nil, fmt.Errorf("%w: no hold in the input%s matches the filter (tags seen: %s)", collector.ErrNothingToReport,
			window, termtext.Line(strings.Join(slices.Sorted(maps.Keys(dg.seenTags)), ", ")))
	}
	return rep, nil
}

// errWriter keeps the first write error so renderers can write freely.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, nil
}
