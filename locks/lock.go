package locks

import (
	"cmp"
	"slices"
	"strings"
)

// Kind is what a lock covers. The set is fixed and small, so it is a safe
// metric label.
type Kind string

const (
	// KindRecord locks an index record only ("locks rec but not gap",
	// REC_NOT_GAP): what a READ COMMITTED locking read or a unique-key
	// lookup takes.
	KindRecord Kind = "record"
	// KindGap locks the gap before a record ("locks gap before rec", GAP):
	// it blocks inserts into the gap, and conflicts with nothing else.
	KindGap Kind = "gap"
	// KindNextKey locks a record and the gap before it (plain "lock_mode X"
	// in the status text): REPEATABLE READ's default for locking reads.
	KindNextKey Kind = "next_key"
	// KindInsertIntention is the gap lock an INSERT asks for; it waits for
	// gap and next-key locks of others.
	KindInsertIntention Kind = "insert_intention"
	// KindSupremum locks the gap after the last record of a page (heap no
	// 1, "supremum pseudo-record"): the end of a range that a read found
	// empty or scanned to its end.
	KindSupremum Kind = "supremum"
	// KindTableIntention is a table lock IS or IX, taken before any row
	// lock of the table; intention locks conflict only with whole-table
	// locks.
	KindTableIntention Kind = "table_intention"
	// KindTable is a whole-table S or X lock (LOCK TABLES, some DDL).
	KindTable Kind = "table"
	// KindAutoInc is the table-level AUTO-INC lock of a bulk insert.
	KindAutoInc Kind = "auto_inc"
)

// Kinds lists every Kind, in the order reports show them.
var Kinds = []Kind{KindRecord, KindNextKey, KindGap, KindSupremum, KindInsertIntention,
	KindTableIntention, KindTable, KindAutoInc}

// gapLike reports whether a kind locks a gap: what REPEATABLE READ takes and
// READ COMMITTED does not (except for foreign key and duplicate key checks).
func (k Kind) gapLike() bool { return k == KindGap || k == KindNextKey || k == KindSupremum }

// coversRecord reports whether a kind locks an index record (a row read or
// written through that index).
func (k Kind) coversRecord() bool { return k == KindRecord || k == KindNextKey }

// Lock is one kind of lock a transaction holds or waits for, on one table
// and index, with the number of rows it covers.
type Lock struct {
	Table string `json:"table"`           // schema.table
	Index string `json:"index,omitempty"` // "" for table locks
	Kind  Kind   `json:"kind"`
	// Mode is S, X, IS, IX or AUTO-INC.
	Mode    string `json:"mode"`
	Waiting bool   `json:"waiting,omitempty"`
	// Rows counts the records (or gaps) locked; 1 for a table lock.
	Rows int `json:"rows"`
}

func (l Lock) key() Lock { l.Rows = 0; return l }

// String is the lock as reports print it: table index kind mode.
func (l Lock) String() string {
	var b strings.Builder
	b.WriteString(l.Table)
	if l.Index != "" {
		b.WriteString(" ")
		b.WriteString(l.Index)
	}
	b.WriteString(" ")
	b.WriteString(string(l.Kind))
	b.WriteString(" ")
	b.WriteString(l.Mode)
	if l.Waiting {
		b.WriteString(" (waiting)")
	}
	return b.String()
}

// lockSet aggregates locks by table, index, kind, mode and state.
type lockSet struct {
	locks []Lock
	index map[Lock]int
}

func (s *lockSet) add(l Lock) {
	k := l.key()
	if i, ok := s.index[k]; ok {
		s.locks[i].Rows += l.Rows
		return
	}
	if s.index == nil {
		s.index = map[Lock]int{}
	}
	s.index[k] = len(s.locks)
	s.locks = append(s.locks, l)
}

// sortLocks orders locks by table, index, kind (in Kinds order), mode.
func sortLocks(ls []Lock) {
	order := func(k Kind) int {
		if i := slices.Index(Kinds, k); i >= 0 {
			return i
		}
		return len(Kinds)
	}
	slices.SortFunc(ls, func(a, b Lock) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), cmp.Compare(a.Index, b.Index),
			cmp.Compare(order(a.Kind), order(b.Kind)), cmp.Compare(a.Mode, b.Mode),
			cmpBool(a.Waiting, b.Waiting))
	})
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// tableName turns `db`.`t` (or `db/t`, old formats) into db.t, dropping a
// partition comment.
func tableName(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, " /*"); i >= 0 {
		s = s[:i]
	}
	s = strings.ReplaceAll(s, "`.`", ".")
	s = strings.ReplaceAll(s, "/", ".")
	return strings.Trim(s, "`")
}

// recordKind is the kind of one locked record, from the lock's flags and
// whether the record is the page's supremum.
func recordKind(gap, recNotGap, insertIntention, supremum bool) Kind {
	switch {
	case insertIntention:
		return KindInsertIntention
	case supremum:
		return KindSupremum
	case gap:
		return KindGap
	case recNotGap:
		return KindRecord
	}
	return KindNextKey
}

// tableKind is the kind of a table lock of mode m.
func tableKind(mode string) Kind {
	switch mode {
	case "IS", "IX":
		return KindTableIntention
	case "AUTO-INC", "AUTO_INC":
		return KindAutoInc
	}
	return KindTable
}

// parseModeList parses a lock mode as performance_schema.data_locks and
// information_schema.INNODB_LOCKS write it: "X", "X,REC_NOT_GAP",
// "X,GAP,INSERT_INTENTION", "IX", "AUTO_INC".
func parseModeList(s string) (mode string, gap, recNotGap, insertIntention bool) {
	parts := strings.Split(s, ",")
	mode = strings.TrimSpace(parts[0])
	if mode == "AUTO_INC" {
		mode = "AUTO-INC"
	}
	for _, p := range parts[1:] {
		switch strings.TrimSpace(p) {
		case "GAP":
			gap = true
		case "REC_NOT_GAP":
			recNotGap = true
		case "INSERT_INTENTION":
			insertIntention = true
		}
	}
	return mode, gap, recNotGap, insertIntention
}
