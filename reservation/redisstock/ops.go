package redisstock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
)

// Operation names, the "operation" attribute of holdtime.redisstock.operations.
const (
	opReserve = "reserve"
	opClaim   = "claim"
	opRelease = "release"
	opExpire  = "expire"
)

// Reserve holds every line of a cart, all or nothing, in one script. A line
// takes units from its location groups in order, split over groups when
// one has too few. It returns reservation.ErrInsufficientStock when a line
// cannot be covered; a retry with the same id returns the first answer.
// ReserveParams.InTx is not supported (there is no transaction to run it
// in): a cart that sets it is refused.
func (s *Store) Reserve(ctx context.Context, p reservation.ReserveParams) (*reservation.Reservation, error) {
	start := time.Now()
	res, err := s.reserve(ctx, p)
	s.metrics.op(ctx, opReserve, start, err)
	if err != nil {
		return nil, fmt.Errorf("redisstock: reserve %s: %w", p.ReservationID, err)
	}
	return res, nil
}

func (s *Store) reserve(ctx context.Context, p reservation.ReserveParams) (*reservation.Reservation, error) {
	if err := validReservation(p); err != nil {
		return nil, err
	}
	ttl := p.TTL
	if ttl == 0 {
		ttl = s.cfg.TTL
	}
	return s.reserveUntil(ctx, p, s.cfg.Now().Add(ttl), ttl)
}

// reserveUntil runs the reserve script with a hold that ends at deadline
// (its hash kept ttl plus Config.Retention).
func (s *Store) reserveUntil(ctx context.Context, p reservation.ReserveParams, deadline time.Time, ttl time.Duration) (*reservation.Reservation, error) {
	keys := []string{s.resKey(p.ShopID, p.ReservationID), s.expiryKey()}
	args := []any{member(p.ShopID, p.ReservationID), deadline.UnixMilli(), (ttl + s.cfg.Retention).Milliseconds(), len(p.Lines)}
	for i, l := range p.Lines {
		if l.Quantity <= 0 || len(l.GroupIDs) == 0 {
			return nil, fmt.Errorf("line %d (item %d) needs a positive quantity and a location group", i, l.ItemID)
		}
		args = append(args, l.Quantity, len(l.GroupIDs))
		for _, g := range l.GroupIDs {
			k := reservation.ItemKey{ShopID: p.ShopID, ItemID: l.ItemID, GroupID: g}
			keys = append(keys, s.availKey(k), s.heldKey(k))
			args = append(args, field(l.ItemID, g))
		}
	}
	ctx = withCommand(conntag.WithTag(ctx, s.cfg.Tags.Reserve), "script:reserve")
	v, err := reserveScript.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	vals, ok := v.([]any)
	if !ok {
		return nil, reservation.ErrInsufficientStock
	}
	h, err := parseHash(vals)
	if err != nil {
		return nil, err
	}
	return h.reservation(p.ShopID, p.ReservationID), nil
}

// Mirror records a reservation another system made (package migration's
// shadow): exactly lines, each from its own location group, held until
// deadline. It takes the units from the counters like Reserve and returns
// reservation.ErrInsufficientStock, changing nothing, when one counter is
// short; a reservation that exists is returned as it is.
func (s *Store) Mirror(ctx context.Context, shopID uint64, reservationID string, lines []reservation.ReservedLine, deadline time.Time) (*reservation.Reservation, error) {
	start := time.Now()
	p := reservation.ReserveParams{ShopID: shopID, ReservationID: reservationID}
	for _, l := range lines {
		p.Lines = append(p.Lines, reservation.Line{ItemID: l.ItemID, Quantity: l.Quantity, GroupIDs: []uint64{l.GroupID}})
	}
	var res *reservation.Reservation
	err := validReservation(p)
	if err == nil {
		res, err = s.reserveUntil(ctx, p, deadline, max(time.Until(deadline), 0))
	}
	s.metrics.op(ctx, opReserve, start, err)
	if err != nil {
		return nil, fmt.Errorf("redisstock: mirror %s: %w", reservationID, err)
	}
	return res, nil
}

