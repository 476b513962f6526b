package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/collector"
)

// topCmd shows the tags that keep connections busy, refreshed like top.
type topCmd struct {
	out io.Writer

	collectorURL string
	proxysqlDSNs []string
	mysqlDSNs    []string
	interval     time.Duration
	timeout      time.Duration
	window       string
	sortKey      string
	filter       string
	limit        int
	once         bool
	jsonOut      bool
	color        string

	filterRe *regexp.Regexp
}

func newTopCmd() *cobra.Command {
	t := &topCmd{}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of the tags that keep database connections busy",
		Long: `top ranks tags by occupancy: hold-seconds per second, the number of connections a
tag keeps busy on average over the window. Next to it: the share of that hold spent
idle (a borrowed connection doing nothing), active seconds, statements per second,
sessions holding a connection now, ProxySQL multiplexing pins, and the source of the
figures (proxysql_events, proxysql_processlist, mysql, otlp).

It reads a running collector (--collector http://127.0.0.1:9479), or polls ProxySQL's
admin interface and/or MySQL directly with no daemon (--proxysql, --mysql).
Wait time per tag is not shown: no source can see it per tag (see conntag's docs).

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
  holdtime top --proxysql 'admin:admin@tcp(127.0.0.1:6032)/' --once --json`,
		Args: noArgs("give a running collector with --collector URL, or DSNs to poll with --mysql or --proxysql (quote a DSN: its parentheses are special to the shell)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			t.out = cmd.OutOrStdout()
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
	f.StringArrayVar(&t.proxysqlDSNs, "proxysql", nil, "ProxySQL admin DSN to poll directly, [NAME=]user:pass@tcp(host:6032)/ (repeatable)")
	f.StringArrayVar(&t.mysqlDSNs, "mysql", nil, "MySQL/MariaDB DSN to poll directly, [NAME=]user:pass@tcp(host:3306)/ (repeatable)")
	f.DurationVar(&t.interval, "interval", time.Second, "refresh interval")
	f.DurationVar(&t.timeout, "timeout", 10*time.Second, "how long to wait for the first answer of each source polled directly")
	f.StringVar(&t.window, "window", "1m", "window of the figures: 10s, 1m or 5m")
	f.StringVar(&t.sortKey, "sort", "occupancy", "sort key: "+strings.Join(collector.TopSortKeys, ", "))
	f.StringVar(&t.filter, "filter", "", "show only tags matching this regular expression")
	f.IntVar(&t.limit, "limit", 0, "show at most this many tags (0: all)")
	f.BoolVar(&t.once, "once", false, "print one table and exit")
	f.BoolVar(&t.jsonOut, "json", false, "print JSON (one document per refresh)")
	f.StringVar(&t.color, "color", "auto", "colour: auto (on a terminal), always, never")
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
			return fmt.Errorf("--collector %s is not an http(s) URL such as http://127.0.0.1:9479", u.Redacted())
		}
	}
	if len(t.proxysqlDSNs)+len(t.mysqlDSNs) > 0 {
		sources++
	}
	switch {
	case sources == 0:
		return errors.New("nothing to watch: give --collector URL, or --proxysql/--mysql DSNs to poll directly")
	case sources > 1:
		return errors.New("give either --collector or --proxysql/--mysql, not both")
	}
	if _, ok := map[string]bool{"10s": true, "1m": true, "5m": true}[t.window]; !ok {
		return fmt.Errorf("--window %q: use 10s, 1m or 5m", t.window)
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

// topSource yields the current ranking and the state of its sources.
type topSource interface {
	top(ctx context.Context, window string) (collector.TopResponse, error)
}

func (t *topCmd) run(ctx context.Context) error {
	var src topSource
	if t.collectorURL != "" {
		u, _ := url.Parse(strings.TrimRight(t.collectorURL, "/")) // validated
		src = &httpTop{base: u.String(), shown: u.Redacted(), client: &http.Client{Timeout: 5 * time.Second}}
	} else {
		local, err := startLocalTop(ctx, t.proxysqlDSNs, t.mysqlDSNs, t.timeout)
		if err != nil {
			return err
		}
		defer local.stop()
		src = local
		// A direct poll has nothing to show until its first samples; a
		// single table gathers for one interval first.
		if err := local.waitFirstPoll(ctx, t.timeout); err != nil {
			return err
		}
		if t.once {
			select {
			case <-time.After(t.interval):
			case <-ctx.Done():
				return nil
			}
		}
	}
	term := isTerminal(t.out)
	color := t.color == "always" || t.color == "auto" && term
	live := term && !t.once && !t.jsonOut
	if live {
		fmt.Fprint(t.out, "\x1b[?1049h\x1b[?25l") // alternate screen, hide cursor
		defer fmt.Fprint(t.out, "\x1b[?25h\x1b[?1049l")
	}
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		resp, err := src.top(ctx, t.window)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		resp.Rows = t.arrange(resp.Rows)
		resp.Window, resp.Sort = t.window, t.sortKey
		if live {
			fmt.Fprint(t.out, "\x1b[H\x1b[2J")
		}
		if t.jsonOut {
			if err := json.NewEncoder(t.out).Encode(resp); err != nil {
				return err
			}
		} else if err := t.render(resp, color); err != nil {
			return err
		}
		if t.once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // Ctrl-C is how top ends
		case <-tick.C:
		}
	}
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

