package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdtime/holdtime/internal/termtext"
)

// analyzeSchema names the layout of `analyze --json`. It changes when a
// field is renamed, removed or changes meaning, not when one is added.
const analyzeSchema = "holdtime.analyze/v2"

// analyzeReport is what `holdtime analyze` prints; its JSON form is the
// documented schema (README, "holdtime analyze").
type analyzeReport struct {
	Schema           string          `json:"schema"`
	Partial          bool            `json:"partial"`
	From             time.Time       `json:"from"`
	To               time.Time       `json:"to"`
	GroupBy          []string        `json:"group_by"`
	TotalHoldSeconds float64         `json:"total_hold_seconds"`
	HoldsFrom        string          `json:"holds_from"` // events_log or processlist
	Groups           []analyzeGroup  `json:"groups"`
	Inputs           []analyzeSource `json:"inputs"`
	Notes            []string        `json:"notes"`
}

type analyzeGroup struct {
	Rank                  int               `json:"rank"`
	Key                   map[string]string `json:"key"`
	HoldSeconds           float64           `json:"hold_seconds"`
	Share                 float64           `json:"share"`
	Holds                 int64             `json:"holds"`
	Transactions          int64             `json:"transactions"`
	Statements            int64             `json:"statements"`
	MeanSeconds           float64           `json:"hold_mean_seconds"`
	P95Seconds            float64           `json:"hold_p95_seconds"`
	MaxSeconds            float64           `json:"hold_max_seconds"`
	IdleSeconds           float64           `json:"idle_seconds"`
	IdleShare             float64           `json:"idle_share"`
	PinnedUntilDisconnect int64             `json:"pinned_until_disconnect"`
	Samples               int64             `json:"processlist_samples,omitempty"`
	Histogram             []analyzeBucket   `json:"histogram"`
	Longest               []analyzeHold     `json:"longest_holds"`
	Digests               []analyzeDigest   `json:"top_digests"`
	Users                 []analyzeName     `json:"users"`
	Hosts                 []analyzeName     `json:"hosts"`
}

type analyzeBucket struct {
	Le    string `json:"le"`
	Holds int64  `json:"holds"`
}

type analyzeHold struct {
	Start       time.Time `json:"start"`
	Seconds     float64   `json:"seconds"`
	IdleSeconds float64   `json:"idle_seconds"`
	Kind        string    `json:"kind"`
	SessionID   uint64    `json:"session_id"`
	User        string    `json:"user"`
	Client      string    `json:"client"`
	Hostgroup   int       `json:"hostgroup"`
	Tag         string    `json:"tag"`
	Statements  int       `json:"statements"`
	Digest      string    `json:"digest"`
	Query       string    `json:"query"`
	Truncated   bool      `json:"truncated"`
}

type analyzeDigest struct {
	Digest           string  `json:"digest"`
	Statements       int64   `json:"statements"`
	StatementSeconds float64 `json:"statement_seconds"`
	ShareOfGroupHold float64 `json:"share_of_group_hold"`
	Query            string  `json:"query"`
}

type analyzeName struct {
	Name        string  `json:"name"`
	HoldSeconds float64 `json:"hold_seconds"`
	Holds       int64   `json:"holds"`
}

type analyzeSource struct {
	Name            string   `json:"name"`
	Kind            string   `json:"kind"` // events_log or processlist
	Lines           int64    `json:"lines"`
	Events          int64    `json:"events"`
	Malformed       int64    `json:"malformed_lines"`
	DuplicateEvents int64    `json:"duplicate_events"`
	DuplicateOf     []string `json:"duplicate_of"`
	Warnings        []string `json:"warnings"`
}

