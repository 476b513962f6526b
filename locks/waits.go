package locks

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
)

// waitRow is one row of the server's lock-wait table, before the two sides
// are resolved to sessions.
type waitRow struct {
	waiterTrx, blockerTrx       string
	waiterThread, blockerThread int64 // MySQL 8: exact; MariaDB: 0 (resolved from the locks)
	requestedID, blockingID     string
	requested, blocking         lockInfo
}

// lockInfo is one row of INNODB_LOCKS or data_locks.
type lockInfo struct {
	known                   bool
	trxID                   string
	table, index, typ, mode string
	data                    string
	space, page, heap       int64
}

func (l lockInfo) lock(waiting bool) *Lock {
	if !l.known {
		return nil
	}
	x := dataLock(l.table, l.index, l.typ, l.mode, waiting, l.data == "supremum pseudo-record", 1)
	return &x
}

// readWaitRows reads the lock-wait table and the locks it names, right
// after INNODB_TRX: MariaDB serves the three from one cache, refreshed
// after 100 ms without a read, so reading them together reads one instant.
func readWaitRows(ctx context.Context, conn *sql.Conn, f Flavor) ([]waitRow, error) {
	if f == MySQL {
		return readWaitRowsMySQL8(ctx, conn)
	}
	locks := map[string][]lockInfo{}
	rows, err := conn.QueryContext(ctx, queryLocksMariaDB)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var l lockInfo
		var trx, mode, typ, table, index, data sql.NullString
		var space, page, heap sql.NullInt64
		if err := rows.Scan(&id, &trx, &mode, &typ, &table, &index, &space, &page, &heap, &data); err != nil {
			rows.Close()
			return nil, err
		}
		l = lockInfo{known: true, trxID: trx.String, mode: mode.String, typ: typ.String, table: table.String,
			index: index.String, data: data.String, space: nullOr(space), page: nullOr(page), heap: nullOr(heap)}
		if !slices.Contains(locks[id], l) {
			locks[id] = append(locks[id], l)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = conn.QueryContext(ctx, queryLockWaitRowsMariaDB)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []waitRow
	for rows.Next() {
		var w waitRow
		if err := rows.Scan(&w.waiterTrx, &w.requestedID, &w.blockerTrx, &w.blockingID); err != nil {
			return nil, err
		}
		// Two holders with trx id 0 can print the same lock id: either
		// row describes the lock (table, record, mode) alike.
		if ls := locks[w.requestedID]; len(ls) > 0 {
			w.requested = ls[0]
		}
		if ls := locks[w.blockingID]; len(ls) > 0 {
			w.blocking = ls[0]
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

func readWaitRowsMySQL8(ctx context.Context, conn *sql.Conn) ([]waitRow, error) {
	rows, err := conn.QueryContext(ctx, queryWaitsMySQL8)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []waitRow
	for rows.Next() {
		var w waitRow
		var rTable, rIndex, rType, rMode, rData, bMode, bData sql.NullString
		if err := rows.Scan(&w.waiterTrx, &w.blockerTrx, &w.waiterThread, &w.blockerThread, &w.requestedID, &w.blockingID,
			&rTable, &rIndex, &rType, &rMode, &rData, &bMode, &bData); err != nil {
			return nil, err
		}
		if rTable.Valid {
			w.requested = lockInfo{known: true, trxID: w.waiterTrx, table: rTable.String, index: rIndex.String,
				typ: rType.String, mode: rMode.String, data: rData.String}
			w.blocking = lockInfo{known: bMode.Valid, trxID: w.blockerTrx, table: rTable.String, index: rIndex.String,
				typ: rType.String, mode: bMode.String, data: bData.String}
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

func nullOr(n sql.NullInt64) int64 {
	if !n.Valid {
		return -1
	}
	return n.Int64
}

// resolveWaits names both sides of every wait from the locks themselves.
// MySQL 8's data_lock_waits names the threads. MariaDB's INNODB_LOCK_WAITS
// names transactions by trx id, which is 0 for every transaction holding
// only shared locks: a trx id names a session only when one transaction
// has it; otherwise the blocker is the session whose granted lock, in the
// status text, is the blocking lock (same trx id, tablespace, page and
// heap number, or table). When neither tells, the blocker is unknown.
func resolveWaits(rows []waitRow, trx []*Transaction, st *Status) (waits []Wait, unresolved int) {
	byThread := map[int64]*Transaction{}
	byTrx := map[string][]*Transaction{}
	byRequested := map[string][]*Transaction{}
	for _, t := range trx {
		byThread[t.ThreadID] = t
		byTrx[t.TrxID] = append(byTrx[t.TrxID], t)
		if t.requestedLockID != "" {
			byRequested[t.requestedLockID] = append(byRequested[t.requestedLockID], t)
		}
	}
	// Granted locks of the status text, by where the server keeps them.
	holders := map[string][]int64{}
	if st != nil {
		for _, x := range st.Transactions {
			for _, g := range x.Granted {
				k := refKey(g.TrxID, g.Table, g.Space, g.Page, g.Heap)
				if !slices.Contains(holders[k], x.ThreadID) {
					holders[k] = append(holders[k], x.ThreadID)
				}
			}
		}
	}
	seen := map[[2]string]bool{}
	for _, r := range rows {
		var waiters, blockers []*Transaction
		if r.waiterThread > 0 {
			if t := byThread[r.waiterThread]; t != nil {
				waiters = []*Transaction{t}
			}
		} else {
			waiters = byRequested[r.requestedID]
			if len(waiters) == 0 && len(byTrx[r.waiterTrx]) == 1 {
				waiters = byTrx[r.waiterTrx]
			}
		}
		blockerKnown := false
		switch {
		case r.blockerThread > 0:
			if t := byThread[r.blockerThread]; t != nil {
				blockers = []*Transaction{t}
			}
			blockerKnown = true
		case len(byTrx[r.blockerTrx]) == 1 && r.blockerTrx != "0":
			blockers, blockerKnown = byTrx[r.blockerTrx], true
		case r.blocking.known:
			b := r.blocking
			heap := b.heap
			if b.typ == "TABLE" {
				heap = -1
			}
			for _, th := range holders[refKey(b.trxID, tableName(b.table), b.space, b.page, heap)] {
				if t := byThread[th]; t != nil {
					blockers = append(blockers, t)
				}
			}
			blockerKnown = len(blockers) > 0
		}
		if len(waiters) == 0 {
			waiters = []*Transaction{nil}
		}
		if !blockerKnown {
			unresolved++
		}
		if len(blockers) == 0 {
			blockers = []*Transaction{nil}
		}
		for _, wt := range waiters {
			for _, bt := range blockers {
				if wt != nil && bt == wt {
					continue
				}
				w := Wait{Waiting: refOf(wt, r.waiterTrx, r.waiterThread), Blocking: refOf(bt, r.blockerTrx, r.blockerThread)}
				if bt == nil {
					w.Blocking.ThreadID = 0
				}
				k := [2]string{sideKey(w.Waiting, r.requestedID), sideKey(w.Blocking, r.blockingID)}
				if seen[k] {
					continue
				}
				seen[k] = true
				if wt != nil {
					w.WaitSeconds = wt.WaitSeconds
					if wt.WaitingFor != nil {
						// The status text and data_locks say the kind
						// exactly; INNODB_LOCKS drops REC_NOT_GAP and insert
						// intention.
						l := *wt.WaitingFor
						w.Lock = &l
					}
				}
				if w.Lock == nil {
					w.Lock = r.requested.lock(true)
				}
				if r.blocking.known {
					w.BlockingMode = r.blocking.mode
					w.LockData = r.blocking.data
				}
				if r.requested.known {
					w.WaitingMode = r.requested.mode
					w.LockData = cmp.Or(w.LockData, r.requested.data)
				}
				waits = append(waits, w)
			}
		}
	}
	slices.SortStableFunc(waits, func(a, b Wait) int {
		return cmp.Or(cmp.Compare(a.Blocking.ThreadID, b.Blocking.ThreadID), cmp.Compare(a.Waiting.ThreadID, b.Waiting.ThreadID))
	})
	return waits, unresolved
}

func refKey(trx, table string, space, page, heap int64) string {
	if heap < 0 {
		return trx + "|" + table
	}
	return trx + "|" + strconv.FormatInt(space, 10) + ":" + strconv.FormatInt(page, 10) + ":" + strconv.FormatInt(heap, 10)
}

func sideKey(r TrxRef, lockID string) string {
	if r.ThreadID > 0 {
		return strconv.FormatInt(r.ThreadID, 10)
	}
	return "?" + r.TrxID + "/" + lockID
}

// refOf names one side of a wait; t nil: not known.
func refOf(t *Transaction, trxID string, thread int64) TrxRef {
	if t == nil {
		return TrxRef{TrxID: trxID, ThreadID: thread, Tag: UnknownTag}
	}
	return TrxRef{TrxID: t.TrxID, ThreadID: t.ThreadID, Tag: t.Tag, Tags: t.Tags, Statement: t.Statement, Idle: t.Idle,
		IdleSeconds: t.IdleSeconds, User: t.User, Host: t.Host, DB: t.DB}
}

// unresolvedNote says why blockers are unknown.
func unresolvedNote(n int, lockOutput bool) string {
	why := "their trx id is shared (MariaDB gives every transaction holding only shared locks trx id 0)"
	if !lockOutput {
		return fmt.Sprintf("%d lock wait(s) have an unknown blocker: %s and innodb_status_output_locks is OFF, so the "+
			"granted locks that would name it are not listed; turn it on (`%s`) to name them", n, why, setLockOutputOn)
	}
	return fmt.Sprintf("%d lock wait(s) have an unknown blocker: %s and the status text does not list the blocking "+
		"lock (it lists 10 lock structures per transaction, or the transaction ended between the reads)", n, why)
}
