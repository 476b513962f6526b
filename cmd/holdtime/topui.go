package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/holdtime/holdtime/collector"
)

// The interactive console is a Bubble Tea program: its state changes only in
// Update, from a key, a resize, a tick or an answer, so every screen is a
// function of that state (tested without a terminal, and in tmux with one).
// Bubble Tea (charmbracelet) is chosen over tview/tcell because top is one
// table with overlays, not a widget tree, and over raw escape codes because
// it owns the terminal's modes, resizes and restoration on every way out.

// topKeys is the key table: the help screen and the README show it.
var topKeys = []struct{ keys, what string }{
	{"↑ ↓ k j, PgUp PgDn, Home End", "move the selection (the table scrolls)"},
	{"Enter", "drill into the selected tag: its figures per layer and per source, what the collector knows of it now (sessions, pins, transactions, locks), and its hottest frames in the app (--hold-profile)"},
	{"Esc", "back (from the drill-down, the help, the filter); at the table, quit"},
	{"O H I A S E N T", "sort by occupancy, hold, idle share, active, statements, errors, sessions, tag"},
	{"< >", "sort by the previous / next column"},
	{"a p s m", "rank by the app, proxy or server layer, or by each tag's largest (max)"},
	{"w", "rank by wait: the tags whose statements waited for a ProxySQL backend"},
	{"/", "filter tags (a regular expression; Enter applies, Esc clears)"},
	{"space", "pause / resume refreshing (the figures stay as they were)"},
	{"?", "this help"},
	{"q, Ctrl-C", "quit"},
}

// topReplayKeys are the keys of a replay (--replay), besides topKeys.
var topReplayKeys = []struct{ keys, what string }{
	{"space", "pause / play the recording"},
	{"← →", "step one second back / forward (pauses)"},
	{"[ ]", "step one minute back / forward (pauses)"},
	{"- +", "play slower / faster: 1x, 4x, 16x, 64x"},
	{"g", "go to a time: 15:04:05 on the recording's day, +90s from its start, or RFC 3339 (Enter jumps, Esc cancels)"},
}

var topSortByKey = map[string]string{
	"O": "occupancy", "H": "hold", "I": "idle_share", "A": "active", "S": "statements",
	"E": "errors", "N": "sessions", "T": "tag",
}

// answerMsg is a refresh's answer.
type answerMsg struct {
	resp collector.TopResponse
	err  error
	at   time.Time
}

// detailMsg is the drilled tag's detail (/api/v1/tag).
type detailMsg struct {
	tag string
	seq int // of the request: only the newest one's answer is shown
	d   collector.TagDetail
	err error
}

// tagDetailer is a source that can say more of one tag than its row: a
// collector (its /api/v1/tag, or in-process). A recording and Prometheus
// cannot.
type tagDetailer interface {
	tagDetail(ctx context.Context, tag string) (collector.TagDetail, error)
}

// tickMsg asks for the next refresh.
type tickMsg struct{}

// topModel is the console's state.
type topModel struct {
	t    *topCmd
	ctx  context.Context
	src  topSource
	down string // what a failed answer is: "collector", "sources"

	color bool
	now   func() time.Time

	resp       collector.TopResponse
	have       bool      // resp is a good answer
	lastAnswer time.Time // of resp
	err        error     // the latest refresh failed: resp is the last good one
	inFlight   bool
	// detailSeq numbers detail requests; detailWait is the one in flight
	// (0: none), so a slow collector gets one at a time and an older
	// answer never replaces a newer one.
	detailSeq, detailWait int
	detailWaitTag         string

	width, height int
	selected      int    // index into the arranged rows
	offset        int    // first row shown
	selectedTag   string // kept across refreshes: the selection follows the tag

	paused    bool
	help      bool
	filtering bool
	filterBuf string
	filterErr string
	drill     string // the tag drilled into; "" at the table
	detail    *collector.TagDetail
	detailErr error
	// The drilled tag's hottest frames (topframes.go): the latest read
	// of the apps' hold profiles, and the read in flight, as for detail.
	frames                *tagFrames
	framesSeq, framesWait int
	framesWaitTag         string
	framesAsked           time.Time

	// With --replay: the playback clock, the jump prompt, the end.
	replay  *replayPlayer
	jumping bool
	jumpBuf string
	jumpErr string
	ended   bool
}

