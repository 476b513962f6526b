package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/internal/termtext"
	"github.com/holdtime/holdtime/locks"
)

// locksCmd shows the locks of every open transaction by business process.
type locksCmd struct {
	out, errOut io.Writer

	mysqlDSN         string
	watch            bool
	interval         time.Duration
	timeout          time.Duration
	jsonOut          bool
	tags             []string
	enableLockOutput bool

	target string
	dsn    string
}

func newLocksCmd() *cobra.Command {
	l := &locksCmd{}
	cmd := &cobra.Command{
		Use:   "locks",
		Short: "InnoDB locks, lock waits and deadlocks by business process (conn_tag)",
		Long: `locks lists every open InnoDB transaction with its tag (from its session's
statements: /* conn_tag:NAME */), age, state, isolation level, rows locked and
its locks counted by table, index and kind (record, next_key, gap, supremum,
insert_intention, table_intention, table, auto_inc); who waits for whom, both
sides named by tag; the latest deadlock (both tags, statements without their
values, the lock each held and waited for, the victim); threads running and
connected against max_connections, and statements waiting for a thread
(MariaDB's thread pool queue, MySQL's innodb_thread_concurrency queue).
Hints name the diagnoses that apply, with their numbers: two row locks per
row (a secondary index read), gap locks under REPEATABLE READ, a thread queue.

MariaDB lists locks by kind only with innodb_status_output_locks=ON. locks
never changes a server setting by itself: when it is off it says so and
prints the statement that turns it on and what that costs;
--enable-lock-output sets it for the run (needs SUPER) and turns it back off
when locks exits. MySQL 8 reads performance_schema.data_locks and needs no
setting.

Privileges: PROCESS, and SELECT on performance_schema (the tags of
transactions idle between statements; MySQL 8's lock tables):
  GRANT PROCESS ON *.* TO 'monitor'@'%';
  GRANT SELECT ON performance_schema.* TO 'monitor'@'%';

Each read runs about 5 small queries and SHOW ENGINE INNODB STATUS (see
go doc github.com/holdtime/holdtime/locks for what each costs); --watch reads
every --interval (at least 200ms: the server refreshes INNODB_TRX only after
100 ms without a read).

Every flag also reads HOLDTIME_ + its name in upper case (HOLDTIME_MYSQL, ...),
so the DSN need not appear in the process list.`,
		Example: `  holdtime locks --mysql 'monitor:secret@tcp(db:3306)/'
  holdtime locks --mysql 'monitor:secret@tcp(db:3306)/' --watch --tag inventory_reserve
  holdtime locks --mysql 'admin:secret@tcp(db:3306)/' --enable-lock-output
  HOLDTIME_MYSQL='monitor:secret@tcp(db:3306)/' holdtime locks --json | jq '.hints'`,
		Args: noArgs("give the server with --mysql 'user:pass@tcp(host:3306)/' (quoted: its parentheses are special to the shell)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			l.out, l.errOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if err := flagsFromEnv(cmd); err != nil {
				return err
			}
			if err := l.validate(); err != nil {
				return err
			}
			return l.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&l.mysqlDSN, "mysql", "", "MySQL/MariaDB DSN, [NAME=]user:pass@tcp(host:3306)/")
	f.BoolVar(&l.watch, "watch", false, "read again every --interval until Ctrl-C; deadlocks seen meanwhile are listed")
	f.DurationVar(&l.interval, "interval", 2*time.Second, "time between reads with --watch")
	f.DurationVar(&l.timeout, "timeout", 10*time.Second, "how long one read may take")
	f.BoolVar(&l.jsonOut, "json", false, "print JSON (one document per read)")
	f.StringArrayVar(&l.tags, "tag", nil, "show only this tag's transactions, waits, deadlocks and hints (repeatable)")
	f.BoolVar(&l.enableLockOutput, "enable-lock-output", false,
		"MariaDB: set innodb_status_output_locks=ON for the run (needs SUPER) and back OFF when locks exits")
	return cmd
}

