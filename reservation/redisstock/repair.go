package redisstock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
)

// ClaimingIDs returns the reservations of a shop whose claim began and has
// not ended (state "claiming"): running now, or stuck, their claim having
// died between its halves.
func (s *Store) ClaimingIDs(ctx context.Context, shopID uint64) ([]string, error) {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Stock)
	ids, err := s.rdb.SMembers(ctx, s.claimingKey(shopID)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisstock: claiming reservations of shop %d: %w", shopID, unavailable(err))
	}
	return ids, nil
}

// SettleClaim ends a claim that died between its halves (state
// "claiming"), as sold (claimed) or as given back, and makes the ledger
// count it exactly once (sold) or not at all: the claim's receipt says how
// many times its ledger half ran (none, once, or again each time the claim
// was driven again), and the ledger's on hand and claimed are corrected by
// the difference. A claimed reservation's ledger is corrected the same way
// (see OvercountedClaims); any other is left as it is. It is safe to
// repeat. Call it while no claim of the reservation runs
// (package migration fences the shop).
func (s *Store) SettleClaim(ctx context.Context, shopID uint64, reservationID string, claimed bool) error {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Claim)
	vals, err := s.rdb.HGetAll(withCommand(ctx, "script:read"), s.resKey(shopID, reservationID)).Result()
	if err != nil {
		return fmt.Errorf("redisstock: settle claim %s: %w", reservationID, unavailable(err))
	}
	flat := make([]any, 0, 2*len(vals))
	for k, v := range vals {
		flat = append(flat, k, v)
	}
	h, err := parseHash(flat)
	if err != nil {
		return err
	}
	switch h.state {
	case "claimed":
		// Its claim was driven again after dying between the halves: the
		// ledger counted the sale once per run.
		if err := s.settleLedger(ctx, shopID, reservationID, h.lines, 1); err != nil {
			return fmt.Errorf("redisstock: settle claim %s in the ledger: %w", reservationID, err)
		}
		return nil
	case "claiming":
	default:
		// Ended otherwise, or gone (its retention passed: nothing says
		// what it held).
		if err := s.rdb.SRem(ctx, s.claimingKey(shopID), reservationID).Err(); err != nil {
			return fmt.Errorf("redisstock: settle claim %s: %w", reservationID, unavailable(err))
		}
		return nil
	}
	want, state := 0, "released"
	if claimed {
		want, state = 1, "claimed"
	}
	if err := s.settleLedger(ctx, shopID, reservationID, h.lines, want); err != nil {
		return fmt.Errorf("redisstock: settle claim %s in the ledger: %w", reservationID, err)
	}
	return s.finishClaim(ctx, shopID, reservationID, state, h.lines)
}

// OvercountedClaims returns the reservations of a shop whose claim ran its
// ledger half more than once (driven again after dying between the
// halves), as far as their receipts are kept: the ledger counts each of
// them sold more than once until SettleClaim.
func (s *Store) OvercountedClaims(ctx context.Context, shopID uint64) ([]string, error) {
	rows, err := s.db.QueryContext(conntag.WithTag(ctx, s.cfg.Tags.Stock),
		`SELECT reservation_id FROM redisstock_claims WHERE shop_id = ? AND runs > 1 ORDER BY reservation_id`, shopID)
	if err != nil {
		return nil, fmt.Errorf("redisstock: claim receipts of shop %d: %w", shopID, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// settleLedger sets the runs of a claim's ledger half to want (0 or 1),
// moving the units of the runs it takes back (or adds) between on hand and
// claimed, in one transaction.
func (s *Store) settleLedger(ctx context.Context, shop uint64, id string, lines []reservation.ReservedLine, want int) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var runs int
	err = tx.QueryRowContext(ctx, `SELECT runs FROM redisstock_claims WHERE shop_id = ? AND reservation_id = ? FOR UPDATE`, shop, id).Scan(&runs)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	extra := int64(runs - want)
	if extra == 0 {
		return nil
	}
	for _, l := range lines {
		if _, err := tx.ExecContext(ctx, `UPDATE redisstock_ledger SET on_hand = on_hand + ?, claimed = claimed - ?
			WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`,
			extra*l.Quantity, extra*l.Quantity, shop, l.ItemID, l.GroupID); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO redisstock_claims (shop_id, reservation_id, runs) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE runs = VALUES(runs)`, shop, id, want); err != nil {
		return err
	}
	return tx.Commit()
}

// AlignLedger sets the ledger's on hand of an item/group to what Redis's
// counters say (available plus held), moving the difference to or from
// claimed: for a Redis that was made a copy of another system's books
// (package migration's repair of a Redis shadow), whose ledger must then
// agree with its counters.
func (s *Store) AlignLedger(ctx context.Context, k reservation.ItemKey) error {
	b, err := s.Books(ctx, k)
	if err != nil {
		return err
	}
	onHand := b.Available + b.Held
	if onHand == b.OnHand {
		return nil
	}
	// claimed is assigned first, from the old on_hand.
	if _, err := s.db.ExecContext(conntag.WithTag(ctx, s.cfg.Tags.Stock), `INSERT INTO redisstock_ledger
		(shop_id, inventory_item_id, inventory_group_id, on_hand) VALUES (?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE claimed = claimed + on_hand - VALUES(on_hand), on_hand = VALUES(on_hand)`,
		k.ShopID, k.ItemID, k.GroupID, onHand); err != nil {
		return fmt.Errorf("redisstock: align the ledger of %+v: %w", k, err)
	}
	return nil
}

// PruneClaims deletes the claim receipts older than olderThan (in batches of
// 1,000) and returns how many. Keep them at least Config.Retention: a
// claim stuck between its halves is settled from its receipt.
func (s *Store) PruneClaims(ctx context.Context, olderThan time.Duration) (int64, error) {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Expire)
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, `DELETE FROM redisstock_claims
			WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT 1000`, olderThan.Microseconds())
		if err != nil {
			return total, fmt.Errorf("redisstock: prune claim receipts: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < 1000 {
			return total, nil
		}
	}
}
