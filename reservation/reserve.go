package reservation

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/holdtime/holdtime/conntag"
)

// Line is one line of a cart.
type Line struct {
	ItemID   uint64
	Quantity int64
	// GroupIDs are the location groups that may fulfil the line, in
	// priority order. A line takes units from the first group that has
	// them, and is split over groups when one has too few.
	GroupIDs []uint64
}

// ReserveParams is a cart to reserve.
type ReserveParams struct {
	ShopID uint64
	// ReservationID is the idempotency key (at most 64 ASCII bytes): a
	// retry with the same id returns the same reservation.
	ReservationID string
	Lines         []Line
	// TTL is how long the hold lasts before expiry returns it to the pool.
	// Default Config.TTL.
	TTL time.Duration
	// InTx, when set, runs inside the reserve transaction after the holds
	// are written and before the commit (for example to insert an order
	// row atomically with the hold). It may run more than once: a failed
	// attempt is rolled back and retried. An error from it aborts Reserve.
	InTx func(ctx context.Context, tx *sql.Tx) error
}

// State is where a reservation is in its life.
type State string

const (
	StateHeld     State = "held"
	StateClaimed  State = "claimed"
	StateReleased State = "released"
	StateExpired  State = "expired"
)

// ReservedLine is the quantity held in one location group.
type ReservedLine struct {
	ItemID   uint64
	GroupID  uint64
	Quantity int64
}

// Reservation is a hold on units.
type Reservation struct {
	ShopID uint64
	ID     string
	State  State
	// ExpiresAt is when the hold expires. The database clock decides; for
	// a new reservation this is the application's estimate (start + TTL).
	ExpiresAt time.Time
	// Lines are what is held per item and location group. Empty once the
	// reservation is no longer held.
	Lines []ReservedLine
}

// part is the quantity one attempt takes from one location group for a line.
type part struct {
	line     int
	groupIdx int // index into the line's GroupIDs
	key      ItemKey
	qty      int64
}

// validID checks an idempotency key: 1 to 64 printable ASCII bytes.
func validID(name, id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("reservation: %s must be 1 to 64 bytes, got %d", name, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("reservation: %s must be printable ASCII (use a UUID or an order number)", name)
		}
	}
	return nil
}

func (p ReserveParams) validate(maxLines int) error {
	if err := validID("ReservationID", p.ReservationID); err != nil {
		return err
	}
	if len(p.Lines) == 0 || len(p.Lines) > maxLines {
		return fmt.Errorf("reservation: a cart needs 1 to %d lines (Config.MaxLines), got %d", maxLines, len(p.Lines))
	}
	for i, l := range p.Lines {
		if l.Quantity <= 0 || l.Quantity > maxPoolSize {
			return fmt.Errorf("reservation: line %d quantity %d must be 1 to %d", i, l.Quantity, maxPoolSize)
		}
		if len(l.GroupIDs) == 0 {
			return fmt.Errorf("reservation: line %d (item %d) names no location group", i, l.ItemID)
		}
	}
	if p.TTL < 0 {
		return fmt.Errorf("reservation: TTL %v is negative", p.TTL)
	}
	return nil
}

// Reserve holds the units of every line of a cart, all or nothing, in one
// short READ COMMITTED transaction. It returns ErrInsufficientStock when the
// ledger cannot cover a line, and an error matching ErrRetryable when
// contention or database errors outlast Config.RetryBudget.
func (e *Engine) Reserve(ctx context.Context, p ReserveParams) (*Reservation, error) {
	if err := p.validate(e.cfg.MaxLines); err != nil {
		return nil, err
	}
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Reserve)
	start := time.Now()
	res, err := e.reserve(ctx, p)
	e.metrics.op(ctx, opReserve, start, err)
	if err != nil {
		return nil, fmt.Errorf("reservation: reserve %s: %w", p.ReservationID, err)
	}
	return res, nil
}

