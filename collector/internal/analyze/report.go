package analyze

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/holdtime/holdtime/collector/internal/attrib"
	"github.com/holdtime/holdtime/internal/termtext"
)

// ReportVersion is the version of the JSON report layout. It changes when a
// field is renamed or removed, not when one is added.
const ReportVersion = 1

// Report is what `holdtime analyze` prints: per tag, who held backend
// connections and for how long.
type Report struct {
	FormatVersion    int                      `json:"format_version"`
	From             time.Time                `json:"from"`
	To               time.Time                `json:"to"`
	TotalHoldSeconds float64                  `json:"total_hold_seconds"`
	Tags             []TagReport              `json:"tags"`
	Longest          []HoldReport             `json:"longest_holds"`
	EventsLog        *attrib.ReadStats        `json:"events_log,omitempty"`
	Processlist      *attrib.ProcesslistStats `json:"processlist,omitempty"`
	Notes            []string                 `json:"notes,omitempty"`
	// Partial is set when reading was interrupted (Ctrl-C on an endless
	// input): the figures cover what was read until then.
	Partial bool `json:"partial,omitempty"`
}

// TagReport is one tag's line of the report.
type TagReport struct {
	Tag         string  `json:"tag"`
	HoldSeconds float64 `json:"hold_seconds"`
	Share       float64 `json:"share"`
	Holds       int64   `json:"holds"`
	// Transactions and Statements exclude BEGIN/COMMIT and prepares.
	Transactions  int64   `json:"transactions"`
	Statements    int64   `json:"statements"`
	Prepares      int64   `json:"prepares"`
	Executes      int64   `json:"prepared_executes"`
	P50Seconds    float64 `json:"hold_p50_seconds"`
	P99Seconds    float64 `json:"hold_p99_seconds"`
	MaxSeconds    float64 `json:"hold_max_seconds"`
	ActiveSeconds float64 `json:"active_seconds"`
	// IdleSeconds is hold with no statement running: between a
	// transaction's statements, or after a statement of a pinned session.
	IdleSeconds       float64 `json:"idle_seconds"`
	IdleShare         float64 `json:"idle_share"`
	PinnedIdleSeconds float64 `json:"pinned_idle_seconds"`
	// Pins counts holds by what kept the backend attached.
	Pins           map[string]int64 `json:"pins,omitempty"`
	MixedTagHolds  int64            `json:"mixed_tag_holds,omitempty"`
	TruncatedHolds int64            `json:"truncated_holds,omitempty"`
	UnknownReasons []ReasonSeconds  `json:"unknown_reasons,omitempty"`
	Longest        []HoldReport     `json:"longest_holds"`
	Sampled        *SampledReport   `json:"sampled,omitempty"`
	// PinnedUntilDisconnect counts holds whose sticky pin kept the backend
	// after their last statement until the session ended, when the events
	// log (which records no disconnect) cannot say; their hold seconds
	// count only up to that statement and they are in no percentile.
	// OpenPins lists the first of them.
	PinnedUntilDisconnect int64        `json:"pinned_until_disconnect,omitempty"`
	OpenPins              []HoldReport `json:"pinned_until_disconnect_holds,omitempty"`
}

// ReasonSeconds is hold time whose tag is unknown, by reason.
type ReasonSeconds struct {
	Reason  string  `json:"reason"`
	Seconds float64 `json:"seconds"`
}

// SampledReport is what the processlist samples saw of a tag, and where
// the tag of that time came from.
type SampledReport struct {
	Rows               int64   `json:"rows"`
	Seconds            float64 `json:"seconds"`
	FromInfo           float64 `json:"tag_from_info_seconds"`
	FromEventsLog      float64 `json:"tag_from_events_log_seconds"`
	Carried            float64 `json:"tag_carried_seconds"`
	Unknown            float64 `json:"tag_unknown_seconds"`
	Pinned             float64 `json:"idle_pinned_seconds"`
	AutoIncrementDelay float64 `json:"auto_increment_delay_seconds"`
}