func newTopModel(ctx context.Context, t *topCmd, src topSource, down string, color bool) *topModel {
	return &topModel{t: t, ctx: ctx, src: src, down: down, color: color, now: time.Now, width: 80, height: 24}
}

func (m *topModel) Init() tea.Cmd {
	if m.replay != nil {
		return tea.Batch(m.fetch(), m.scheduleTick())
	}
	return m.fetch()
}

// fetch asks the source for the ranking in the background.
func (m *topModel) fetch() tea.Cmd {
	if m.inFlight {
		return nil
	}
	m.inFlight = true
	q := m.t.query()
	return func() tea.Msg {
		resp, err := m.src.top(m.ctx, q)
		return answerMsg{resp: resp, err: err, at: time.Now()}
	}
}

func (m *topModel) scheduleTick() tea.Cmd {
	return tea.Tick(m.t.interval, func(time.Time) tea.Msg { return tickMsg{} })
}

func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.clampSelection()
		return m, nil
	case answerMsg:
		m.inFlight = false
		if m.ctx.Err() != nil {
			return m, tea.Quit
		}
		if m.replay != nil && msg.err == nil && !msg.resp.At.Equal(m.replay.now().UTC()) {
			// Of a cursor the keys or the ticks have moved since. Paused,
			// ask at the cursor. Playing, show it (the recording a moment
			// ago: when a frame takes longer than a tick, every answer is
			// one tick old, and dropping them all would freeze the screen)
			// and ask at the cursor.
			if !m.paused {
				m.err, m.resp, m.have, m.lastAnswer = nil, msg.resp, true, msg.at
				m.followSelection()
			}
			return m, m.fetch()
		}
		if msg.err != nil {
			m.err = msg.err
		} else if !m.paused || m.replay != nil {
			// A replay's answer is the recording at the cursor, which
			// only the keys move while paused.
			m.err, m.resp, m.have, m.lastAnswer = nil, msg.resp, true, msg.at
			m.followSelection()
		}
		if m.replay != nil {
			return m, m.fetchDetail() // the replay's ticks run on their own
		}
		return m, tea.Batch(m.scheduleTick(), m.fetchDetail(), m.fetchFrames())
	case framesMsg:
		m.gotFrames(msg)
		return m, nil
	case detailMsg:
		if msg.seq == m.detailWait {
			m.detailWait = 0
		}
		if msg.tag == m.drill && msg.seq == m.detailSeq {
			m.detailErr = msg.err
			if msg.err == nil {
				m.detail = &msg.d
			}
		}
		return m, nil
	case tickMsg:
		if m.replay != nil && !m.paused {
			if m.replay.advance(m.t.interval) {
				m.paused, m.ended = true, true
			}
			return m, tea.Batch(m.fetch(), m.scheduleTick())
		}
		if m.paused {
			return m, m.scheduleTick()
		}
		return m, m.fetch()
	case tea.KeyMsg:
		return m.key(msg)
	}
	return m, nil
}

