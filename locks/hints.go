package locks

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Hint kinds.
const (
	// HintLocksPerRow: rows locked in a secondary index and the clustered
	// index, two (or more) row locks per row.
	HintLocksPerRow = "locks_per_row"
	// HintGapLocks: gap, next-key or supremum locks under REPEATABLE READ.
	HintGapLocks = "gap_locks"
	// HintThreadQueue: statements wait for a thread.
	HintThreadQueue = "thread_queue"
)

// Hint is a diagnosis that applies to what a snapshot saw, with the numbers
// behind it.
type Hint struct {
	Kind  string `json:"kind"`
	Tag   string `json:"tag,omitempty"`
	Table string `json:"table,omitempty"`
	// Value is the hint's headline number: row locks per row, gap locks,
	// statements queued.
	Value float64 `json:"value"`
	Text  string  `json:"text"`
}

// locksPerRowHint is the ratio from which a table's rows count as locked
// twice.
const locksPerRowHint = 1.5

func clustered(index string) bool { return index == "PRIMARY" || index == "GEN_CLUST_INDEX" }

// rowLockRatios sums, per tag and table, the records locked in each index.
func rowLockRatios(trx []Transaction) []RowLockRatio {
	type key struct{ tag, table string }
	acc := map[key]*RowLockRatio{}
	for _, t := range trx {
		if !t.LocksKnown {
			continue
		}
		for _, l := range t.Locks {
			if !l.Kind.coversRecord() || l.Waiting {
				continue
			}
			k := key{t.Tag, l.Table}
			r := acc[k]
			if r == nil {
				r = &RowLockRatio{Tag: t.Tag, Table: l.Table, ByIndex: map[string]int{}}
				acc[k] = r
			}
			r.ByIndex[l.Index] += l.Rows
			r.Locks += l.Rows
			if clustered(l.Index) {
				r.Rows += l.Rows
			}
			r.Partial = r.Partial || t.LocksPartial
		}
	}
	out := []RowLockRatio{}
	for _, r := range acc {
		if r.Rows == 0 {
			continue // rows locked only in a secondary index: no ratio to tell
		}
		r.PerRow = float64(r.Locks) / float64(r.Rows)
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b RowLockRatio) int {
		return cmp.Or(cmp.Compare(b.PerRow, a.PerRow), cmp.Compare(a.Tag, b.Tag), cmp.Compare(a.Table, b.Table))
	})
	return out
}

// hints are the diagnoses that apply to s.
func hints(s *Snapshot) []Hint {
	out := []Hint{}
	for _, r := range s.RowLocksPerRow {
		if r.PerRow < locksPerRowHint {
			continue
		}
		var idx []string
		for _, name := range slices.Sorted(maps.Keys(r.ByIndex)) {
			if !clustered(name) {
				idx = append(idx, fmt.Sprintf("index %s %d", name, r.ByIndex[name]))
			}
		}
		for name, n := range r.ByIndex {
			if clustered(name) {
				idx = append(idx, fmt.Sprintf("%s %d", name, n))
			}
		}
		partial := ""
		if r.Partial {
			partial = " (from partly listed locks)"
		}
		out = append(out, Hint{Kind: HintLocksPerRow, Tag: r.Tag, Table: r.Table, Value: r.PerRow,
			Text: fmt.Sprintf("%s: %.1f row locks per row read on %s: %d locks on %d rows (%s)%s: secondary index + "+
				"clustered index; a locking read or write through a secondary index locks both records. A primary key "+
				"that starts with the filter columns takes one",
				r.Tag, r.PerRow, r.Table, r.Locks, r.Rows, strings.Join(idx, ", "), partial)})
	}
	out = append(out, gapHints(s.Transactions)...)
	if q := s.Saturation; q.QueueKnown && q.Queued > 0 {
		text := fmt.Sprintf("%d statement(s) wait for a thread", q.Queued)
		switch {
		case q.ThreadPool != nil:
			text += fmt.Sprintf(" in the thread pool (thread_pool_size %d, %d threads, %d active, oldest waiting %.3f s): "+
				"more statements are ready to run than the pool runs at once; Threads_running %d",
				q.ThreadPool.Size, q.ThreadPool.Threads, q.ThreadPool.ActiveThreads, q.ThreadPool.OldestQueuedSeconds, q.ThreadsRunning)
		case q.InnoDB != nil:
			text += fmt.Sprintf(" to enter InnoDB (innodb_thread_concurrency %d, %d inside): the limit is below the "+
				"concurrency the workload needs", q.InnoDB.Limit, q.InnoDB.Inside)
		}
		out = append(out, Hint{Kind: HintThreadQueue, Value: float64(q.Queued), Text: text})
	}
	return out
}