func (e *Engine) reserve(ctx context.Context, p ReserveParams) (*Reservation, error) {
	ttl := cmp.Or(p.TTL, e.cfg.TTL)
	parts := make([]part, len(p.Lines))
	for i, l := range p.Lines {
		parts[i] = part{line: i, key: ItemKey{p.ShopID, l.ItemID, l.GroupIDs[0]}, qty: l.Quantity}
	}
	r := e.newRetrier(opReserve, true)
	token := newToken()
	r.token = token
	var sent *Reservation // what the attempt whose COMMIT reply was lost reserved
	for {
		if r.doubt != nil {
			mine, err := e.resolveReserve(ctx, r, p.ShopID, p.ReservationID, token)
			if err == nil && mine {
				return sent, nil
			}
			if err != nil {
				if err = r.again(ctx, err); err != nil {
					return nil, err
				}
				continue
			}
			// Not committed: try again (and if another call with this id
			// made the reservation meanwhile, find it).
		}
		start := time.Now()
		short, err := e.reserveOnce(ctx, r, p, parts, ttl, token)
		if err == nil && short == nil {
			return &Reservation{ShopID: p.ShopID, ID: p.ReservationID, State: StateHeld,
				ExpiresAt: start.Add(ttl), Lines: heldLines(parts)}, nil
		}
		var d *inDoubtError
		if errors.As(err, &d) {
			sent = &Reservation{ShopID: p.ShopID, ID: p.ReservationID, State: StateHeld,
				ExpiresAt: start.Add(ttl), Lines: heldLines(parts)}
		}
		if errors.Is(err, errDuplicate) {
			return e.lookup(ctx, p.ShopID, p.ReservationID)
		}
		if short != nil {
			parts, err = e.replan(ctx, p, parts, short)
			if errors.Is(err, ErrInsufficientStock) {
				// A retry of a reservation that already succeeded must get
				// it back, even when the item has sold out since.
				if res, lerr := e.lookup(ctx, p.ShopID, p.ReservationID); lerr == nil {
					return res, nil
				}
			}
			if err == nil && time.Now().Before(r.deadline) {
				continue // refilled or moved to another group: try at once
			}
			if err == nil {
				err = errContention
			}
		}
		if err = r.again(ctx, err); err != nil {
			return nil, err
		}
	}
}

// reserved records a committed reserve of parts.
func (e *Engine) reserved(parts []part) {
	e.stats.reserves.Add(1)
	for _, pt := range parts {
		e.touch(pt.key, -pt.qty)
	}
}

// resolveReserve learns whether this call's attempt whose COMMIT reply was
// lost committed: the locking read of its reservation row waits for that
// transaction to end on the server, then the row's token says whose it is.
func (e *Engine) resolveReserve(ctx context.Context, r *retrier, shopID uint64, id string, token uint64) (bool, error) {
	tx, err := e.begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var got uint64
	err = tx.QueryRowContext(ctx, lockReserveToken, shopID, id).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		r.resolved(false)
		return false, nil
	}
	if err != nil {
		return false, classify(err)
	}
	r.resolved(got == token)
	if got != token {
		e.settle(got)
	}
	return got == token, nil
}

// reserveOnce is one attempt. It returns the shortfall per part when a
// unit fetch came back short (and rolls back), or nil.
func (e *Engine) reserveOnce(ctx context.Context, r *retrier, p ReserveParams, parts []part, ttl time.Duration, token uint64) ([]int64, error) {
	tx, err := e.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if e.cfg.Strategy == StrategyCounter {
		short, err := e.takeCounters(ctx, tx, parts)
		if err != nil || short != nil {
			return short, err
		}
	} else {
		short, err := e.takeUnits(ctx, tx, parts)
		if err != nil || short != nil {
			return short, err
		}
	}
	if _, err := tx.ExecContext(ctx, insertReservation, p.ShopID, p.ReservationID, ttl.Microseconds(), token); err != nil {
		return nil, classify(err)
	}
	if err := insertHeld(ctx, tx, p.ShopID, p.ReservationID, heldLines(parts)); err != nil {
		return nil, err
	}
	if p.InTx != nil {
		if err := p.InTx(ctx, tx); err != nil {
			// A deadlock or lock wait timeout in the caller's work rolls the
			// attempt back like one in ours: retry it. Any other error, a
			// duplicate key included (the caller's row, not a retry of this
			// reservation), aborts Reserve as is.
			if c := classify(err); errors.Is(c, ErrRetryable) {
				err = c
			}
			return nil, fmt.Errorf("InTx: %w", err)
		}
	}
	return nil, r.commit(ctx, tx, func() { e.reserved(parts) })
}