func (m *topModel) key(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	if k.Type == tea.KeyRunes && len(k.Runes) > 1 && !m.filtering && !m.jumping && !k.Paste {
		// Keys typed faster than the terminal is read come as one message
		// ("++"): outside a prompt each is a key of its own.
		var cmds []tea.Cmd
		for _, r := range k.Runes {
			_, cmd := m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: k.Alt})
			cmds = append(cmds, cmd)
			if m.filtering || m.jumping {
				break // a prompt opened: the rest would be its text, typed again
			}
		}
		return m, tea.Batch(cmds...)
	}
	s := k.String()
	if s == "ctrl+c" {
		return m, tea.Quit
	}
	if m.filtering {
		switch k.Type {
		case tea.KeyEnter:
			m.filtering = false
			m.applyFilter(m.filterBuf)
		case tea.KeyEsc:
			m.filtering, m.filterBuf, m.filterErr = false, "", ""
			m.applyFilter("")
		case tea.KeyBackspace:
			if r := []rune(m.filterBuf); len(r) > 0 {
				m.filterBuf = string(r[:len(r)-1])
			}
		case tea.KeyRunes, tea.KeySpace:
			m.filterBuf += string(k.Runes)
			if k.Type == tea.KeySpace {
				m.filterBuf += " "
			}
		}
		return m, nil
	}
	if m.jumping {
		switch k.Type {
		case tea.KeyEnter:
			at, err := m.replay.rec.parseTime(m.jumpBuf)
			if err != nil {
				m.jumpErr = err.Error()
				return m, nil
			}
			m.jumping, m.jumpErr = false, ""
			return m, m.seek(func() bool { return m.replay.seek(at) })
		case tea.KeyEsc:
			m.jumping, m.jumpBuf, m.jumpErr = false, "", ""
		case tea.KeyBackspace:
			if r := []rune(m.jumpBuf); len(r) > 0 {
				m.jumpBuf = string(r[:len(r)-1])
			}
		case tea.KeyRunes:
			m.jumpBuf += string(k.Runes)
		}
		return m, nil
	}
	if m.help {
		// Any key closes the help; q still quits.
		m.help = false
		if s == "q" {
			return m, tea.Quit
		}
		return m, nil
	}
	if m.replay != nil {
		switch s {
		case " ":
			m.paused = !m.paused
			if !m.paused && m.ended {
				m.replay.seek(m.replay.rec.start) // play again from the start
			}
			m.ended = false
			return m, m.fetch()
		case "left", "right", "[", "]":
			step := map[string]time.Duration{"left": -time.Second, "right": time.Second, "[": -time.Minute, "]": time.Minute}[s]
			m.paused = true
			return m, m.seek(func() bool { return m.replay.step(step) })
		case "+", "=", "-":
			m.replay.faster(s != "-")
			return m, nil
		case "g":
			m.jumping, m.jumpBuf, m.jumpErr = true, "", ""
			return m, nil
		}
	}
	switch s {
	case "q":
		return m, tea.Quit
	case "esc":
		if m.drill != "" {
			m.drill = ""
			return m, nil
		}
		return m, tea.Quit
	case "?":
		m.help = true
	case " ":
		m.paused = !m.paused
		if !m.paused {
			return m, m.fetch()
		}
	case "/":
		m.filtering, m.filterBuf = true, m.t.filter
	case "up", "k":
		m.move(-1)
	case "down", "j":
		m.move(1)
	case "pgup":
		m.move(-m.pageRows())
	case "pgdown":
		m.move(m.pageRows())
	case "home":
		m.move(-1 << 30)
	case "end":
		m.move(1 << 30)
	case "enter":
		if rows := m.rows(); m.drill == "" && m.selected < len(rows) {
			m.drill, m.detail, m.detailErr, m.frames = rows[m.selected].Tag, nil, nil, nil
			return m, tea.Batch(m.fetchDetail(), m.fetchFrames())
		}
	case "a", "p", "s", "m":
		m.t.layer = map[string]string{"a": "app", "p": "proxy", "s": "server", "m": collector.LayerMax}[s]
		return m, m.refetch()
	case "w":
		m.t.layer, m.t.sortKey = string(collector.LayerProxy), "wait"
		return m, m.refetch()
	case "<", ">":
		i := slices.Index(collector.TopSortKeys, m.t.sortKey)
		if s == "<" {
			i = (i - 1 + len(collector.TopSortKeys)) % len(collector.TopSortKeys)
		} else {
			i = (i + 1) % len(collector.TopSortKeys)
		}
		m.t.sortKey = collector.TopSortKeys[i]
		m.followSelection()
	default:
		if key, ok := topSortByKey[s]; ok {
			m.t.sortKey = key
			m.followSelection()
		}
	}
	return m, nil
}