// HeldIDs returns the reservations of a shop that Redis holds and that can
// expire (in its expiry queue; a hold between the halves of its claim is
// not). It reads the whole queue: an operator's call, not checkout's.
func (s *Store) HeldIDs(ctx context.Context, shopID uint64) ([]string, error) {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Stock)
	all, err := s.rdb.ZRange(ctx, s.expiryKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstock: held reservations of shop %d: %w", shopID, unavailable(err))
	}
	prefix := strconv.FormatUint(shopID, 10) + "/"
	var ids []string
	for _, m := range all {
		if id, ok := strings.CutPrefix(m, prefix); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// States returns the state of each reservation (held, claiming, claimed,
// released, expired; "" when Redis does not know it), in one round trip.
func (s *Store) States(ctx context.Context, shopID uint64, ids []string) ([]string, error) {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Stock)
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGet(ctx, s.resKey(shopID, id), "_state")
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("redisstock: states: %w", unavailable(err))
		}
	}
	out := make([]string, len(ids))
	for i, c := range cmds {
		out[i], _ = c.Result()
	}
	return out, nil
}

func validReservation(p reservation.ReserveParams) error {
	if p.ReservationID == "" || len(p.ReservationID) > 64 || strings.ContainsAny(p.ReservationID, "/ \r\n") {
		return errors.New("reservation id must be 1 to 64 bytes without spaces or '/'")
	}
	if len(p.Lines) == 0 || p.InTx != nil || p.TTL < 0 {
		return errors.New("a cart needs at least one line, no InTx and a TTL that is not negative")
	}
	return nil
}

// Claim turns a hold into a sale after payment: it decrements the MySQL
// ledger and ends the hold in Redis, in Config.ClaimOrder, with no
// transaction spanning the two. Claiming a claimed reservation returns nil
// (a claim is driven again after a crash); a reservation that expired
// returns reservation.ErrExpired, one released reservation.ErrReleased, an
// unknown one (never made, or lost by Redis) reservation.ErrNotFound.
func (s *Store) Claim(ctx context.Context, shopID uint64, reservationID string) error {
	return s.claimOp(ctx, shopID, reservationID, true)
}

// ClaimHeld is Claim that never drives again a claim another call began
// (state "claiming": running now, or died between its halves): it returns
// nil and leaves it. Package migration claims Redis's shadow holds with it,
// where a claim and a catch-up may follow the truth at the same time.
func (s *Store) ClaimHeld(ctx context.Context, shopID uint64, reservationID string) error {
	return s.claimOp(ctx, shopID, reservationID, false)
}

func (s *Store) claimOp(ctx context.Context, shopID uint64, reservationID string, redrive bool) error {
	start := time.Now()
	err := s.claim(conntag.WithTag(ctx, s.cfg.Tags.Claim), shopID, reservationID, redrive)
	s.metrics.op(ctx, opClaim, start, err)
	if err != nil {
		return fmt.Errorf("redisstock: claim %s: %w", reservationID, err)
	}
	return nil
}

func (s *Store) claim(ctx context.Context, shop uint64, id string, redrive bool) error {
	// Who wins against expiry is decided first, in Redis: the hold leaves
	// the expiry queue as "claiming".
	v, err := beginClaimScript.Run(withCommand(ctx, "script:begin_claim"), s.rdb,
		[]string{s.resKey(shop, id), s.expiryKey(), s.claimingKey(shop)}, member(shop, id), s.cfg.Now().UnixMilli(), id).Slice()
	if err != nil {
		return unavailable(err)
	}
	state, _ := v[0].(string)
	switch state {
	case "missing":
		return reservation.ErrNotFound
	case "claimed":
		return nil
	case "due", "expired":
		return reservation.ErrExpired
	case "released":
		return reservation.ErrReleased
	case "claiming":
		if !redrive {
			return nil
		}
	case "began":
	default:
		return fmt.Errorf("unexpected reservation state %q", state)
	}
	h, err := parseHash(v[1:])
	if err != nil {
		return err
	}
	// "claiming" is also what a claim that died between its halves left
	// behind: this claim cannot tell whether the ledger half ran. It runs
	// both halves again, which is the design's flaw.
	ledger := func() error { return s.decrementLedger(ctx, shop, id, h.lines) }
	cache := func() error { return s.finishClaim(ctx, shop, id, "claimed", h.lines) }
	first, second := ledger, cache
	if s.cfg.ClaimOrder == ClaimRedisFirst {
		first, second = cache, ledger
	}
	if err := first(); err != nil {
		return err
	}
	if s.cfg.BetweenClaimHalves != nil {
		if err := s.cfg.BetweenClaimHalves(ctx, shop, id); err != nil {
			return err
		}
	}
	return second()
}