func (l *locksCmd) validate() error {
	if l.mysqlDSN == "" {
		return errors.New("no server: give --mysql user:pass@tcp(host:3306)/ (or HOLDTIME_MYSQL)")
	}
	name, dsn, _, err := targetName("mysql", l.mysqlDSN)
	if err != nil {
		// locks reads one server: it needs no target name, and shows the
		// address (a socket path, a long host name) instead.
		cfg, perr := mysql.ParseDSN(l.mysqlDSN)
		if perr != nil {
			return err
		}
		name, dsn = cfg.Addr, l.mysqlDSN
	}
	l.target, l.dsn = name, dsn
	if l.interval < 200*time.Millisecond {
		return fmt.Errorf("--interval %v: use at least 200ms (the server refreshes INNODB_TRX only after 100 ms without a read)", l.interval)
	}
	if l.timeout <= 0 {
		return fmt.Errorf("--timeout %v: use a positive duration", l.timeout)
	}
	for _, t := range l.tags {
		if t == "" {
			return errors.New("--tag: give a tag name")
		}
	}
	return nil
}

func (l *locksCmd) open() (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(l.dsn)
	if err != nil {
		return nil, errors.New("--mysql: not a DSN of the form [NAME=]user:pass@tcp(host:port)/")
	}
	cfg.Timeout = l.timeout
	cfg.ReadTimeout = l.timeout
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("--mysql: %v", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	return db, nil
}

// locksDoc is one --json document.
type locksDoc struct {
	Target string `json:"target"`
	*locks.Snapshot
	// RecentDeadlocks are the deadlocks seen since locks started (the
	// latest one at start included); NewDeadlocks how many are new since
	// the previous read; UnnamedDeadlocks how many more the server counted
	// meanwhile that no read showed.
	RecentDeadlocks  []locks.Deadlock `json:"recent_deadlocks"`
	NewDeadlocks     int              `json:"new_deadlocks"`
	UnnamedDeadlocks int64            `json:"unnamed_deadlocks"`
}

func (l *locksCmd) run(ctx context.Context) error {
	db, err := l.open()
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := locks.New(db, locks.Config{ParseTag: collector.ParseTag})
	if err != nil {
		return err
	}
	read := func() (*locks.Snapshot, error) {
		rctx, cancel := context.WithTimeout(ctx, l.timeout)
		defer cancel()
		s, err := r.Read(rctx)
		if err != nil && ctx.Err() == nil && rctx.Err() != nil {
			return nil, fmt.Errorf("no answer from %s within %v: check the address, or raise --timeout", l.target, l.timeout)
		}
		return s, err
	}
	s, err := read()
	if err != nil {
		return fmt.Errorf("%s: %w", l.target, err)
	}
	if l.enableLockOutput {
		switch {
		case !s.LockOutput.Needed:
			fmt.Fprintln(l.errOut, "holdtime locks: MySQL reads performance_schema.data_locks: --enable-lock-output changes nothing")
		case s.LockOutput.Enabled:
			fmt.Fprintln(l.errOut, "holdtime locks: innodb_status_output_locks is already ON: left as it is")
		default:
			if err := r.SetLockOutput(ctx, true); err != nil {
				return fmt.Errorf("%s: %w", l.target, err)
			}
			fmt.Fprintln(l.errOut, "holdtime locks: set innodb_status_output_locks = ON (was OFF); it goes back OFF when locks exits")
			defer func() {
				// The run's context may be cancelled (Ctrl-C): restore anyway.
				rctx, cancel := context.WithTimeout(context.Background(), l.timeout)
				defer cancel()
				if err := r.SetLockOutput(rctx, false); err != nil {
					fmt.Fprintf(l.errOut, "holdtime locks: could not turn innodb_status_output_locks back OFF: %v; run %s\n",
						err, "SET GLOBAL innodb_status_output_locks = OFF")
					return
				}
				fmt.Fprintln(l.errOut, "holdtime locks: set innodb_status_output_locks = OFF again")
			}()
			if s, err = read(); err != nil {
				return fmt.Errorf("%s: %w", l.target, err)
			}
		}
	}
	tracker := locks.NewDeadlocks(20)
	live := l.watch && !l.jsonOut && isTerminal(l.out)
	for {
		fresh, unnamed := tracker.Observe(s)
		doc := locksDoc{Target: l.target, Snapshot: l.filter(s), RecentDeadlocks: l.filterDeadlocks(tracker.Recent()),
			NewDeadlocks: len(fresh), UnnamedDeadlocks: unnamed}
		if live {
			fmt.Fprint(l.out, "\x1b[H\x1b[2J")
		}
		if l.jsonOut {
			if err := json.NewEncoder(l.out).Encode(doc); err != nil {
				return err
			}
		} else if err := l.render(doc); err != nil {
			return err
		}
		if !l.watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // Ctrl-C is how --watch ends
		case <-time.After(l.interval):
		}
		next, err := read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(l.errOut, "holdtime locks: %s: %v (retrying)\n", l.target, err)
			continue
		}
		s = next
	}
}