// takeUnits locks and deletes the units of every part, fetching them for all
// parts in one statement. The fetch has one branch per item/group, never per
// part: FOR UPDATE SKIP LOCKED does not skip rows the same transaction has
// locked, so two branches on one key (two lines of an item, or a line moved
// onto another line's group) would both return the same units.
func (e *Engine) takeUnits(ctx context.Context, tx *sql.Tx, parts []part) ([]int64, error) {
	branch := fetchUnitsSkipLocked
	if e.cfg.Strategy == StrategyForUpdate {
		branch = fetchUnitsForUpdate
	}
	keys, want, of := mergeParts(parts)
	var q strings.Builder
	q.Grow(len(keys) * (len(branch) + len(fetchUnitsJoin)))
	args := make([]any, 0, 5*len(keys))
	for i, k := range keys {
		if i > 0 {
			q.WriteString(fetchUnitsJoin)
		}
		q.WriteString(branch)
		args = append(args, i, k.ShopID, k.ItemID, k.GroupID, want[i])
	}
	rows, err := tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, classify(err)
	}
	fetched := make([]int64, len(keys))
	units := make([]keyUnits, len(keys))
	for i, k := range keys {
		units[i].key = k
	}
	for rows.Next() {
		var i int
		var id uint64
		if err := rows.Scan(&i, &id); err != nil {
			rows.Close()
			return nil, classify(err)
		}
		if i < 0 || i >= len(keys) {
			rows.Close()
			return nil, fmt.Errorf("reservation: internal error: unit fetch returned branch %d of %d", i, len(keys))
		}
		fetched[i]++
		units[i].ids = append(units[i].ids, id)
	}
	if err := rows.Close(); err != nil {
		return nil, classify(err)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	// Hand each key's units to its parts in order.
	got := make([]int64, len(parts))
	for i, pt := range parts {
		got[i] = min(pt.qty, fetched[of[i]])
		fetched[of[i]] -= got[i]
	}
	if short := e.shortfall(ctx, parts, got); short != nil {
		return short, nil
	}
	return nil, deleteUnits(ctx, tx, units)
}

// mergeParts returns the distinct keys of parts in order of appearance, the
// quantity wanted from each, and the index of each part's key.
func mergeParts(parts []part) (keys []ItemKey, want []int64, of []int) {
	of = make([]int, len(parts))
	for i, pt := range parts {
		k := slices.Index(keys, pt.key)
		if k < 0 {
			keys, want = append(keys, pt.key), append(want, 0)
			k = len(keys) - 1
		}
		want[k] += pt.qty
		of[i] = k
	}
	return keys, want, of
}

// takeCounters decrements the counter of every part, in key order so that
// concurrent multi-line carts queue instead of deadlocking.
func (e *Engine) takeCounters(ctx context.Context, tx *sql.Tx, parts []part) ([]int64, error) {
	order := make([]int, len(parts))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return compareKeys(parts[a].key, parts[b].key) })
	got := make([]int64, len(parts))
	for _, i := range order {
		pt := parts[i]
		res, err := tx.ExecContext(ctx, takeCounter, pt.qty, pt.key.ShopID, pt.key.ItemID, pt.key.GroupID, pt.qty)
		if err != nil {
			return nil, classify(err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			got[i] = pt.qty
		} else {
			break
		}
	}
	return e.shortfall(ctx, parts, got), nil
}

// shortfall returns what each part lacks, or nil when nothing does.
func (e *Engine) shortfall(ctx context.Context, parts []part, got []int64) []int64 {
	var short []int64
	for i, pt := range parts {
		if got[i] < pt.qty {
			if short == nil {
				short = make([]int64, len(parts))
			}
			short[i] = pt.qty - got[i]
			e.stats.unitsSkipped.Add(short[i])
		}
	}
	if short != nil {
		e.stats.shortReads.Add(1)
		e.metrics.shortRead(ctx, short)
	}
	return short
}