// decrementLedger is the ledger half of a claim. A connection that died
// while idle in the pool (a KILL, a server restart, a proxy's timeout)
// fails the first statement sent on it: nothing was applied, and the half
// runs again on a fresh connection. A failed COMMIT is not retried (it may
// have applied).
func (s *Store) decrementLedger(ctx context.Context, shop uint64, id string, lines []reservation.ReservedLine) error {
	for attempt := 1; ; attempt++ {
		committing, err := s.decrementLedgerOnce(ctx, shop, id, lines)
		if err == nil || committing || attempt == 3 || !deadConn(err) || ctx.Err() != nil {
			if err != nil {
				return fmt.Errorf("ledger half: %w", err)
			}
			return nil
		}
	}
}

func (s *Store) decrementLedgerOnce(ctx context.Context, shop uint64, id string, lines []reservation.ReservedLine) (committing bool, err error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	// The receipt counts the runs of this half (a claim driven again runs
	// it again: the design's flaw, kept), so that SettleClaim can count
	// the sale exactly once.
	if _, err := tx.ExecContext(ctx, `INSERT INTO redisstock_claims (shop_id, reservation_id, runs) VALUES (?, ?, 1)
		ON DUPLICATE KEY UPDATE runs = runs + 1`, shop, id); err != nil {
		return false, err
	}
	for _, l := range lines {
		if _, err := tx.ExecContext(ctx, `UPDATE redisstock_ledger SET on_hand = on_hand - ?, claimed = claimed + ?
			WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`,
			l.Quantity, l.Quantity, shop, l.ItemID, l.GroupID); err != nil {
			return false, err
		}
	}
	return true, tx.Commit()
}

// DeadConn reports whether err is a connection found dead (KILLed, dropped,
// reset): a statement that got it before its transaction's COMMIT did not
// apply, and an idempotent one can be sent again on another connection.
func DeadConn(err error) bool { return deadConn(err) }

// deadConn reports whether err is a connection found dead before the
// transaction's COMMIT: the transaction did not apply.
func deadConn(err error) bool {
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (s *Store) finishClaim(ctx context.Context, shop uint64, id, state string, lines []reservation.ReservedLine) error {
	keys := []string{s.resKey(shop, id), s.claimingKey(shop)}
	args := []any{id, state, s.cfg.Retention.Milliseconds()}
	for _, l := range lines {
		k := reservation.ItemKey{ShopID: shop, ItemID: l.ItemID, GroupID: l.GroupID}
		keys = append(keys, s.heldKey(k), s.availKey(k))
		args = append(args, l.Quantity)
	}
	if err := finishClaimScript.Run(withCommand(ctx, "script:finish_claim"), s.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("redis half: %w", unavailable(err))
	}
	return nil
}

// Release ends a hold before payment and gives its units back. Releasing a
// released reservation returns nil; a claimed one reservation.ErrClaimed,
// an expired one reservation.ErrExpired, an unknown one
// reservation.ErrNotFound.
func (s *Store) Release(ctx context.Context, shopID uint64, reservationID string) error {
	start := time.Now()
	state, err := s.giveBack(conntag.WithTag(ctx, s.cfg.Tags.Release), shopID, reservationID, "released", time.Time{})
	if err == nil {
		switch state {
		case "held", "released":
		case "missing":
			err = reservation.ErrNotFound
		case "claimed", "claiming":
			err = reservation.ErrClaimed
		case "expired":
			err = reservation.ErrExpired
		default:
			err = fmt.Errorf("unexpected reservation state %q", state)
		}
	}
	s.metrics.op(ctx, opRelease, start, err)
	if err != nil {
		return fmt.Errorf("redisstock: release %s: %w", reservationID, err)
	}
	return nil
}

// Expire ends a hold whose deadline passed and gives its units back now,
// as the sweeper would at its next pass (a claim found it due: Claim
// returned reservation.ErrExpired). A hold not yet due, or not held, is
// left as it is.
func (s *Store) Expire(ctx context.Context, shopID uint64, reservationID string) error {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Expire)
	start := time.Now()
	state, err := s.giveBack(ctx, shopID, reservationID, "expired", s.cfg.Now())
	if err != nil {
		return fmt.Errorf("redisstock: expire %s: %w", reservationID, err)
	}
	if state == "held" {
		s.metrics.expired(ctx, start, 1, nil)
	}
	return nil
}