func (d *digester) report(top int) *analyzeReport {
	r := &analyzeReport{Schema: analyzeSchema, GroupBy: d.cfg.groupBy, Groups: []analyzeGroup{}, Notes: []string{}}
	if d.firstUS != 0 {
		r.From, r.To = time.UnixMicro(d.firstUS).UTC(), time.UnixMicro(d.lastUS).UTC()
	}
	if !d.cfg.from.IsZero() {
		r.From = d.cfg.from.UTC()
	}
	if !d.cfg.to.IsZero() {
		r.To = d.cfg.to.UTC()
	}
	for _, g := range d.groups {
		ag := analyzeGroup{Key: g.key, HoldSeconds: secondsOf(g.hold), Holds: g.holds, Transactions: g.txns,
			Statements: g.stmts, IdleSeconds: secondsOf(g.idle), PinnedUntilDisconnect: g.openPins, Samples: g.samples,
			MaxSeconds: secondsOf(g.maxUS), Longest: g.longest, Digests: []analyzeDigest{}}
		if g.hist.n > 0 {
			ag.MeanSeconds = secondsOf(g.hold) / float64(max(g.holds, 1))
			ag.P95Seconds = secondsOf(min(g.hist.quantile(0.95), g.maxUS))
		}
		if g.hold > 0 {
			ag.IdleShare = float64(g.idle) / float64(g.hold)
		}
		if ag.Longest == nil {
			ag.Longest = []analyzeHold{}
		}
		for i, c := range g.hist.decades() {
			if c > 0 {
				ag.Histogram = append(ag.Histogram, analyzeBucket{Le: decades[i].label, Holds: c})
			}
		}
		if ag.Histogram == nil {
			ag.Histogram = []analyzeBucket{}
		}
		for dg, da := range g.digests {
			ad := analyzeDigest{Digest: dg, Statements: da.count, StatementSeconds: secondsOf(da.us), Query: da.query}
			if g.hold > 0 {
				ad.ShareOfGroupHold = float64(da.us) / float64(g.hold)
			}
			ag.Digests = append(ag.Digests, ad)
		}
		slices.SortFunc(ag.Digests, func(a, b analyzeDigest) int {
			return cmp.Or(cmp.Compare(b.StatementSeconds, a.StatementSeconds), cmp.Compare(a.Digest, b.Digest))
		})
		ag.Digests = ag.Digests[:min(len(ag.Digests), top)]
		ag.Users, ag.Hosts = topNames(g.users, top), topNames(g.hosts, top)
		r.TotalHoldSeconds += ag.HoldSeconds
		r.Groups = append(r.Groups, ag)
	}
	slices.SortFunc(r.Groups, func(a, b analyzeGroup) int {
		return cmp.Or(cmp.Compare(b.HoldSeconds, a.HoldSeconds), cmp.Compare(keyText(a.Key, d.cfg.groupBy), keyText(b.Key, d.cfg.groupBy)))
	})
	for i := range r.Groups {
		r.Groups[i].Rank = i + 1
		if r.TotalHoldSeconds > 0 {
			r.Groups[i].Share = r.Groups[i].HoldSeconds / r.TotalHoldSeconds
		}
	}
	return r
}

func topNames(m map[string]*nameAgg, n int) []analyzeName {
	out := make([]analyzeName, 0, len(m))
	for name, a := range m {
		out = append(out, analyzeName{Name: name, HoldSeconds: secondsOf(a.us), Holds: a.holds})
	}
	slices.SortFunc(out, func(a, b analyzeName) int {
		return cmp.Or(cmp.Compare(b.HoldSeconds, a.HoldSeconds), cmp.Compare(a.Name, b.Name))
	})
	return out[:min(len(out), n)]
}

func keyText(k map[string]string, fields []string) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = k[f]
	}
	return strings.Join(parts, " ")
}