// fetchDetail asks for the drilled tag's detail, when the source has any.
func (m *topModel) fetchDetail() tea.Cmd {
	td, ok := m.src.(tagDetailer)
	if m.drill == "" || !ok || m.paused && m.detail != nil {
		return nil
	}
	if m.detailWait != 0 && m.detailWaitTag == m.drill {
		return nil // one in flight already; a drill into another tag asks at once
	}
	m.detailSeq++
	tag, ctx, seq := m.drill, m.ctx, m.detailSeq
	m.detailWait, m.detailWaitTag = seq, tag
	return func() tea.Msg {
		d, err := td.tagDetail(ctx, tag)
		return detailMsg{tag: tag, seq: seq, d: d, err: err}
	}
}

// seek moves the replay's cursor and shows the recording there.
func (m *topModel) seek(move func() bool) tea.Cmd {
	m.ended = move() && m.paused
	m.inFlight = false // the answer on its way is of the old cursor: ask anew
	return m.fetch()
}

// refetch asks again at once: the layer changes what the collector ranks.
func (m *topModel) refetch() tea.Cmd {
	if m.paused && m.replay == nil {
		return nil // paused live figures stay as they were; a replay's cursor stays
	}
	return m.fetch()
}

func (m *topModel) applyFilter(expr string) {
	m.filterErr = ""
	if expr == "" {
		m.t.filter, m.t.filterRe = "", nil
		m.followSelection()
		return
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		m.filterErr = "not a regular expression: " + err.Error()
		return
	}
	m.t.filter, m.t.filterRe = expr, re
	m.followSelection()
}

func (m *topModel) rows() []collector.TopRow {
	if !m.have {
		return nil
	}
	return m.t.arrange(slices.Clone(m.resp.Rows))
}

// The screen: title, sources, table header, rows, then the status lines.
const topChromeLines = 6

func (m *topModel) pageRows() int { return max(1, m.height-topChromeLines) }

func (m *topModel) move(d int) {
	n := len(m.rows())
	m.selected = min(max(m.selected+d, 0), max(n-1, 0))
	if rows := m.rows(); m.selected < len(rows) {
		m.selectedTag = rows[m.selected].Tag
	}
	m.clampSelection()
}

// followSelection keeps the selected tag selected when the order changes.
func (m *topModel) followSelection() {
	rows := m.rows()
	if i := slices.IndexFunc(rows, func(r collector.TopRow) bool { return r.Tag == m.selectedTag }); i >= 0 {
		m.selected = i
	}
	m.clampSelection()
}

func (m *topModel) clampSelection() {
	n := len(m.rows())
	m.selected = min(max(m.selected, 0), max(n-1, 0))
	page := m.pageRows()
	if m.selected < m.offset {
		m.offset = m.selected
	}
	if m.selected >= m.offset+page {
		m.offset = m.selected - page + 1
	}
	m.offset = min(m.offset, max(n-page, 0))
	m.offset = max(m.offset, 0)
}

func (m *topModel) View() string {
	var b strings.Builder
	switch {
	case m.help:
		m.viewHelp(&b)
	case m.drill != "":
		m.viewDrill(&b)
	default:
		m.viewTable(&b)
	}
	// Never more lines than the terminal has: the title stays on screen.
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if m.height > 0 && len(lines) > m.height {
		lines = lines[:m.height]
	}
	return strings.Join(lines, "\n")
}

func (m *topModel) title() string {
	state := ""
	switch {
	case m.paused:
		state = "  PAUSED"
	case m.err != nil:
		state = "  " + strings.ToUpper(m.down) + " DOWN"
	}
	covered := "-"
	if m.have {
		covered = newTopView(m.resp).covered()
	}
	filter := ""
	if m.t.filter != "" {
		filter = "  filter /" + m.t.filter + "/"
	}
	if m.replay != nil {
		play := fmt.Sprintf("PLAYING %dx", m.replay.speedNow())
		switch {
		case m.ended:
			play = "END"
		case m.paused:
			play = "PAUSED"
		}
		at := m.replay.now()
		if m.have {
			at = m.resp.At
		}
		return fmt.Sprintf("holdtime top  replay %s %s  window %s, covered %s  ranked by %s layer, sort %s%s  (? help, q quits)",
			m.replay.rec.describeAt(at), play, m.t.window, covered, cmp.Or(m.resp.Layer, m.t.layer), m.t.sortKey, filter)
	}
	return fmt.Sprintf("holdtime top  window %s, covered %s  ranked by %s layer, sort %s%s  %s%s  (? help, q quits)",
		m.t.window, covered, cmp.Or(m.resp.Layer, m.t.layer), m.t.sortKey, filter, m.now().Format("15:04:05"), state)
}