// giveBack runs returnScript: a release when now is zero, else an expiry.
func (s *Store) giveBack(ctx context.Context, shop uint64, id, newState string, now time.Time) (string, error) {
	cmdCtx := withCommand(ctx, "script:read")
	vals, err := s.rdb.HGetAll(cmdCtx, s.resKey(shop, id)).Result()
	if err != nil {
		return "", unavailable(err)
	}
	flat := make([]any, 0, 2*len(vals))
	for k, v := range vals {
		flat = append(flat, k, v)
	}
	h, err := parseHash(flat)
	if err != nil {
		return "", err
	}
	keys := []string{s.resKey(shop, id), s.expiryKey()}
	var ms int64
	if !now.IsZero() {
		ms = now.UnixMilli()
	}
	args := []any{member(shop, id), newState, ms, s.cfg.Retention.Milliseconds()}
	for _, l := range h.lines {
		k := reservation.ItemKey{ShopID: shop, ItemID: l.ItemID, GroupID: l.GroupID}
		keys = append(keys, s.availKey(k), s.heldKey(k))
		args = append(args, l.Quantity)
	}
	state, err := returnScript.Run(withCommand(ctx, "script:"+newState), s.rdb, keys, args...).Text()
	if err != nil {
		return "", unavailable(err)
	}
	return state, nil
}

// ExpireDue ends the holds whose deadline passed and gives their units
// back; it returns how many it expired.
func (s *Store) ExpireDue(ctx context.Context) (int, error) {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Expire)
	start := time.Now()
	n := 0
	var err error
	for {
		now := s.cfg.Now()
		var due []string
		due, err = s.rdb.ZRangeByScore(ctx, s.expiryKey(), &redis.ZRangeBy{Min: "-inf",
			Max: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(s.cfg.ExpiryBatch)}).Result()
		if err != nil {
			err = unavailable(err)
			break
		}
		for _, m := range due {
			shopStr, id, _ := strings.Cut(m, "/")
			shop, perr := strconv.ParseUint(shopStr, 10, 64)
			if perr != nil {
				s.rdb.ZRem(ctx, s.expiryKey(), m)
				continue
			}
			state, gerr := s.giveBack(ctx, shop, id, "expired", now)
			if gerr != nil {
				err = gerr
				break
			}
			switch state {
			case "held":
				n++
			case "early":
			default: // ended otherwise: not the sweeper's any more
				s.rdb.ZRem(ctx, s.expiryKey(), m)
			}
		}
		if err != nil || len(due) < s.cfg.ExpiryBatch {
			break
		}
	}
	if n > 0 || err != nil {
		s.metrics.expired(ctx, start, n, err)
	}
	if err != nil {
		return n, fmt.Errorf("redisstock: expire: %w", err)
	}
	return n, nil
}

// Run sweeps due holds every Config.ExpiryInterval, and deletes the claim
// receipts older than Config.Retention every 10 minutes, until ctx ends.
// Errors (Redis down, restarting) are retried at the next interval.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.ExpiryInterval)
	defer t.Stop()
	prune := time.NewTicker(10 * time.Minute)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.ExpireDue(ctx)
		case <-prune.C:
			s.PruneClaims(ctx, s.cfg.Retention)
		}
	}
}

// Lookup returns what a reservation holds and its state, read from Redis.
func (s *Store) Lookup(ctx context.Context, shopID uint64, reservationID string) (*reservation.Reservation, error) {
	vals, err := s.rdb.HGetAll(withCommand(ctx, "script:read"), s.resKey(shopID, reservationID)).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	if len(vals) == 0 {
		return nil, reservation.ErrNotFound
	}
	flat := make([]any, 0, 2*len(vals))
	for k, v := range vals {
		flat = append(flat, k, v)
	}
	h, err := parseHash(flat)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(h.lines, func(a, b reservation.ReservedLine) int {
		if a.ItemID != b.ItemID {
			return int(a.ItemID) - int(b.ItemID)
		}
		return int(a.GroupID) - int(b.GroupID)
	})
	return h.reservation(shopID, reservationID), nil
}
