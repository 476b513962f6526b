package reservation

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Group commit of claims and releases.
//
// A claim of a hot item used to be a transaction of its own that updated
// the item's ledger row and held that row's lock through COMMIT: claims of
// one item ran one at a time, at the speed of one COMMIT each. Now the
// claims (and, apart, the releases) of one shop that arrive while a group
// of them is in flight queue, and the next group ends up to groupMax of
// them in one transaction: one locking read of their reservation rows, one
// read and one delete of what they hold, one update of their states (each
// with its own call's token, so a lost COMMIT reply is still resolved per
// call), and last, just before COMMIT, one update of each ledger row the
// group touches (a release group instead returns units to the pools). The
// ledger stays the single source of truth, updated once per group.
//
// Each call keeps its own retrier: a group that fails (a deadlock, a lost
// connection, a lost COMMIT reply) fails every member that it would have
// changed, and each one retries on its own, in a later group.

// One group per shop and operation is in flight at a time: with two or
// four in flight, claims and releases were slower on this project's 2-core
// machine (BenchmarkClaim, BenchmarkReleaseGroup: fewer, larger groups
// do fewer round trips per call).

// groupMax bounds the claims or releases one transaction ends: it bounds
// the statements' size and the rows one transaction locks.
const groupMax = 100

// groupReq is one Claim or Release waiting for, or in, a group.
type groupReq struct {
	id    string
	token uint64
	done  chan groupResult // buffered: the leader never waits on a member
}

// groupResult is what a group did for one member.
type groupResult struct {
	lead bool // no result: the member leads the next group

	// read: the group locked the member's reservation row and read it
	// (state, due, ended), so a lost COMMIT of the member's earlier attempt
	// is resolved, whatever the group's own outcome.
	read  bool
	found bool
	state State
	due   bool
	ended uint64

	// wrote: the group's transaction ended the member's hold, and its
	// COMMIT returned err (nil, or an *inDoubtError).
	wrote  bool
	pooled []keyQty // release: the units of the member that went back to pools
	err    error
}

// groupQueue is the queue of one operation in one shop: at most one group
// of it is in flight, and the calls that arrive meanwhile form the next.
type groupQueue struct {
	mu      sync.Mutex
	busy    bool
	pending []*groupReq
}

type groupKey struct {
	op     string
	shopID uint64
}

// groups holds the queues that have work; an idle queue is removed.
type groups struct {
	mu sync.Mutex
	q  map[groupKey]*groupQueue
}

// run adds req to the queue of k and returns its result. The first caller
// finding no group in flight leads: it takes every pending call (itself
// first) up to groupMax into one group and runs it with do, on a context
// that no member's cancellation ends (bounded by Config.RetryBudget
// instead), hands out the results, and passes the lead to the oldest
// call still pending. A member whose ctx ends before a group took it
// leaves with ctx's error, nothing done.
func (e *Engine) inGroup(ctx context.Context, k groupKey, req *groupReq,
	do func(ctx context.Context, batch []*groupReq) []groupResult) groupResult {
	e.groups.mu.Lock()
	if e.groups.q == nil {
		e.groups.q = make(map[groupKey]*groupQueue)
	}
	q := e.groups.q[k]
	if q == nil {
		q = &groupQueue{}
		e.groups.q[k] = q
	}
	q.mu.Lock() // under groups.mu: an idle queue is removed under both locks
	e.groups.mu.Unlock()
	q.pending = append(q.pending, req)
	if q.busy {
		q.mu.Unlock()
		if e.groupQueued != nil {
			e.groupQueued(k.op)
		}
		var res groupResult
		select {
		case res = <-req.done:
		case <-ctx.Done():
			q.mu.Lock()
			if i := slices.Index(q.pending, req); i >= 0 {
				q.pending = slices.Delete(q.pending, i, i+1)
				q.mu.Unlock()
				return groupResult{err: context.Cause(ctx)}
			}
			q.mu.Unlock()
			res = <-req.done // a group took it: wait for its result
		}
		if !res.lead {
			return res
		}
		q.mu.Lock()
	}
	q.busy = true
	batch := q.take(req)
	q.mu.Unlock()

	if e.groupLead != nil {
		e.groupLead(k.op, len(batch))
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RetryBudget)
	results := do(gctx, batch)
	cancel()
	for i, m := range batch[1:] {
		m.done <- results[i+1]
	}
	e.groups.mu.Lock()
	q.mu.Lock()
	if len(q.pending) > 0 {
		next := q.pending[0]
		q.pending = q.pending[1:]
		next.done <- groupResult{lead: true}
	} else {
		q.busy = false
		delete(e.groups.q, k)
	}
	q.mu.Unlock()
	e.groups.mu.Unlock()
	return results[0]
}