func (m *topModel) viewTable(b *strings.Builder) {
	w := m.width
	printLine(b, w, m.color, plain(m.title()))
	if !m.have {
		if m.err != nil {
			printLine(b, w, m.color, plain(m.down+" "), cell{"DOWN", "31"}, plain(": "+m.err.Error()))
		} else {
			printLine(b, w, m.color, plain("waiting for the first answer…"))
		}
		return
	}
	printLine(b, w, m.color, sourcesLine(m.resp.Sources)...)
	view := newTopView(m.resp)
	rows := m.rows()
	stale := m.err != nil
	var tb strings.Builder
	// The last good table stays when the source goes away, greyed: drawn
	// without colour, then dimmed whole.
	view.table(rows).write(&tb, max(w-2, 0), m.color && !stale)
	lines := strings.Split(strings.TrimSuffix(tb.String(), "\n"), "\n")
	dim := func(s string) string {
		if stale && m.color {
			return "\x1b[2m" + s + "\x1b[0m"
		}
		return s
	}
	b.WriteString(dim("  "+lines[0]) + "\n")
	page := m.pageRows()
	end := min(m.offset+page, len(rows))
	for i := m.offset; i < end; i++ {
		mark := "  "
		if i == m.selected {
			mark = "> "
		}
		b.WriteString(dim(mark+lines[1+i]) + "\n")
	}
	switch {
	case len(rows) == 0 && m.replay != nil && m.t.layer != string(collector.LayerProxy) && m.t.layer != collector.LayerMax:
		printLine(b, w, m.color, plain("  (a recording has the proxy layer only: p or m ranks by it)"))
	case len(rows) == 0:
		printLine(b, w, m.color, plain("  (no tag has held a connection in the window"+map[bool]string{true: " that matches the filter", false: ""}[m.t.filter != ""]+")"))
	}
	// Status: where the rows are, then why the figures are what they are.
	status := fmt.Sprintf("rows %d-%d of %d", min(m.offset+1, len(rows)), end, len(rows))
	if m.err != nil {
		status += fmt.Sprintf("  %s DOWN since the answer of %s: %v; retrying every %v", m.down, m.lastAnswer.Format("15:04:05"), m.err, m.t.interval)
	}
	printLine(b, w, m.color, plain(status))
	if m.jumping {
		prompt := "go to: " + m.jumpBuf + "▏ (15:04:05, +90s or RFC 3339; Enter jumps, Esc cancels)"
		if m.jumpErr != "" {
			printLine(b, w, m.color, plain(prompt), cell{"  " + m.jumpErr, "31"})
		} else {
			printLine(b, w, m.color, plain(prompt))
		}
	} else if m.filtering {
		printLine(b, w, m.color, plain("filter: /"+m.filterBuf+"▏ (Enter applies, Esc clears)"))
	} else if m.filterErr != "" {
		printLine(b, w, m.color, cell{m.filterErr, "31"})
	} else {
		printLine(b, w, m.color, plain(topLegend))
	}
}

// topLegend explains the marks a figure can carry.
const topLegend = "- cannot be measured by that layer's source   ~ stale: a source of that layer is down   " +
	"warming: the layer covers under 2s   untagged: statements without conn_tag (BEGIN, COMMIT and driver " +
	"statements carry none unless a source ties them to their transaction)"