func (l *locksCmd) wanted(tag string) bool { return len(l.tags) == 0 || slices.Contains(l.tags, tag) }

// filter keeps what concerns the --tag tags.
func (l *locksCmd) filter(s *locks.Snapshot) *locks.Snapshot {
	if len(l.tags) == 0 {
		return s
	}
	c := *s
	c.Transactions = slices.DeleteFunc(slices.Clone(s.Transactions), func(t locks.Transaction) bool { return !l.wanted(t.Tag) })
	c.Waits = slices.DeleteFunc(slices.Clone(s.Waits), func(w locks.Wait) bool {
		return !l.wanted(w.Waiting.Tag) && !l.wanted(w.Blocking.Tag)
	})
	c.RowLocksPerRow = slices.DeleteFunc(slices.Clone(s.RowLocksPerRow), func(r locks.RowLockRatio) bool { return !l.wanted(r.Tag) })
	c.Hints = slices.DeleteFunc(slices.Clone(s.Hints), func(h locks.Hint) bool { return h.Tag != "" && !l.wanted(h.Tag) })
	if d := s.LatestDeadlock; d != nil && !l.deadlockWanted(d) {
		c.LatestDeadlock = nil
	}
	return &c
}

func (l *locksCmd) deadlockWanted(d *locks.Deadlock) bool {
	for _, t := range d.Transactions {
		if l.wanted(t.Tag) {
			return true
		}
	}
	return false
}

func (l *locksCmd) filterDeadlocks(ds []locks.Deadlock) []locks.Deadlock {
	return slices.DeleteFunc(ds, func(d locks.Deadlock) bool { return !l.deadlockWanted(&d) })
}

// render writes doc as text. Everything in it passes through termtext: what
// the server reports (statements, user and host names, tags, lock data)
// reaches the terminal with its control characters escaped, a field that
// must stay on its line through termtext.Line, and columns are aligned in
// terminal cells.
func (l *locksCmd) render(doc locksDoc) error {
	tw := termtext.NewWriter(l.out)
	if err := l.renderText(tw, doc); err != nil {
		return err
	}
	return tw.Flush()
}