func (t *topCmd) render(resp collector.TopResponse, color bool) error {
	rows := resp.Rows
	secs := map[string]float64{"10s": 10, "1m": 60, "5m": 300}[t.window]
	var sources []string
	for _, s := range resp.Sources {
		state := "up"
		if !s.Up {
			state = "DOWN"
			if color {
				state = "\x1b[31mDOWN\x1b[0m"
			}
		}
		sources = append(sources, s.Target+"/"+string(s.Source)+" "+state)
	}
	fmt.Fprintf(t.out, "holdtime top  window %s  sorted by %s  %d tags  %s\nsources: %s\n", t.window, t.sortKey, len(rows),
		time.Now().Format("15:04:05"), strings.Join(sources, ", "))
	tw := tabwriter.NewWriter(t.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TAG\tOCCUPANCY\tIDLE\tHOLD s\tACTIVE s\tSTMT/s\tSESSIONS\tPINS\tSOURCE\t")
	for i, r := range rows {
		tag := r.Tag
		source := string(r.Source)
		if r.Stale {
			source += " (stale)"
		}
		idle := fmt.Sprintf("%.0f%%", 100*r.IdleShare)
		if color && r.IdleShare >= 0.5 && r.Occupancy >= 0.1 {
			idle = "\x1b[31m" + idle + "\x1b[0m" // mostly idle while held: the waste
		}
		if color && i == 0 {
			tag = "\x1b[1m" + tag + "\x1b[0m"
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s\t%.1f\t%.1f\t%.1f\t%d\t%d\t%s\t\n", tag, r.Occupancy, idle, r.HoldSeconds,
			r.ActiveSeconds, r.Statements/secs, r.Sessions, r.PinnedSessions, source)
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(no tag has held a connection in the window)\t\t\t\t\t\t\t\t\t")
	}
	return tw.Flush()
}

// httpTop reads a running collector's /api/v1/top.
type httpTop struct {
	base   string // the URL as given: its userinfo, if any, is the collector's basic auth
	shown  string // base without its password, for messages
	client *http.Client
}

func (h *httpTop) top(ctx context.Context, window string) (collector.TopResponse, error) {
	var doc collector.TopResponse
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+"/api/v1/top?window="+url.QueryEscape(window), nil)
	if err != nil {
		return doc, err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return doc, ctx.Err()
		}
		return doc, fmt.Errorf("cannot reach the collector at %s: is `holdtime collect` running there? (%v)", h.shown, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg := strings.TrimSpace(string(body))
		var apiErr struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &apiErr) == nil && apiErr.Error != "" {
			msg = apiErr.Error
		}
		return doc, fmt.Errorf("collector at %s answered %s: %s", h.shown, resp.Status, msg)
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return doc, fmt.Errorf("collector at %s sent something that is not holdtime's /api/v1/top JSON: %v", h.shown, err)
	}
	return doc, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