func (m *topModel) viewHelp(b *strings.Builder) {
	w := m.width
	printLine(b, w, m.color, plain("holdtime top: keys (any key returns)"))
	tb := &table{left: map[int]bool{0: true, 1: true}}
	for _, k := range topKeys {
		tb.add(plain(k.keys), plain(k.what))
	}
	if m.replay != nil {
		for _, k := range topReplayKeys {
			tb.add(plain(k.keys), plain("replay: "+k.what))
		}
	}
	tb.write(b, w, m.color)
	printLine(b, w, m.color, plain(""))
	printLine(b, w, m.color, plain(topLegend))
}

// viewDrill shows one tag: every layer's figures with its headline source
// and targets, then every source's, cross-checks included.
func (m *topModel) viewDrill(b *strings.Builder) {
	w := m.width
	printLine(b, w, m.color, plain(m.title()))
	var row *collector.TopRow
	for _, r := range m.resp.Rows {
		if r.Tag == m.drill {
			row = &r
			break
		}
	}
	printLine(b, w, m.color, cell{"tag " + m.drill, "1"}, plain("   (Esc returns)"))
	if row == nil {
		printLine(b, w, m.color, plain("the tag held no connection in the window"))
		m.viewFrames(b) // the app's profile is cumulative: it may know the tag still
		return
	}
	view := newTopView(m.resp)
	tb := &table{left: map[int]bool{0: true, 1: true}}
	tb.add(plain("LAYER"), plain("SOURCE"), plain("OCCUPANCY"), plain("HOLD s"), plain("IDLE"), plain("ACTIVE s"),
		plain("STMT"), plain("ERR"), plain("WAIT s"), plain("SESSIONS"), plain("PINS"), plain("TARGETS"))
	for _, l := range collector.Layers {
		lf := row.Layers[l]
		if lf == nil {
			continue
		}
		occ := fmt.Sprintf("%.2f", lf.Occupancy)
		if view.warming(l) {
			occ = "warming"
		}
		if lf.Stale {
			occ += "~"
		}
		tb.add(plain(string(l)), plain(string(lf.Source)), plain(occ), plain(fmt.Sprintf("%.2f", lf.HoldSeconds)),
			plain(fmt.Sprintf("%.0f%%", 100*lf.IdleShare)), plain(fmt.Sprintf("%.2f", lf.ActiveSeconds)),
			plain(statementsCell(lf.Source, lf.Statements)), plain(fmt.Sprintf("%.0f", lf.Errors)),
			plain(fmt.Sprintf("%.2f", lf.WaitSeconds)), plain(fmt.Sprint(lf.Sessions)), plain(fmt.Sprint(lf.PinnedSessions)),
			plain(strings.Join(lf.Targets, ",")))
	}
	tb.write(b, w, m.color)
	printLine(b, w, m.color, plain(""))
	printLine(b, w, m.color, plain("every source (one layer's sources measure the same hold: never add them up):"))
	st := &table{left: map[int]bool{0: true}}
	st.add(plain("SOURCE"), plain("HOLD s"), plain("IDLE s"), plain("STMT"), plain("ERR"))
	for _, src := range slices.Sorted(func(yield func(collector.Source) bool) {
		for s := range row.Sources {
			if !yield(s) {
				return
			}
		}
	}) {
		sf := row.Sources[src]
		st.add(plain(string(src)), plain(fmt.Sprintf("%.2f", sf.HoldSeconds)), plain(fmt.Sprintf("%.2f", sf.IdleHoldSeconds)),
			plain(statementsCell(src, sf.Statements)), plain(fmt.Sprintf("%.0f", sf.Errors)))
	}
	st.write(b, w, m.color)
	m.viewFrames(b) // topframes.go
	m.viewDetail(b)
}