func (r *analyzeReport) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// textTable renders rows of cells with every cell escaped (termtext.Line: a
// newline or ESC in a user name cannot break the line or reach the
// terminal) and padded in terminal cells (a CJK tag takes two per
// character). right marks the columns aligned right.
func textTable(w io.Writer, indent string, header []string, right []bool, rows [][]string) {
	cells := make([][]string, 0, len(rows)+1)
	for _, row := range append([][]string{header}, rows...) {
		esc := make([]string, len(row))
		for i, c := range row {
			esc[i] = termtext.Line(c)
		}
		cells = append(cells, esc)
	}
	widths := make([]int, len(header))
	for _, row := range cells {
		for i, c := range row {
			widths[i] = max(widths[i], termtext.Width(c))
		}
	}
	for _, row := range cells {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			switch {
			case right[i]:
				b.WriteString(termtext.PadLeft(c, widths[i]))
			case i == len(row)-1:
				b.WriteString(c) // no trailing blanks
			default:
				b.WriteString(termtext.PadRight(c, widths[i]))
			}
		}
		io.WriteString(w, strings.TrimRight(b.String(), " ")+"\n")
	}
}

// markdownCell escapes a cell for a Markdown table: control characters by
// termtext.Line, and the pipe that would end the cell.
func markdownCell(s string) string {
	return strings.ReplaceAll(termtext.Line(s), "|", `\|`)
}

func markdownTable(w io.Writer, header []string, right []bool, rows [][]string) {
	line := func(cells []string) {
		esc := make([]string, len(cells))
		for i, c := range cells {
			esc[i] = markdownCell(c)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(esc, " | "))
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
		if right[i] {
			sep[i] = "--:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	for _, r := range rows {
		line(r)
	}
}

func ms(s float64) string  { return strconv.FormatFloat(1000*s, 'f', 1, 64) }
func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }
func sec(s float64) string { return strconv.FormatFloat(s, 'f', 3, 64) }

func (r *analyzeReport) profileRows() (header []string, right []bool, rows [][]string) {
	header = []string{"RANK"}
	right = []bool{true}
	for _, f := range r.GroupBy {
		header = append(header, strings.ToUpper(f))
		right = append(right, false)
	}
	header = append(header, "HOLD s", "SHARE", "HOLDS", "MEAN ms", "P95 ms", "MAX ms", "IDLE")
	right = append(right, true, true, true, true, true, true, true)
	for _, g := range r.Groups {
		row := []string{strconv.Itoa(g.Rank)}
		for _, f := range r.GroupBy {
			row = append(row, g.Key[f])
		}
		if g.Holds == 0 && g.Samples > 0 {
			// Sampled: the samples do not tell one hold from the next.
			row = append(row, sec(g.HoldSeconds), pct(g.Share), "-", "-", "-", "-", pct(g.IdleShare))
		} else {
			row = append(row, sec(g.HoldSeconds), pct(g.Share), strconv.FormatInt(g.Holds, 10), ms(g.MeanSeconds),
				ms(g.P95Seconds), ms(g.MaxSeconds), pct(g.IdleShare))
		}
		rows = append(rows, row)
	}
	return header, right, rows
}