// replan reacts to a short fetch: it refills the short pools inline and
// asks the ledger whether each item/group can cover the parts on it. One
// that cannot gives what it has to its parts, those with no further group
// first, and hands the rest of each part to its line's next group; a part
// with no group left is ErrInsufficientStock. When every item/group can
// cover its parts, the shortfall was contention (units locked by in-flight
// reserves): replan returns errContention unless a refill added units.
func (e *Engine) replan(ctx context.Context, p ReserveParams, parts []part, short []int64) ([]part, error) {
	keys, want, of := mergeParts(parts)
	var next []part
	refilled, moved := false, false
	for k, key := range keys {
		var on []int // the parts on key
		var lacking int64
		for i := range parts {
			if of[i] == k {
				on = append(on, i)
				lacking += short[i]
			}
		}
		if lacking == 0 {
			for _, i := range on {
				next = append(next, parts[i])
			}
			continue
		}
		start := time.Now()
		st, added, err := e.refill(ctx, key, want[k])
		wait := time.Since(start)
		e.metrics.refillWait(ctx, wait)
		e.stats.refillWait.Add(int64(wait))
		e.stats.inlineRefills.Add(1)
		if err != nil {
			return parts, err
		}
		refilled = refilled || added > 0
		sellable := max(st.sellable(), 0)
		if sellable >= want[k] {
			for _, i := range on {
				next = append(next, parts[i])
			}
			continue
		}
		moved = true
		// The parts that cannot move on get the units first.
		slices.SortStableFunc(on, func(a, b int) int {
			return cmp.Compare(len(p.Lines[parts[a].line].GroupIDs)-parts[a].groupIdx,
				len(p.Lines[parts[b].line].GroupIDs)-parts[b].groupIdx)
		})
		for _, i := range on {
			pt := parts[i]
			if take := min(pt.qty, sellable); take > 0 {
				keep := pt
				keep.qty = take
				next = append(next, keep)
				sellable -= take
				pt.qty -= take
			}
			if pt.qty == 0 {
				continue
			}
			groups := p.Lines[pt.line].GroupIDs
			if pt.groupIdx+1 >= len(groups) {
				return parts, fmt.Errorf("%w: item %d has %d sellable units in group %d, the cart needs %d there",
					ErrInsufficientStock, key.ItemID, max(st.sellable(), 0), key.GroupID, want[k])
			}
			rest := part{line: pt.line, groupIdx: pt.groupIdx + 1, qty: pt.qty}
			rest.key = ItemKey{p.ShopID, p.Lines[pt.line].ItemID, groups[rest.groupIdx]}
			next = append(next, rest)
		}
	}
	if refilled || moved {
		return next, nil
	}
	return next, errContention
}

// heldLines sums parts per item/group, the rows of reserved quantities.
func heldLines(parts []part) []ReservedLine {
	lines := make([]ReservedLine, 0, len(parts))
	for _, pt := range parts {
		i := slices.IndexFunc(lines, func(l ReservedLine) bool {
			return l.ItemID == pt.key.ItemID && l.GroupID == pt.key.GroupID
		})
		if i < 0 {
			lines = append(lines, ReservedLine{ItemID: pt.key.ItemID, GroupID: pt.key.GroupID})
			i = len(lines) - 1
		}
		lines[i].Quantity += pt.qty
	}
	return lines
}

func insertHeld(ctx context.Context, tx *sql.Tx, shopID uint64, id string, lines []ReservedLine) error {
	var q strings.Builder
	q.WriteString(insertReservedPrefix)
	args := make([]any, 0, 5*len(lines))
	for i, l := range lines {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(insertReservedRow)
		args = append(args, shopID, id, l.ItemID, l.GroupID, l.Quantity)
	}
	_, err := tx.ExecContext(ctx, q.String(), args...)
	return classify(err)
}

// lookup returns a stored reservation, for retries of a reserve. When an
// earlier call of this engine made it but could not learn so, it is
// counted now.
func (e *Engine) lookup(ctx context.Context, shopID uint64, id string) (*Reservation, error) {
	res := &Reservation{ShopID: shopID, ID: id}
	var state string
	var expires float64 // UNIX_TIMESTAMP: no need for parseTime in the caller's DSN
	var token uint64
	err := e.db.QueryRowContext(ctx, selectReservation, shopID, id).Scan(&state, &expires, &token)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, classify(err)
	}
	e.settle(token)
	res.State = State(state)
	res.ExpiresAt = time.UnixMicro(int64(expires * 1e6))
	rows, err := e.db.QueryContext(ctx, selectReserved, shopID, id)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var l ReservedLine
		if err := rows.Scan(&l.ItemID, &l.GroupID, &l.Quantity); err != nil {
			return nil, classify(err)
		}
		res.Lines = append(res.Lines, l)
	}
	return res, classify(rows.Err())
}

func compareKeys(a, b ItemKey) int {
	return cmp.Or(cmp.Compare(a.ShopID, b.ShopID), cmp.Compare(a.ItemID, b.ItemID), cmp.Compare(a.GroupID, b.GroupID))
}