// viewDetail draws what the source says of the drilled tag beyond its row:
// sessions holding now, pins, transactions, locks, waits, deadlocks, its
// longest holds and its top statements in the window.
func (m *topModel) viewDetail(b *strings.Builder) {
	w := m.width
	section := func(title string) { printLine(b, w, m.color, plain("")); printLine(b, w, m.color, cell{title, "1"}) }
	if _, ok := m.src.(tagDetailer); !ok {
		section("now")
		what := "a recording"
		if m.down == "prometheus" {
			what = "Prometheus"
		}
		printLine(b, w, m.color, plain("sessions, pins, transactions, locks, longest holds and statements of the tag come from a collector's /api/v1/tag; "+what+" has only the figures above"))
		return
	}
	switch {
	case errors.Is(m.detailErr, collector.ErrNoTagDetail):
		section("now")
		printLine(b, w, m.color, plain("this collector does not serve /api/v1/tag (an older holdtime): the figures above are all it has"))
		return
	case m.detailErr != nil:
		section("now")
		printLine(b, w, m.color, cell{"detail: " + m.detailErr.Error(), "31"})
		return
	case m.detail == nil:
		section("now")
		printLine(b, w, m.color, plain("asking the collector…"))
		return
	}
	d := m.detail
	section(fmt.Sprintf("ProxySQL sessions holding now (%d)", len(d.Sessions)))
	if len(d.Sessions) > 0 {
		tb := &table{left: map[int]bool{0: true, 2: true, 3: true, 5: true, 7: true}}
		tb.add(plain("TARGET"), plain("SESSION"), plain("STATE"), plain("PINNED BY"), plain("BACKEND THREAD"), plain("USER"), plain("HOSTGROUP"), plain("TAG FROM"))
		for _, s := range d.Sessions {
			thread := "-"
			if s.BackendThread > 0 {
				thread = fmt.Sprint(s.BackendThread)
			}
			tb.add(plain(s.Target), plain(fmt.Sprint(s.SessionID)), plain(s.State), plain(cmp.Or(s.PinReason, "-")), plain(thread),
				plain(cmp.Or(s.User, "-")), plain(fmt.Sprint(s.Hostgroup)), plain(s.TagFrom))
		}
		tb.write(b, w, m.color)
	}
	if len(d.Pins) > 0 {
		section("pinned backends (idle with a backend attached), by reason")
		tb := &table{left: map[int]bool{0: true, 1: true}}
		tb.add(plain("TARGET"), plain("REASON"), plain("SESSIONS"))
		for _, p := range d.Pins {
			tb.add(plain(p.Target), plain(p.Reason), plain(fmt.Sprint(p.Sessions)))
		}
		tb.write(b, w, m.color)
	}
	if len(d.Transactions) > 0 {
		section("open transactions")
		tb := &table{left: map[int]bool{0: true}}
		tb.add(plain("TARGET"), plain("OPEN"), plain("OLDEST s"), plain("ROWS LOCKED"))
		for _, t := range d.Transactions {
			tb.add(plain(t.Target), plain(fmt.Sprint(t.Open)), plain(fmt.Sprintf("%.1f", t.OldestSeconds)), plain(fmt.Sprint(t.RowsLocked)))
		}
		tb.write(b, w, m.color)
	}
	if len(d.Locks) > 0 {
		section("locks")
		tb := &table{left: map[int]bool{0: true, 1: true, 2: true}}
		tb.add(plain("TARGET"), plain("KIND"), plain("STATE"), plain("COUNT"))
		for _, l := range d.Locks {
			tb.add(plain(l.Target), plain(l.Kind), plain(l.State), plain(fmt.Sprint(l.Count)))
		}
		tb.write(b, w, m.color)
	}
	if len(d.LockWaits) > 0 || len(d.Deadlocks) > 0 {
		section("lock waits and deadlocks")
		tb := &table{left: map[int]bool{0: true, 1: true, 2: true, 3: true}}
		tb.add(plain("TARGET"), plain("WHAT"), plain("WAITER / VICTIM"), plain("BLOCKER / OTHER"), plain("COUNT"))
		for _, lw := range d.LockWaits {
			tb.add(plain(lw.Target), plain("waits now"), plain(lw.WaiterTag), plain(lw.BlockerTag), plain(fmt.Sprint(lw.Waits)))
		}
		for _, dl := range d.Deadlocks {
			tb.add(plain(dl.Target), plain("deadlocks"), plain(dl.VictimTag), plain(dl.OtherTag), plain(fmt.Sprintf("%.0f", dl.Count)))
		}
		tb.write(b, w, m.color)
	}
	if len(d.LongestHolds) > 0 {
		section("longest holds in the last 5 m")
		tb := &table{left: map[int]bool{0: true, 1: true, 3: true}}
		tb.add(plain("TARGET"), plain("SOURCE"), plain("SESSION"), plain("START"), plain("HOLD s"), plain("IDLE s"), plain("STMT"))
		for _, h := range d.LongestHolds {
			tb.add(plain(h.Target), plain(string(h.Source)), plain(fmt.Sprint(h.SessionID)), plain(h.Start.Local().Format("15:04:05.000")),
				plain(fmt.Sprintf("%.3f", h.Seconds)), plain(fmt.Sprintf("%.3f", h.IdleSeconds)), plain(statementsCell(h.Source, float64(h.Statements))))
		}
		tb.write(b, w, m.color)
	}
	if len(d.Statements) > 0 {
		section("top statements in the last 5 m, by time running")
		tb := &table{left: map[int]bool{0: true, 1: true, 5: true}}
		tb.add(plain("TARGET"), plain("DIGEST"), plain("COUNT"), plain("TIME s"), plain("AVG ms"), plain("STATEMENT"))
		for _, st := range d.Statements {
			avg := "-"
			if st.Count > 0 {
				avg = fmt.Sprintf("%.1f", 1000*st.HoldSeconds/st.Count)
			}
			tb.add(plain(st.Target), plain(st.Digest), plain(fmt.Sprintf("%.0f", st.Count)), plain(fmt.Sprintf("%.3f", st.HoldSeconds)),
				plain(avg), plain(st.Text))
		}
		tb.write(b, w, m.color)
	}
	if unknown := hideFramesUnknown(d.Unknown); len(unknown) > 0 {
		section("not known yet")
		for _, u := range unknown {
			printLine(b, w, m.color, plain("  "+u))
		}
	}
}

