package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/internal/termtext"
)

// analyzeCmd reports per-tag backend hold from what ProxySQL already wrote.
type analyzeCmd struct {
	out, errOut io.Writer

	processlist []string
	from, to    string
	tags        []string
	users       []string
	hostgroups  []int
	jsonOut     bool
	format      string
	top         int
}

func newAnalyzeCmd() *cobra.Command {
	a := &analyzeCmd{}
	cmd := &cobra.Command{
		Use:   "analyze [flags] EVENTS_LOG...",
		Short: "Report per-tag backend hold from ProxySQL's events log and recorded processlist samples",
		Long: `analyze reads ProxySQL's JSON events log (mysql-eventslog_format=2; plain or
gzip, several files oldest first) and/or processlist recordings, and reports per
tag how long backend connections were held: hold seconds and share, transactions,
statements, hold p50/p99/max, idle share, pins, and the longest holds.

A session pinned to its backend (a user variable, a lock, a temporary table) after its
last statement keeps it until it disconnects, which the events log does not record: such
holds are listed apart, "pinned until the session ended", with no end and in no
percentile. Input with no valid event, or nothing that matches --tag, --user,
--hostgroup, --from and --to, is an error that says so (exit status 1).`,
		Example: `  holdtime analyze /var/lib/proxysql/events.log.*
  holdtime analyze --tag checkout_completion --from 2026-12-02T08:00:00Z events.json.gz
  holdtime analyze --processlist rec/processlist.tsv --format markdown events.json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			a.out = cmd.OutOrStdout()
			a.errOut = cmd.ErrOrStderr()
			return a.run(cmd.Context(), args)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&a.processlist, "processlist", nil, "processlist recording to read (repeatable)")
	f.StringVar(&a.from, "from", "", "start of the time window, RFC 3339 (e.g. 2026-12-02T08:41:00Z)")
	f.StringVar(&a.to, "to", "", "end of the time window, RFC 3339")
	f.StringSliceVar(&a.tags, "tag", nil, "only these tags (repeatable or comma-separated)")
	f.StringSliceVar(&a.users, "user", nil, "only these ProxySQL users")
	f.IntSliceVar(&a.hostgroups, "hostgroup", nil, "only these hostgroups")
	f.BoolVar(&a.jsonOut, "json", false, "print JSON (same as --format json)")
	f.StringVar(&a.format, "format", "table", "output format: table, markdown or json")
	f.IntVar(&a.top, "top", 5, "longest holds to list per tag and overall")
	return cmd
}

// config validates the options and turns them into the collector's config.
func (a *analyzeCmd) config(args []string) (collector.AnalyzeConfig, error) {
	cfg := collector.AnalyzeConfig{EventsLogs: args, ProcesslistFiles: a.processlist, LongestHolds: a.top}
	if len(args) == 0 && len(a.processlist) == 0 {
		return cfg, errors.New("no input: give ProxySQL events log files as arguments, or --processlist FILE")
	}
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
	if cfg.Filter.From, err = parseWindowTime("--from", a.from); err != nil {
		return cfg, err
	}
	if cfg.Filter.To, err = parseWindowTime("--to", a.to); err != nil {
		return cfg, err
	}
	if !cfg.Filter.From.IsZero() && !cfg.Filter.To.IsZero() && !cfg.Filter.From.Before(cfg.Filter.To) {
		return cfg, fmt.Errorf("--from %s is not before --to %s: swap them", a.from, a.to)
	}
	cfg.Filter.Tags, cfg.Filter.Users, cfg.Filter.Hostgroups = a.tags, a.users, a.hostgroups
	return cfg, nil
}

func parseWindowTime(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: give an RFC 3339 time such as 2026-12-02T08:41:00Z", flag, v)
	}
	return t, nil
}

func (a *analyzeCmd) run(ctx context.Context, args []string) error {
	cfg, err := a.config(args)
	if err != nil {
		return err
	}
	rep, err := collector.Analyze(ctx, cfg)
	if err != nil {
		return err
	}
	if rep.Partial {
		fmt.Fprintln(a.errOut, "holdtime: interrupted: the report covers only the input read until then (marked PARTIAL)")
	}
	for _, tag := range a.tags {
		if rep.Tag(tag) == nil {
			fmt.Fprintf(a.errOut, "holdtime: warning: no hold of tag %s in the input\n", termtext.Line(tag))
		}
	}
	if rep.EventsLog != nil {
		for _, w := range rep.EventsLog.Warnings {
			fmt.Fprintf(a.errOut, "holdtime: warning: %s\n", termtext.Line(w))
		}
		if n := rep.EventsLog.Malformed; n > 0 {
			// Where the line is and why it was skipped, on one line.
			fmt.Fprintf(a.errOut, "holdtime: warning: skipped %d malformed events log lines (first: %s)\n", n,
				termtext.Line(rep.EventsLog.MalformedLines[0].String()))
		}
	}
	if a.format == "json" {
		return rep.WriteJSON(a.out) // JSON escapes control characters itself
	}
	// The input's users, tags and statements reach the terminal with their
	// control characters escaped.
	w := termtext.NewWriter(a.out)
	write := rep.WriteTable
	if a.format == "markdown" {
		write = rep.WriteMarkdown
	}
	if err := write(w); err != nil {
		return err
	}
	return w.Flush()
}