// take removes lead and up to groupMax-1 other pending calls from the
// queue and returns them, lead first. A call whose reservation id is
// already in the group stays pending for the next one: a transaction must
// not end one hold twice.
func (q *groupQueue) take(lead *groupReq) []*groupReq {
	batch := []*groupReq{lead}
	rest := q.pending[:0]
	for _, m := range q.pending {
		switch {
		case m == lead:
		case len(batch) < groupMax && !slices.ContainsFunc(batch, func(b *groupReq) bool { return b.id == m.id }):
			batch = append(batch, m)
		default:
			rest = append(rest, m)
		}
	}
	clear(q.pending[len(rest):])
	q.pending = rest
	return batch
}

// groupAttempt is one attempt of a Claim or Release through a group: it
// resolves an earlier lost COMMIT of the call from what the group read,
// and records the effects of the group's write for the call.
func (e *Engine) groupAttempt(ctx context.Context, r *retrier, op string, shopID uint64, id string, token uint64) (groupResult, error) {
	req := &groupReq{id: id, token: token, done: make(chan groupResult, 1)}
	do := e.claimGroup
	if op == opRelease {
		do = e.releaseGroup
	}
	res := e.inGroup(ctx, groupKey{op, shopID}, req, func(ctx context.Context, batch []*groupReq) []groupResult {
		return do(ctx, shopID, batch)
	})
	if res.read {
		if !res.found {
			r.resolved(false)
		} else {
			r.resolved(res.state != StateHeld && res.ended == token)
			if res.state != StateHeld && res.ended != token {
				e.settle(res.ended) // an earlier call of this engine that could not learn its outcome
			}
		}
	}
	if res.wrote {
		effects := func() { e.stats.claims.Add(1) }
		if op == opRelease {
			pooled := res.pooled
			effects = func() {
				e.stats.releases.Add(1)
				e.returned(pooled)
			}
		}
		var d *inDoubtError
		switch {
		case res.err == nil:
			effects()
		case errors.As(res.err, &d):
			r.doubt, r.lost = d.err, effects
		}
	}
	return res, res.err
}

// errDue marks a member of a claim group whose hold is due: the claim
// expires it in a transaction of its own (claimOnce).
var errDue = errors.New("reservation: hold due")