// HoldReport is one hold, as listed among the longest.
type HoldReport struct {
	Tag           string    `json:"tag"`
	SessionID     uint64    `json:"session_id"`
	Client        string    `json:"client"`
	User          string    `json:"user"`
	Hostgroup     int       `json:"hostgroup"`
	Kind          string    `json:"kind"`
	Start         time.Time `json:"start"`
	Seconds       float64   `json:"seconds"`
	IdleSeconds   float64   `json:"idle_seconds"`
	Statements    int       `json:"statements"`
	Pins          []string  `json:"pins,omitempty"`
	UnknownReason string    `json:"unknown_reason,omitempty"`
	Truncated     bool      `json:"truncated,omitempty"`
	// EndUnknown: pinned until the session ended, which the log does not
	// show; Seconds is only up to its last statement.
	EndUnknown bool `json:"end_unknown,omitempty"`
}

// Tag returns the report line of tag, or nil.
func (r *Report) Tag(tag string) *TagReport {
	for i := range r.Tags {
		if r.Tags[i].Tag == tag {
			return &r.Tags[i]
		}
	}
	return nil
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as aligned text for a terminal. Every field
// from the input (tags, users, clients, file lines) goes through
// termtext.Line, so a newline or an escape sequence in it shows escaped on
// its own line, and columns are padded in terminal cells (CJK takes two).
func (r *Report) WriteTable(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "backend hold by tag, %s .. %s: %.3f s in total\n\n", fmtTime(r.From), fmtTime(r.To), r.TotalHoldSeconds)
	rows := [][]string{{"TAG", "HOLD s", "SHARE", "TXNS", "STMTS", "P50 ms", "P99 ms", "MAX ms", "IDLE", "PINS"}}
	for _, t := range r.Tags {
		rows = append(rows, []string{t.Tag, fmt.Sprintf("%.3f", t.HoldSeconds), fmt.Sprintf("%.1f%%", 100*t.Share),
			fmt.Sprint(t.Transactions), fmt.Sprint(t.Statements), fmt.Sprintf("%.1f", 1000*t.P50Seconds),
			fmt.Sprintf("%.1f", 1000*t.P99Seconds), fmt.Sprintf("%.1f", 1000*t.MaxSeconds), fmt.Sprintf("%.1f%%", 100*t.IdleShare),
			fmtPins(t.Pins)})
	}
	writeCells(ew, rows)
	r.writeDetails(ew, termtext.Line, "  ")
	return ew.err
}

// writeCells writes rows right-aligned in columns two cells apart, each
// cell escaped and measured in terminal cells.
func writeCells(w io.Writer, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			row[i] = termtext.Line(c)
			widths[i] = max(widths[i], termtext.Width(row[i]))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(termtext.PadLeft(c, widths[i]))
		}
		b.WriteByte('\n')
		io.WriteString(w, b.String())
	}
}

// mdCell escapes a Markdown table cell: control characters, and the pipe
// that would end it.
func mdCell(s string) string { return strings.ReplaceAll(termtext.Line(s), "|", `\|`) }

// WriteMarkdown writes the report as GitHub-flavoured Markdown, fields from
// the input escaped as in WriteTable (and | in table cells).
func (r *Report) WriteMarkdown(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "## Backend hold by tag\n\n%s .. %s, %.3f s in total.\n\n", fmtTime(r.From), fmtTime(r.To), r.TotalHoldSeconds)
	fmt.Fprintln(ew, "| tag | hold s | share | txns | stmts | p50 ms | p99 ms | max ms | idle | pins |")
	fmt.Fprintln(ew, "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|")
	for _, t := range r.Tags {
		fmt.Fprintf(ew, "| %s | %.3f | %.1f%% | %d | %d | %.1f | %.1f | %.1f | %.1f%% | %s |\n", mdCell(t.Tag), t.HoldSeconds,
			100*t.Share, t.Transactions, t.Statements, 1000*t.P50Seconds, 1000*t.P99Seconds, 1000*t.MaxSeconds,
			100*t.IdleShare, mdCell(fmtPins(t.Pins)))
	}
	r.writeDetails(ew, func(s string) string { return "- " + termtext.Line(s) }, "")
	return ew.err
}