// gapHints finds gap-type locks taken under REPEATABLE READ or
// SERIALIZABLE, per tag.
func gapHints(trx []Transaction) []Hint {
	type acc struct {
		gap, nextKey, supremum int
		tables                 map[string]bool
		skipLocked             bool
		isolation              string
	}
	byTag := map[string]*acc{}
	var order []string
	for _, t := range trx {
		if !t.LocksKnown || t.Isolation != "REPEATABLE READ" && t.Isolation != "SERIALIZABLE" {
			continue
		}
		for _, l := range t.Locks {
			if !l.Kind.gapLike() || l.Waiting {
				continue
			}
			a := byTag[t.Tag]
			if a == nil {
				a = &acc{tables: map[string]bool{}, isolation: t.Isolation}
				byTag[t.Tag] = a
				order = append(order, t.Tag)
			}
			switch l.Kind {
			case KindGap:
				a.gap += l.Rows
			case KindNextKey:
				a.nextKey += l.Rows
			case KindSupremum:
				a.supremum += l.Rows
			}
			a.tables[l.Table] = true
			a.skipLocked = a.skipLocked || strings.Contains(strings.ToUpper(t.Statement), "SKIP LOCKED")
		}
	}
	var out []Hint
	slices.Sort(order)
	for _, tag := range order {
		a := byTag[tag]
		n := a.gap + a.nextKey + a.supremum
		queue := ""
		if a.skipLocked {
			queue = " on a queue-like read (SKIP LOCKED)"
		}
		out = append(out, Hint{Kind: HintGapLocks, Tag: tag, Table: strings.Join(slices.Sorted(maps.Keys(a.tables)), ", "),
			Value: float64(n),
			Text: fmt.Sprintf("%s: %d gap/next-key locks under %s%s on %s (gap %d, next-key %d, supremum %d): they "+
				"block inserts into the locked ranges (a refill) and can deadlock with them; READ COMMITTED takes none",
				tag, n, a.isolation, queue, strings.Join(slices.Sorted(maps.Keys(a.tables)), ", "), a.gap, a.nextKey, a.supremum)})
	}
	return out
}

// TagKindCount is what the transactions of one tag hold of one kind of
// lock: a bounded series (tags x Kinds) for a collector to export.
type TagKindCount struct {
	Tag  string `json:"tag"`
	Kind Kind   `json:"kind"`
	// Locks counts rows (record kinds) or tables (table kinds) held;
	// Waiting the locks of that kind the tag's transactions wait for.
	Locks   int `json:"locks"`
	Waiting int `json:"waiting"`
}

// LocksByTagKind sums the snapshot's locks per tag and kind, over the
// transactions whose locks are known, sorted by tag then kind.
func (s *Snapshot) LocksByTagKind() []TagKindCount {
	type key struct {
		tag  string
		kind Kind
	}
	acc := map[key]*TagKindCount{}
	for _, t := range s.Transactions {
		for _, l := range t.Locks {
			k := key{t.Tag, l.Kind}
			c := acc[k]
			if c == nil {
				c = &TagKindCount{Tag: t.Tag, Kind: l.Kind}
				acc[k] = c
			}
			if l.Waiting {
				c.Waiting += l.Rows
			} else {
				c.Locks += l.Rows
			}
		}
	}
	out := make([]TagKindCount, 0, len(acc))
	for _, c := range acc {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b TagKindCount) int {
		return cmp.Or(cmp.Compare(a.Tag, b.Tag), cmp.Compare(slices.Index(Kinds, a.Kind), slices.Index(Kinds, b.Kind)))
	})
	return out
}