func (l *locksCmd) renderText(w io.Writer, doc locksDoc) error {
	s := doc.Snapshot
	fmt.Fprintf(w, "holdtime locks  %s  %s %s  %s\n", termtext.Line(doc.Target), termtext.Line(string(s.Server.Flavor)),
		termtext.Line(s.Server.Version), s.At.Format("15:04:05"))
	l.renderSaturation(w, s.Saturation)
	switch {
	case s.LockSource == locks.SourceDataLocks:
		fmt.Fprintln(w, "locks from: performance_schema.data_locks")
	case s.LockOutput.Enabled:
		fmt.Fprintf(w, "locks from: SHOW ENGINE INNODB STATUS (innodb_status_output_locks ON), %d bytes\n", s.StatusBytes)
	default:
		fmt.Fprintf(w, "lock output: OFF: locks are not counted by kind (rows locked and lock waits still are). To count them, run (needs SUPER):\n"+
			"    %s\n  %s.\n  Or run holdtime locks with --enable-lock-output: it sets it, and back OFF when it exits.\n",
			s.LockOutput.Enable, locks.LockOutputCost)
	}

	fmt.Fprintf(w, "\nTRANSACTIONS  %d open\n", len(s.Transactions))
	for _, t := range s.Transactions {
		fmt.Fprintf(w, "  %s  thread %d  %s  %.0fs  %s  %s  %d rows locked%s\n", tagSet(t.Tag, t.Tags), t.ThreadID,
			termtext.Line(trxLabel(t.TrxID)), t.AgeSeconds, termtext.Line(t.State), termtext.Line(t.Isolation), t.RowsLocked,
			who(t.User, t.Host, t.DB))
		if t.Statement != "" {
			what := "running"
			if t.Idle {
				what = fmt.Sprintf("idle %.3fs; last", t.IdleSeconds)
			}
			fmt.Fprintf(w, "    %s: %s\n", what, shorten(t.Statement, 100))
		}
		tb := &table{left: map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true}}
		for _, lk := range t.Locks {
			index := cmp.Or(lk.Index, "-")
			waiting := ""
			if lk.Waiting {
				waiting = "waiting"
			}
			tb.add(plain("    "), plain(lk.Table), plain(index), plain(string(lk.Kind)), plain(lk.Mode),
				plain(strconv.Itoa(lk.Rows)), plain(waiting))
		}
		if err := tb.write(w, 0, false); err != nil {
			return err
		}
		if t.LocksPartial {
			fmt.Fprintln(w, "      (locks partly listed: the server lists 10 lock structures per transaction)")
		}
	}

	l.renderChains(w, s)
	if len(s.RowLocksPerRow) > 0 {
		fmt.Fprintln(w, "\nROW LOCKS PER ROW (records locked in every index / rows locked in the clustered index)")
		tb := &table{left: map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true, 6: true}}
		tb.add(plain(""), plain("TAG"), plain("TABLE"), plain("PER ROW"), plain("LOCKS"), plain("ROWS"), plain("BY INDEX"))
		for _, r := range s.RowLocksPerRow {
			var by []string
			for _, idx := range slices.Sorted(maps.Keys(r.ByIndex)) {
				by = append(by, fmt.Sprintf("%s %d", idx, r.ByIndex[idx]))
			}
			tb.add(plain(""), plain(r.Tag), plain(r.Table), plain(fmt.Sprintf("%.1f", r.PerRow)), plain(strconv.Itoa(r.Locks)),
				plain(strconv.Itoa(r.Rows)), plain(strings.Join(by, ", ")))
		}
		if err := tb.write(w, 0, false); err != nil {
			return err
		}
	}

	l.renderDeadlocks(w, doc)

	if len(s.Hints) > 0 {
		fmt.Fprintln(w, "\nHINTS")
		for _, h := range s.Hints {
			fmt.Fprintf(w, "  - %s\n", h.Text)
		}
	}
	var notes []string
	for _, n := range s.Notes {
		if !strings.HasPrefix(n, "innodb_status_output_locks is OFF") { // said at the top
			notes = append(notes, n)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nNOTES")
		for _, n := range notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	return nil
}

func (l *locksCmd) renderSaturation(w io.Writer, q locks.Saturation) {
	fmt.Fprintf(w, "threads: %d running, %d connected, max_connections %d; ", q.ThreadsRunning, q.ThreadsConnected, q.MaxConnections)
	switch {
	case !q.QueueKnown:
		fmt.Fprintf(w, "statements waiting for a thread: unknown (thread_handling %s)\n", q.ThreadHandling)
	case q.QueueSource == locks.QueueNone:
		fmt.Fprintln(w, "statements waiting for a thread: none (one thread per connection, no concurrency limit)")
	case q.ThreadPool != nil:
		fmt.Fprintf(w, "statements waiting for a thread: %d (thread pool: %d groups, %d threads, %d active, oldest waiting %.3fs)\n",
			q.Queued, q.ThreadPool.Groups, q.ThreadPool.Threads, q.ThreadPool.ActiveThreads, q.ThreadPool.OldestQueuedSeconds)
	case q.InnoDB != nil:
		fmt.Fprintf(w, "statements waiting for a thread: %d (innodb_thread_concurrency %d, %d inside InnoDB)\n",
			q.Queued, q.InnoDB.Limit, q.InnoDB.Inside)
	default:
		fmt.Fprintf(w, "statements waiting for a thread: %d (%s)\n", q.Queued, q.QueueSource)
	}
}

func (l *locksCmd) renderDeadlocks(w io.Writer, doc locksDoc) {
	s := doc.Snapshot
	ds := doc.RecentDeadlocks
	if len(ds) == 0 && s.LatestDeadlock != nil {
		ds = []locks.Deadlock{*s.LatestDeadlock}
	}
	count := "unknown"
	if s.DeadlockCountKnown {
		count = fmt.Sprint(s.DeadlockCount)
	}
	fmt.Fprintf(w, "\nDEADLOCKS  server count %s; the server keeps only the latest", count)
	if doc.UnnamedDeadlocks > 0 {
		fmt.Fprintf(w, "; %d more since the last read were overwritten before they could be read", doc.UnnamedDeadlocks)
	}
	fmt.Fprintln(w)
	for i := len(ds) - 1; i >= 0; i-- { // newest first
		d := ds[i]
		var others []string
		for _, t := range d.Transactions {
			if !t.Victim {
				others = append(others, fmt.Sprintf("%s (thread %d)", termtext.Line(t.Tag), t.ThreadID))
			}
		}
		at := termtext.Line(d.At) + " (server time, zone unknown)"
		if d.Time != nil {
			at = d.Time.Format("2006-01-02 15:04:05 -07:00")
		}
		fmt.Fprintf(w, "  %s  victim %s, rolled back; with %s\n", at, termtext.Line(d.VictimTag()), strings.Join(others, ", "))
		for _, t := range d.Transactions {
			victim := ""
			if t.Victim {
				victim = ", victim"
			}
			fmt.Fprintf(w, "    (%d) %s (thread %d%s): %s\n", t.N, termtext.Line(t.Tag), t.ThreadID, victim, shorten(t.Statement, 100))
			for _, h := range t.Held {
				fmt.Fprintf(w, "        held        %s %s %s %s (%d)\n", termtext.Line(h.Table), termtext.Line(h.Index),
					termtext.Line(string(h.Kind)), termtext.Line(h.Mode), h.Rows)
			}
			if t.WaitedFor != nil {
				fmt.Fprintf(w, "        waited for  %s %s %s %s\n", termtext.Line(t.WaitedFor.Table), termtext.Line(t.WaitedFor.Index),
					termtext.Line(string(t.WaitedFor.Kind)), termtext.Line(t.WaitedFor.Mode))
			}
		}
	}
}

// renderChains prints the lock waits as trees from their root blockers,
// with the statement that would end each root: printed, never run.
func (l *locksCmd) renderChains(w io.Writer, s *locks.Snapshot) {
	fmt.Fprintf(w, "\nLOCK WAITS  %d", len(s.Waits))
	if len(s.Chains) > 0 {
		fmt.Fprintf(w, " in %d chain(s)", len(s.Chains))
	}
	fmt.Fprintln(w)
	for _, c := range s.Chains {
		r := c.Root
		if r.ThreadID == 0 {
			fmt.Fprintf(w, "  root unknown (trx id %s is not one session's; see NOTES)  holds up %d\n", termtext.Line(r.TrxID), c.HeldUp)
		} else {
			state := "running"
			if r.Idle {
				state = fmt.Sprintf("idle %.3fs", r.IdleSeconds)
			}
			fmt.Fprintf(w, "  root %s  thread %d  %s%s  holds up %d session(s)\n", tagSet(r.Tag, r.Tags), r.ThreadID, state,
				who(r.User, r.Host, r.DB), c.HeldUp)
			if r.Statement != "" {
				fmt.Fprintf(w, "    %s: %s\n", map[bool]string{true: "last", false: "running"}[r.Idle], shorten(r.Statement, 100))
			}
			fmt.Fprintf(w, "    to end it: %s   (printed, not run)\n", termtext.Line(c.Kill))
		}
		renderNodes(w, c.Waiters, "    ")
	}
	if len(s.MetadataWaits) > 0 {
		fmt.Fprintf(w, "\nMETADATA LOCK WAITS  %d\n", len(s.MetadataWaits))
	}
	for _, m := range s.MetadataWaits {
		state := "running"
		if m.Blocking.Idle {
			state = fmt.Sprintf("idle %.0fs", m.Blocking.IdleSeconds)
		}
		fmt.Fprintf(w, "  %s  thread %d  waits %.0fs for %s %s, held %s (%s) by %s  thread %d  %s  to end it: KILL %d   (printed, not run)\n",
			tagSet(m.Waiting.Tag, m.Waiting.Tags), m.Waiting.ThreadID, m.WaitSeconds, termtext.Line(m.WaitingType),
			termtext.Line(m.Object), termtext.Line(m.BlockingType), termtext.Line(strings.ToLower(m.BlockingDuration)),
			tagSet(m.Blocking.Tag, m.Blocking.Tags),
			m.Blocking.ThreadID, state, m.Blocking.ThreadID)
		if m.Waiting.Statement != "" {
			fmt.Fprintf(w, "    waiting: %s\n", shorten(m.Waiting.Statement, 100))
		}
		if m.Blocking.Statement != "" {
			fmt.Fprintf(w, "    holder's last: %s\n", shorten(m.Blocking.Statement, 100))
		}
	}
}

func renderNodes(w io.Writer, nodes []locks.ChainNode, indent string) {
	for _, n := range nodes {
		x := n.Session
		lock := "lock unknown"
		if n.Lock != nil {
			lock = strings.TrimSpace(n.Lock.Table + " " + n.Lock.Index + " " + string(n.Lock.Kind))
		}
		if n.LockData != "" {
			lock += " (" + n.LockData + ")"
		}
		modes := ""
		if n.WaitingMode != "" || n.BlockingMode != "" {
			modes = fmt.Sprintf(" wants %s, held %s", cmp.Or(n.WaitingMode, "?"), cmp.Or(n.BlockingMode, "?"))
		} else if n.Lock != nil {
			modes = " wants " + n.Lock.Mode
		}
		fmt.Fprintf(w, "%s└─ %s  thread %d  waits %.3fs for %s%s%s\n", indent, tagSet(x.Tag, x.Tags), x.ThreadID,
			n.WaitSeconds, termtext.Line(lock), termtext.Line(modes), who(x.User, x.Host, x.DB))
		if x.Statement != "" {
			fmt.Fprintf(w, "%s     running: %s\n", indent, shorten(x.Statement, 100))
		}
		renderNodes(w, n.Waiters, indent+"   ")
	}
}

// tagSet is a transaction's tag, or its tags when its statements carried
// several, on one line.
func tagSet(tag string, tags []string) string {
	if len(tags) > 1 {
		return termtext.Line(strings.Join(tags, "+"))
	}
	return termtext.Line(tag)
}

// trxLabel tells a transaction holding only shared locks (MariaDB's trx id
// 0, shared by all such) from one with its own id.
func trxLabel(id string) string {
	if id == "0" {
		return "read-only trx (no trx id)"
	}
	return "trx " + id
}

func who(user, host, db string) string {
	if user == "" && host == "" && db == "" {
		return ""
	}
	out := "  " + termtext.Line(user)
	if host != "" {
		out += "@" + termtext.Line(host)
	}
	if db != "" {
		out += " db " + termtext.Line(db)
	}
	return out
}

// shorten puts a statement on one line (its runs of white space, newlines
// included, one space; any other control character escaped) of at most n
// terminal cells.
func shorten(s string, n int) string {
	s = termtext.Line(strings.Join(strings.Fields(s), " "))
	if termtext.Width(s) <= n {
		return s
	}
	return termtext.Truncate(s, n-1) + "…"
}