// writeDetails writes the sections shared by the text formats: longest
// holds, unknown reasons, sources.
func (r *Report) writeDetails(w io.Writer, item func(string) string, indent string) {
	if len(r.Longest) > 0 {
		fmt.Fprintf(w, "\nlongest holds:\n")
		for _, h := range r.Longest {
			fmt.Fprintf(w, "%s%s\n", indent, item(fmt.Sprintf("%.3f s  %s  session %d  client %s  user %s  hostgroup %d  %s  started %s  idle %.3f s  %d stmts%s",
				h.Seconds, h.Tag, h.SessionID, h.Client, h.User, h.Hostgroup, h.Kind, fmtTime(h.Start), h.IdleSeconds,
				h.Statements, suffix(h.Pins, h.UnknownReason, h.Truncated))))
		}
	}
	header := false
	for _, t := range r.Tags {
		for _, h := range t.OpenPins {
			if !header {
				header = true
				fmt.Fprintf(w, "\npinned until the session ended (the events log records no disconnect: when the backend was released is unknown):\n")
			}
			fmt.Fprintf(w, "%s%s\n", indent, item(fmt.Sprintf("%s  session %d  client %s  user %s  pins %s  since %s (at least %.3f s)",
				h.Tag, h.SessionID, h.Client, h.User, strings.Join(h.Pins, ","), fmtTime(h.Start), h.Seconds)))
		}
		if n := t.PinnedUntilDisconnect - int64(len(t.OpenPins)); n > 0 {
			fmt.Fprintf(w, "%s%s\n", indent, item(fmt.Sprintf("%s: %d more", t.Tag, n)))
		}
	}
	header = false
	for _, t := range r.Tags {
		for _, u := range t.UnknownReasons {
			if !header {
				header = true
				fmt.Fprintf(w, "\nhold whose tag is unknown, by reason:\n")
			}
			fmt.Fprintf(w, "%s%s\n", indent, item(fmt.Sprintf("%s: %.3f s: %s", t.Tag, u.Seconds, u.Reason)))
		}
	}
	fmt.Fprintf(w, "\nsources:\n")
	if e := r.EventsLog; e != nil {
		fmt.Fprintf(w, "%s%s\n", indent, item(fmt.Sprintf("events log: %d files, %d lines, %d events, %d malformed lines skipped",
			e.Files, e.Lines, e.Events, e.Malformed)))
		for _, l := range e.MalformedLines {
			fmt.Fprintf(w, "%s  %s\n", indent, item(l.String()))
		}
		for _, warn := range e.Warnings {
			fmt.Fprintf(w, "%s%s\n", indent, item("warning: "+warn))
		}
	}
	if p := r.Processlist; p != nil {
		fmt.Fprintf(w, "%s%s\n", indent, item(fmt.Sprintf(
			"processlist: %d samples, %d rows, %.3f s of backend hold sampled; tag from: running statement %.3f s, events log %.3f s, last seen %.3f s, unknown %.3f s; %d malformed lines skipped",
			p.Samples, p.Rows, p.HeldSeconds, p.FromInfo, p.FromEventsLog, p.Carried, p.Unknown, p.Malformed)))
		for _, l := range p.MalformedLines {
			fmt.Fprintf(w, "%s  %s\n", indent, item(l.String()))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "%s%s\n", indent, item(n))
	}
}

func suffix(pins []string, reason string, truncated bool) string {
	var parts []string
	if len(pins) > 0 {
		parts = append(parts, "pins "+strings.Join(pins, ","))
	}
	if reason != "" {
		parts = append(parts, "unknown: "+reason)
	}
	if truncated {
		parts = append(parts, "cut by the input's edge")
	}
	if len(parts) == 0 {
		return ""
	}
	return "  (" + strings.Join(parts, "; ") + ")"
}

func fmtPins(p map[string]int64) string {
	if len(p) == 0 {
		return "-"
	}
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, p[n])
	}
	return strings.Join(parts, " ")
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
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