// lockGroup locks the reservation rows of a group and returns, per member,
// what it read. The rows are locked in primary key order, as every
// transaction that locks several does.
func lockGroup(ctx context.Context, tx *sql.Tx, shopID uint64, batch []*groupReq) ([]groupResult, error) {
	var q strings.Builder
	q.WriteString(lockReservationsPrefix)
	args := make([]any, 0, 1+len(batch))
	args = append(args, shopID)
	for i, m := range batch {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteByte('?')
		args = append(args, m.id)
	}
	q.WriteString(lockReservationsSuffix)
	rows, err := tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	res := make([]groupResult, len(batch))
	for i := range res {
		res[i].read = true // a member whose row is not found: not found
	}
	for rows.Next() {
		var id, state string
		var due bool
		var ended uint64
		if err := rows.Scan(&id, &state, &due, &ended); err != nil {
			return nil, classify(err)
		}
		i := slices.IndexFunc(batch, func(m *groupReq) bool { return m.id == id })
		if i < 0 {
			return nil, fmt.Errorf("reservation: internal error: locked reservation %q is not in the group", id)
		}
		res[i].found, res[i].state, res[i].due, res[i].ended = true, State(state), due, ended
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	return res, nil
}

// readHeldGroup returns what the reservations ids hold, per id, in (item,
// group) order.
func readHeldGroup(ctx context.Context, tx *sql.Tx, shopID uint64, ids []string) (map[string][]keyQty, error) {
	q, args := inIDs(selectReservedGroupPrefix, shopID, ids)
	rows, err := tx.QueryContext(ctx, q+selectReservedGroupSuffix, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	held := make(map[string][]keyQty, len(ids))
	for rows.Next() {
		var id string
		l := keyQty{key: ItemKey{ShopID: shopID}}
		if err := rows.Scan(&id, &l.key.ItemID, &l.key.GroupID, &l.qty); err != nil {
			return nil, classify(err)
		}
		held[id] = append(held[id], l)
	}
	return held, classify(rows.Err())
}

// inIDs returns prefix followed by one placeholder per id and ")", and the
// arguments: shopID, then the ids.
func inIDs(prefix string, shopID uint64, ids []string) (string, []any) {
	var q strings.Builder
	q.WriteString(prefix)
	args := make([]any, 0, 1+len(ids))
	args = append(args, shopID)
	for i, id := range ids {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteByte('?')
		args = append(args, id)
	}
	q.WriteByte(')')
	return q.String(), args
}

// endGroup ends the holds of the members to end (indexes into batch):
// deletes what they hold and sets each one's state, marked with its own
// token. It returns what each held.
func endGroup(ctx context.Context, tx *sql.Tx, shopID uint64, batch []*groupReq, end []int, state State) (map[string][]keyQty, error) {
	ids := make([]string, len(end))
	for i, m := range end {
		ids[i] = batch[m].id
	}
	held, err := readHeldGroup(ctx, tx, shopID, ids)
	if err != nil {
		return nil, err
	}
	q, args := inIDs(deleteReservedGroupPrefix, shopID, ids)
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return nil, classify(err)
	}
	var b strings.Builder
	b.WriteString(setStateGroupPrefix)
	sargs := make([]any, 0, 2+3*len(end))
	sargs = append(sargs, state)
	for _, m := range end {
		b.WriteString(setStateGroupWhen)
		sargs = append(sargs, batch[m].id, batch[m].token)
	}
	b.WriteString(setStateGroupMiddle)
	sargs = append(sargs, shopID)
	for i, m := range end {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('?')
		sargs = append(sargs, batch[m].id)
	}
	b.WriteByte(')')
	res, err := tx.ExecContext(ctx, b.String(), sargs...)
	if err != nil {
		return nil, classify(err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(end)) {
		return nil, errors.Join(classify(err), fmt.Errorf("reservation: internal error: ended %d of the %d locked holds", n, len(end)))
	}
	return held, nil
}

// claimGroup claims every held, not due member of batch in one
// transaction, the ledger rows updated last.
func (e *Engine) claimGroup(ctx context.Context, shopID uint64, batch []*groupReq) []groupResult {
	var res []groupResult
	err := func() error {
		tx, err := e.begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if res, err = lockGroup(ctx, tx, shopID, batch); err != nil {
			return err
		}
		var claim []int
		for i := range res {
			switch m := &res[i]; {
			case !m.found:
				m.err = ErrNotFound
			case m.state == StateReleased:
				m.err = ErrReleased
			case m.state == StateExpired:
				m.err = ErrExpired
			case m.state == StateHeld && m.due:
				m.err = errDue
			case m.state == StateHeld:
				claim = append(claim, i)
			}
		}
		if len(claim) == 0 {
			return nil
		}
		held, err := endGroup(ctx, tx, shopID, batch, claim, StateClaimed)
		if err != nil {
			return err
		}
		var lines []keyQty
		for _, i := range claim {
			lines = append(lines, held[batch[i].id]...)
			res[i].wrote = true
		}
		if err := claimLedgers(ctx, tx, shopID, mergeKeyQty(lines)); err != nil {
			return err
		}
		err = commit(ctx, tx)
		for _, i := range claim {
			res[i].err = err
		}
		return nil
	}()
	if err != nil {
		return groupFailed(res, len(batch), err)
	}
	return res
}

// groupFailed gives every member err, keeping what the group read: the
// transaction rolled back, nothing of it was written.
func groupFailed(res []groupResult, n int, err error) []groupResult {
	if res == nil {
		res = make([]groupResult, n)
	}
	for i := range res {
		res[i].wrote, res[i].pooled, res[i].err = false, nil, err
	}
	return res
}

// claimLedgers moves the claimed quantities from on hand to claimed, one
// statement for every ledger row of the group (lines in key order, the
// order in which it locks them).
func claimLedgers(ctx context.Context, tx *sql.Tx, shopID uint64, lines []keyQty) error {
	var b strings.Builder
	args := make([]any, 0, 10*len(lines))
	b.WriteString(claimLedgersOnHand)
	for _, l := range lines {
		b.WriteString(claimLedgersWhen)
		args = append(args, l.key.ItemID, l.key.GroupID, l.qty)
	}
	b.WriteString(claimLedgersClaimed)
	for _, l := range lines {
		b.WriteString(claimLedgersWhen)
		args = append(args, l.key.ItemID, l.key.GroupID, l.qty)
	}
	b.WriteString(claimLedgersWhere)
	args = append(args, shopID)
	for i, l := range lines {
		if i > 0 {
			b.WriteString(claimLedgersOr)
		}
		b.WriteString(claimLedgersRow)
		args = append(args, l.key.ItemID, l.key.GroupID)
	}
	b.WriteByte(')')
	res, err := tx.ExecContext(ctx, b.String(), args...)
	if err != nil {
		return classify(err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(lines)) {
		return errors.Join(classify(err), fmt.Errorf("reservation: internal error: claims changed %d of %d ledger rows", n, len(lines)))
	}
	return nil
}

// releaseGroup releases every held member of batch in one transaction,
// returning their units to the pools last.
func (e *Engine) releaseGroup(ctx context.Context, shopID uint64, batch []*groupReq) []groupResult {
	var res []groupResult
	err := func() error {
		tx, err := e.begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if res, err = lockGroup(ctx, tx, shopID, batch); err != nil {
			return err
		}
		var release []int
		for i := range res {
			switch m := &res[i]; {
			case !m.found:
				m.err = ErrNotFound
			case m.state == StateClaimed:
				m.err = ErrClaimed
			case m.state == StateHeld:
				release = append(release, i)
			}
		}
		if len(release) == 0 {
			return nil
		}
		held, err := endGroup(ctx, tx, shopID, batch, release, StateReleased)
		if err != nil {
			return err
		}
		var lines []keyQty
		for _, i := range release {
			lines = append(lines, held[batch[i].id]...)
			res[i].wrote = true
		}
		pooled, err := e.returnUnits(ctx, tx, slices.Clone(lines))
		if err != nil {
			return err
		}
		// The pools took the first units of each key: hand them to the
		// members in order, for each one's effects on the pool depth.
		room := make(map[ItemKey]int64, len(pooled))
		for _, p := range pooled {
			room[p.key] = p.qty
		}
		for _, i := range release {
			for _, l := range held[batch[i].id] {
				put := min(l.qty, room[l.key])
				room[l.key] -= put
				res[i].pooled = append(res[i].pooled, keyQty{l.key, put})
			}
		}
		err = commit(ctx, tx)
		for _, i := range release {
			res[i].err = err
		}
		return nil
	}()
	if err != nil {
		return groupFailed(res, len(batch), err)
	}
	return res
}