// writeText writes the profile table then each group's details; markdown
// writes the same as GitHub-flavoured Markdown.
func (r *analyzeReport) writeText(w io.Writer, markdown bool) {
	title := fmt.Sprintf("backend hold by %s, %s .. %s: %s s in %d groups (holds from the %s)",
		strings.Join(r.GroupBy, ","), fmtWhen(r.From), fmtWhen(r.To), sec(r.TotalHoldSeconds), len(r.Groups),
		strings.ReplaceAll(r.HoldsFrom, "_", " "))
	if r.Partial {
		title = "PARTIAL: " + title
	}
	h, right, rows := r.profileRows()
	if markdown {
		fmt.Fprintf(w, "## Profile\n\n%s\n\n", markdownCell(title))
		markdownTable(w, h, right, rows)
	} else {
		fmt.Fprintf(w, "# %s\n\n", termtext.Line(title))
		textTable(w, "", h, right, rows)
	}
	for _, g := range r.Groups {
		name := keyText(g.Key, r.GroupBy)
		if markdown {
			fmt.Fprintf(w, "\n## %d. %s\n\n", g.Rank, markdownCell(name))
		} else {
			fmt.Fprintf(w, "\n# %d. %s: %s s (%s), %d holds, %d transactions, %d statements, idle %s\n", g.Rank,
				termtext.Line(name), sec(g.HoldSeconds), pct(g.Share), g.Holds, g.Transactions, g.Statements, pct(g.IdleShare))
		}
		section := func(title string, header []string, right []bool, rows [][]string) {
			if len(rows) == 0 {
				return
			}
			if markdown {
				fmt.Fprintf(w, "%s:\n\n", title)
				markdownTable(w, header, right, rows)
				fmt.Fprintln(w)
				return
			}
			fmt.Fprintf(w, "  %s:\n", title)
			textTable(w, "    ", header, right, rows)
		}
		var rows [][]string
		for _, l := range g.Longest {
			rows = append(rows, []string{fmtWhen(l.Start), sec(l.Seconds), pct(safeDiv(l.IdleSeconds, l.Seconds)), l.Kind,
				strconv.FormatUint(l.SessionID, 10), l.User, l.Client, strconv.Itoa(l.Hostgroup), strconv.Itoa(l.Statements), l.Query})
		}
		section("longest holds", []string{"START", "HOLD s", "IDLE", "KIND", "SESSION", "USER", "CLIENT", "HG", "STMTS", "FIRST STATEMENT"},
			[]bool{false, true, true, false, true, false, false, true, true, false}, rows)
		rows = nil
		for _, dg := range g.Digests {
			rows = append(rows, []string{dg.Digest, strconv.FormatInt(dg.Statements, 10), sec(dg.StatementSeconds),
				pct(dg.ShareOfGroupHold), dg.Query})
		}
		section("top digests by statement time", []string{"DIGEST", "COUNT", "TIME s", "OF HOLD", "EXAMPLE"},
			[]bool{false, true, true, true, false}, rows)
		rows = nil
		for _, u := range g.Users {
			rows = append(rows, []string{"user", u.Name, sec(u.HoldSeconds), strconv.FormatInt(u.Holds, 10)})
		}
		for _, u := range g.Hosts {
			rows = append(rows, []string{"host", u.Name, sec(u.HoldSeconds), strconv.FormatInt(u.Holds, 10)})
		}
		section("users and client hosts", []string{"", "NAME", "HOLD s", "HOLDS"}, []bool{false, false, true, true}, rows)
		rows = nil
		var most int64
		for _, b := range g.Histogram {
			most = max(most, b.Holds)
		}
		for _, b := range g.Histogram {
			rows = append(rows, []string{"<= " + b.Le, strconv.FormatInt(b.Holds, 10), strings.Repeat("#", int(1+39*b.Holds/max(most, 1)))})
		}
		section("hold histogram", []string{"HOLD", "COUNT", ""}, []bool{false, true, false}, rows)
	}
	var lines []string
	for _, in := range r.Inputs {
		s := fmt.Sprintf("%s %s: %d lines, %d events, %d malformed", strings.ReplaceAll(in.Kind, "_", " "), in.Name, in.Lines, in.Events, in.Malformed)
		if in.DuplicateEvents > 0 {
			s += fmt.Sprintf(", %d duplicate events of %s skipped", in.DuplicateEvents, strings.Join(in.DuplicateOf, ", "))
		}
		lines = append(lines, s)
		for _, wn := range in.Warnings {
			lines = append(lines, "  warning: "+wn)
		}
	}
	lines = append(lines, r.Notes...)
	if markdown {
		fmt.Fprintf(w, "\n## Inputs\n\n")
		for _, l := range lines {
			fmt.Fprintf(w, "- %s\n", markdownCell(l))
		}
		return
	}
	fmt.Fprintf(w, "\n# inputs\n")
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", termtext.Line(l))
	}
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func fmtWhen(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}