// statementsCell is "-" where the source cannot count statements: the
// processlist sees sessions, not every statement they ran.
func statementsCell(src collector.Source, n float64) string {
	if src == collector.SourceProxySQLProcesslist {
		return "-"
	}
	return fmt.Sprintf("%.0f", n)
}

// runInteractive runs the console on a terminal until q, Esc, Ctrl-C or ctx
// ends.
func (t *topCmd) runInteractive(ctx context.Context, src topSource, down string, in io.Reader, color bool) error {
	// Whatever ends top, the terminal is left as it was found: every signal
	// that ends a terminal program ends the console through ctx, and the
	// program restores the terminal's modes and screen on its way out.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	if f, ok := in.(*os.File); ok {
		in = newTTYInput(f)
	}
	m := newTopModel(ctx, t, src, down, color)
	m.replay, m.paused = t.replay, t.replayPaused
	// The first screen fits the terminal before its first resize message.
	if w, h := termSize(t.out); w > 0 && h > 0 {
		m.width, m.height = w, h
	}
	if t.width != nil {
		m.width = t.width()
	}
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(t.out), tea.WithAltScreen(),
		tea.WithoutSignalHandler())
	_, err := p.Run()
	if err != nil && ctx.Err() != nil {
		return nil // Ctrl-C or a signal: how top ends
	}
	if err == tea.ErrProgramKilled {
		return nil
	}
	return err
}

// ttyInput hands the console the terminal without giving it ownership: its
// descriptor is read once, here (os.File.Fd from the input reader's
// goroutine raced with its own Close under the race detector), and Close
// leaves the terminal open for whoever opened it.
type ttyInput struct {
	f  *os.File
	fd uintptr
}

func newTTYInput(f *os.File) ttyInput { return ttyInput{f: f, fd: f.Fd()} }

func (t ttyInput) Read(p []byte) (int, error)  { return t.f.Read(p) }
func (t ttyInput) Write(p []byte) (int, error) { return t.f.Write(p) }
func (t ttyInput) Close() error                { return nil }
func (t ttyInput) Fd() uintptr                 { return t.fd }
