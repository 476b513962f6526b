package migration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/holdtime/holdtime/reservation"
)

// cutover moves shop s to stage to, with the shop fenced (no call of the
// shop in flight) and the expiry sweeps paused. The caller holds applyMu.
func (r *Router) cutover(ctx context.Context, s *shop, to Stage, force bool) error {
	from := s.Stage()
	if to == StageMySQL && from == StageRedis {
		// Through StageShadow: the gate starts counting now.
		if err := r.cutover(ctx, s, StageShadow, force); err != nil {
			return err
		}
		from = StageShadow
	}
	if to == StageMySQL {
		if why := r.quiet(s); why != "" {
			r.gate(s.id, why)
			return nil
		}
	}
	r.sweepMu.Lock()
	defer r.sweepMu.Unlock()
	s.fence.Lock()
	defer s.fence.Unlock()
	start := time.Now()
	truth := truthOf(from)
	switch {
	case from == StageRedis:
		// Entering StageShadow: the backfill.
		if err := r.retry(ctx, func() error { return r.sync(ctx, s.id, BackendRedis) }); err != nil {
			return r.cutoverFailed(ctx, s, from, to, start, err)
		}
	case to == StageRedis && from == StageShadow:
		// MySQL stops shadowing: nothing moves.
	default:
		// The truth changes hands (StageShadow to StageMySQL, or back):
		// the system that takes it must not have drifted.
		var rep Report
		err := r.retry(ctx, func() (err error) {
			if err = r.catchUpBoth(ctx, s.id); err == nil {
				rep, err = r.reconcile(ctx, s.id, from)
			}
			return err
		})
		if err != nil {
			return r.cutoverFailed(ctx, s, from, to, start, err)
		}
		r.reconciled(rep)
		if d := rep.Drift(); d != "" {
			if truth == BackendRedis {
				// Promotion: the gate refuses; the quiet period restarts.
				s.lastMismatch.Store(time.Now().UnixNano())
				r.gate(s.id, "drift: "+d)
				r.metrics.cutover(ctx, from, to, "gated", start)
				return nil
			}
			if !force {
				return r.cutoverFailed(ctx, s, from, to, start, fmt.Errorf("%w: shop %d stays on MySQL (%s); force repairs Redis and hands it back", ErrDrifted, s.id, d))
			}
		}
		if err := r.retry(ctx, func() error { return r.sync(ctx, s.id, truth) }); err != nil {
			return r.cutoverFailed(ctx, s, from, to, start, err)
		}
		r.undrifted(s.id)
	}
	if r.cfg.onCutover != nil {
		r.cfg.onCutover(s.id, from, to)
	}
	s.stage.Store(to)
	if to == StageShadow {
		s.shadowSince.Store(time.Now().UnixNano())
	}
	r.mu.Lock()
	delete(r.gated, s.id)
	r.mu.Unlock()
	r.metrics.cutover(ctx, from, to, "ok", start)
	if r.cfg.Logger != nil {
		r.cfg.Logger.Info("migration cutover", "shop", s.id, "from", from, "to", to, "took", time.Since(start))
	}
	return r.saveShop(ctx, s)
}

// retry runs a step of a cutover or repair (each is safe to repeat: it
// reads both systems again and sets what differs) up to 5 times while it
// fails other than by ctx: a connection killed under it, Redis loading
// after a restart.
func (r *Router) retry(ctx context.Context, step func() error) error {
	var err error
	for try := 0; try < 5; try++ {
		if err = step(); err == nil || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(time.Duration(try+1) * 20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	return err
}

func (r *Router) cutoverFailed(ctx context.Context, s *shop, from, to Stage, start time.Time, err error) error {
	outcome := "error"
	if errors.Is(err, ErrDrifted) {
		outcome = "refused"
	}
	r.metrics.cutover(ctx, from, to, outcome, start)
	if r.cfg.Logger != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn("migration cutover refused", "shop", s.id, "from", from, "to", to, "error", err)
	}
	return fmt.Errorf("migration: shop %d from %s to %s: %w", s.id, from, to, err)
}

// quiet says why the gate holds s in StageShadow ("" once it may go).
func (r *Router) quiet(s *shop) string {
	if r.cfg.QuietPeriod < 0 {
		return ""
	}
	since := max(s.shadowSince.Load(), s.lastMismatch.Load())
	left := time.Until(time.Unix(0, since).Add(r.cfg.QuietPeriod))
	if left > 0 {
		return fmt.Sprintf("quiet period: %v to go", left.Round(time.Millisecond))
	}
	return ""
}

func (r *Router) gate(id uint64, why string) {
	r.mu.Lock()
	r.gated[id] = why
	r.mu.Unlock()
}

// reconciled records what a reconcile of a shop found: whether it drifted
// and its drifted items (the gauges).
func (r *Router) reconciled(rep Report) {
	var items []ItemDrift
	for _, d := range rep.Items {
		if d.Drifted() {
			items = append(items, d)
		}
	}
	r.mu.Lock()
	if rep.Drift() != "" {
		r.drifted[rep.ShopID] = true
	} else {
		delete(r.drifted, rep.ShopID)
	}
	if len(items) > 0 {
		r.driftItems[rep.ShopID] = items
	} else {
		delete(r.driftItems, rep.ShopID)
	}
	r.mu.Unlock()
}

// undrifted records that a shop's shadow was made a copy of its truth.
func (r *Router) undrifted(id uint64) {
	r.mu.Lock()
	delete(r.drifted, id)
	delete(r.driftItems, id)
	r.mu.Unlock()
}

// itemDrift returns the drifted items of every shop's last reconcile.
func (r *Router) itemDrift() []ItemDrift {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ItemDrift
	for _, items := range r.driftItems {
		out = append(out, items...)
	}
	return out
}

// sync makes the other system a copy of truth for one shop: the shadow's
// holds that the truth ended are ended (catchUp), the truth's live holds
// the shadow lacks are recorded in it, and the shadow's sellable units are
// set to the truth's ledger net of its live holds. The caller fences the
// shop and pauses the sweeps: nothing moves in either system meanwhile
// but background refills, which do not change what is sellable.
func (r *Router) sync(ctx context.Context, shopID uint64, truth Backend) error {
	shadow := other(truth)
	// Redis's claims stuck between their halves end first, as their truth
	// says, and its ledger counts each sale once: what follows reads it.
	if err := r.settleClaims(ctx, shopID); err != nil {
		return err
	}
	// Both directions: a hold of either system's making whose truth ended
	// gives its units back in the other before the counts are copied.
	if err := r.catchUpBoth(ctx, shopID); err != nil {
		return err
	}
	missing, err := r.unmirrored(ctx, shopID, truth)
	if err != nil {
		return err
	}
	keys, err := r.shopKeys(ctx, shopID)
	if err != nil {
		return err
	}
	need := map[reservation.ItemKey]int64{}
	for _, h := range missing {
		for _, l := range h.lines {
			need[reservation.ItemKey{ShopID: shopID, ItemID: l.ItemID, GroupID: l.GroupID}] += l.Quantity
		}
	}
	for _, k := range keys {
		target, err := r.sellable(ctx, truth, k, true)
		if err != nil {
			return err
		}
		if truth == BackendRedis {
			// The truth itself never promises more than its ledger has.
			if counter, err := r.sellable(ctx, truth, k, false); err != nil {
				return err
			} else if counter > target {
				if err := r.cfg.Redis.SetAvailable(ctx, k, max(target, 0)); err != nil {
					return err
				}
			}
		}
		if err := r.setSellable(ctx, shadow, k, max(target, 0)+need[k]); err != nil {
			return err
		}
	}
	for _, h := range missing {
		if _, err := r.mirror(ctx, shadow, truth, shopID, h.id, h.lines, h.deadline.Add(r.cfg.ShadowGrace)); err != nil {
			return fmt.Errorf("migration: carry hold %s over to %s: %w", h.id, shadow, err)
		}
	}
	if shadow == BackendRedis {
		// A copy of MySQL's books: Redis's ledger agrees with its counters
		// (it is what Redis sells from once it is the truth again).
		for _, k := range keys {
			if err := r.cfg.Redis.AlignLedger(ctx, k); err != nil {
				return err
			}
		}
	}
	return nil
}

// settleClaims ends Redis's claims of a shop stuck between their halves
// (state "claiming") and corrects its ledger for claims whose ledger half
// ran more than once. A claim whose truth is MySQL (Redis was its shadow)
// ends as MySQL's did (left alone while MySQL still holds it); one of
// Redis's own ends as sold: Redis decided it against expiry when it began.
func (r *Router) settleClaims(ctx context.Context, shopID uint64) error {
	claiming, err := r.cfg.Redis.ClaimingIDs(ctx, shopID)
	if err != nil {
		return err
	}
	over, err := r.cfg.Redis.OvercountedClaims(ctx, shopID)
	if err != nil {
		return err
	}
	ids := append(claiming, over...)
	if len(ids) == 0 {
		return nil
	}
	ctx = r.stockCtx(ctx)
	routes, err := r.routes(ctx, shopID, ids)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		claimed := true
		if routes[id] == BackendMySQL {
			var state string
			err := r.cfg.DB.QueryRowContext(ctx, `SELECT state FROM inventory_reservations WHERE shop_id = ? AND reservation_id = ?`,
				shopID, id).Scan(&state)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("migration: state of %s: %w", id, err)
			}
			if reservation.State(state) == reservation.StateHeld {
				continue // the truth has not decided
			}
			claimed = reservation.State(state) == reservation.StateClaimed
		}
		errs = append(errs, r.cfg.Redis.SettleClaim(ctx, shopID, id, claimed))
	}
	return errors.Join(errs...)
}

// hold is a live hold of one system.
type hold struct {
	id       string
	lines    []reservation.ReservedLine
	deadline time.Time
}

// unmirrored returns the live holds the truth made for a shop that the
// other system does not hold.
func (r *Router) unmirrored(ctx context.Context, shopID uint64, truth Backend) ([]hold, error) {
	ctx = r.stockCtx(ctx)
	var out []hold
	if truth == BackendRedis {
		ids, err := r.cfg.Redis.HeldIDs(ctx, shopID)
		if err != nil {
			return nil, err
		}
		routes, err := r.routes(ctx, shopID, ids)
		if err != nil {
			return nil, err
		}
		inMySQL, err := r.engineHeld(ctx, shopID)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if routes[id] == BackendMySQL || inMySQL[id] {
				continue // a mirror of MySQL's, or mirrored
			}
			res, err := r.cfg.Redis.Lookup(ctx, shopID, id)
			if errors.Is(err, reservation.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if res.State == reservation.StateHeld {
				out = append(out, hold{id: id, lines: res.Lines, deadline: res.ExpiresAt})
			}
		}
		return out, nil
	}
	ids, err := r.cfg.Redis.HeldIDs(ctx, shopID)
	if err != nil {
		return nil, err
	}
	inRedis := map[string]bool{}
	for _, id := range ids {
		inRedis[id] = true
	}
	rows, err := r.cfg.DB.QueryContext(ctx, `SELECT q.reservation_id, q.inventory_item_id, q.inventory_group_id, q.quantity, UNIX_TIMESTAMP(r.expires_at)
		FROM inventory_reserved_quantities q
		JOIN inventory_reservations r ON r.shop_id = q.shop_id AND r.reservation_id = q.reservation_id
		JOIN migration_routes m ON m.shop_id = q.shop_id AND m.reservation_id = q.reservation_id
		WHERE q.shop_id = ? AND m.truth = 'mysql'
		ORDER BY q.reservation_id, q.inventory_item_id, q.inventory_group_id`, shopID)
	if err != nil {
		return nil, fmt.Errorf("migration: MySQL's holds of shop %d: %w", shopID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var l reservation.ReservedLine
		var at float64
		if err := rows.Scan(&id, &l.ItemID, &l.GroupID, &l.Quantity, &at); err != nil {
			return nil, err
		}
		deadline := time.UnixMicro(int64(at * 1e6))
		if inRedis[id] {
			continue
		}
		if n := len(out); n > 0 && out[n-1].id == id {
			out[n-1].lines = append(out[n-1].lines, l)
			continue
		}
		out = append(out, hold{id: id, lines: []reservation.ReservedLine{l}, deadline: deadline})
	}
	return out, rows.Err()
}

// routes returns the route of each of ids that has one.
func (r *Router) routes(ctx context.Context, shopID uint64, ids []string) (map[string]Backend, error) {
	out := map[string]Backend{}
	for chunk := range slices.Chunk(ids, 500) {
		args := []any{shopID}
		for _, id := range chunk {
			args = append(args, id)
		}
		rows, err := r.cfg.DB.QueryContext(ctx, `SELECT reservation_id, truth FROM migration_routes WHERE shop_id = ? AND reservation_id IN (?`+
			strings.Repeat(", ?", len(chunk)-1)+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("migration: routes of shop %d: %w", shopID, err)
		}
		for rows.Next() {
			var id, t string
			if err := rows.Scan(&id, &t); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = Backend(t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// engineHeld returns the reservations of a shop the engine holds.
func (r *Router) engineHeld(ctx context.Context, shopID uint64) (map[string]bool, error) {
	rows, err := r.cfg.DB.QueryContext(ctx, `SELECT DISTINCT reservation_id FROM inventory_reserved_quantities WHERE shop_id = ?`, shopID)
	if err != nil {
		return nil, fmt.Errorf("migration: MySQL's holds of shop %d: %w", shopID, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// shopKeys returns every item/group either system stocks for a shop.
func (r *Router) shopKeys(ctx context.Context, shopID uint64) ([]reservation.ItemKey, error) {
	rows, err := r.cfg.DB.QueryContext(r.stockCtx(ctx), `SELECT inventory_item_id, inventory_group_id FROM inventory_ledger WHERE shop_id = ?
		UNION SELECT inventory_item_id, inventory_group_id FROM redisstock_ledger WHERE shop_id = ?
		ORDER BY 1, 2`, shopID, shopID)
	if err != nil {
		return nil, fmt.Errorf("migration: items of shop %d: %w", shopID, err)
	}
	defer rows.Close()
	var out []reservation.ItemKey
	for rows.Next() {
		k := reservation.ItemKey{ShopID: shopID}
		if err := rows.Scan(&k.ItemID, &k.GroupID); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// sellable is what one system can sell of an item/group: for the engine
// its ledger net of its holds; for Redis its counter, bounded (with
// ledger) by its ledger net of its holds.
func (r *Router) sellable(ctx context.Context, b Backend, k reservation.ItemKey, ledger bool) (int64, error) {
	if b == BackendMySQL {
		return r.cfg.Engine.Available(ctx, k)
	}
	bk, err := r.cfg.Redis.Books(ctx, k)
	if err != nil {
		return 0, err
	}
	if ledger {
		return min(bk.Available, bk.OnHand-bk.Held), nil
	}
	return bk.Available, nil
}

// setSellable sets what one system can sell of an item/group: the engine
// by a stock adjustment (which never takes held units), Redis by its
// counter.
func (r *Router) setSellable(ctx context.Context, b Backend, k reservation.ItemKey, n int64) error {
	if b == BackendRedis {
		return r.cfg.Redis.SetAvailable(ctx, k, n)
	}
	cur, err := r.cfg.Engine.Available(ctx, k)
	if err != nil {
		return err
	}
	if cur == n {
		return nil
	}
	if err := r.cfg.Engine.Adjust(ctx, reservation.StockParams{ItemKey: k, Quantity: n - cur}); err != nil {
		return err
	}
	if n > cur {
		_, err = r.cfg.Engine.Refill(ctx, k)
	}
	return err
}

// catchUp ends the holds the shadow system keeps for reservations whose
// source of truth ended them (an expiry the truth's sweeper made, a
// follow-up a fault lost), the way the truth ended them.
func (r *Router) catchUp(ctx context.Context, shopID uint64, shadow Backend) error {
	ctx = r.stockCtx(ctx)
	if shadow == BackendMySQL {
		rows, err := r.cfg.DB.QueryContext(ctx, `SELECT DISTINCT q.reservation_id FROM inventory_reserved_quantities q
			JOIN migration_routes m ON m.shop_id = q.shop_id AND m.reservation_id = q.reservation_id
			WHERE q.shop_id = ? AND m.truth = 'redis'`, shopID)
		if err != nil {
			return fmt.Errorf("migration: catch up shop %d: %w", shopID, err)
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		states, err := r.cfg.Redis.States(ctx, shopID, ids)
		if err != nil {
			return err
		}
		var errs []error
		for i, id := range ids {
			switch states[i] {
			case "held", "claiming":
			case "claimed":
				errs = append(errs, ignoreEnded(r.cfg.Engine.Claim(ctx, shopID, id)))
			default: // released, expired, or lost by Redis
				errs = append(errs, ignoreEnded(r.cfg.Engine.Release(ctx, shopID, id)))
			}
		}
		return errors.Join(errs...)
	}
	ids, err := r.cfg.Redis.HeldIDs(ctx, shopID)
	if err != nil || len(ids) == 0 {
		return err
	}
	var errs []error
	for chunk := range slices.Chunk(ids, 500) {
		args := []any{shopID}
		for _, id := range chunk {
			args = append(args, id)
		}
		rows, err := r.cfg.DB.QueryContext(ctx, `SELECT m.reservation_id, COALESCE(r.state, '') FROM migration_routes m
			LEFT JOIN inventory_reservations r ON r.shop_id = m.shop_id AND r.reservation_id = m.reservation_id
			WHERE m.shop_id = ? AND m.truth = 'mysql' AND m.reservation_id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)`, args...)
		if err != nil {
			return fmt.Errorf("migration: catch up shop %d: %w", shopID, err)
		}
		type ended struct{ id, state string }
		var todo []ended
		for rows.Next() {
			var e ended
			if err := rows.Scan(&e.id, &e.state); err != nil {
				rows.Close()
				return err
			}
			if e.state != string(reservation.StateHeld) {
				todo = append(todo, e)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, e := range todo {
			if e.state == string(reservation.StateClaimed) {
				errs = append(errs, ignoreEnded(r.cfg.Redis.ClaimHeld(ctx, shopID, e.id)))
			} else {
				errs = append(errs, ignoreEnded(r.cfg.Redis.Release(ctx, shopID, e.id)))
			}
		}
	}
	return errors.Join(errs...)
}

// catchUpBoth runs catchUp for both systems' shadow holds of a shop.
func (r *Router) catchUpBoth(ctx context.Context, shopID uint64) error {
	return errors.Join(r.catchUp(ctx, shopID, BackendMySQL), r.catchUp(ctx, shopID, BackendRedis))
}

// ignoreEnded drops the answers of a follow-up that found the hold already
// ended (another follow-up was first).
func ignoreEnded(err error) error {
	for _, a := range []error{reservation.ErrNotFound, reservation.ErrExpired, reservation.ErrReleased, reservation.ErrClaimed} {
		if errors.Is(err, a) {
			return nil
		}
	}
	return err
}

// Figures are one system's books of an item/group.
type Figures struct {
	Available int64 `json:"available"` // sellable now
	Held      int64 `json:"held"`      // held by live reservations
	Sold      int64 `json:"sold"`      // claimed, per its ledger
}

// ItemDrift compares both systems' books of one item/group.
type ItemDrift struct {
	Key          reservation.ItemKey `json:"key"`
	Redis, MySQL Figures
}

// Drifted reports whether the two systems would sell the item differently:
// another number of available or held units. (Sold differs by what a
// system sold while the other was not shadowing it.)
func (d ItemDrift) Drifted() bool {
	return d.Redis.Available != d.MySQL.Available || d.Redis.Held != d.MySQL.Held
}

// Report is Reconcile's answer for one shop.
type Report struct {
	ShopID uint64      `json:"shop_id"`
	Stage  Stage       `json:"stage"`
	Truth  Backend     `json:"truth"`
	Items  []ItemDrift `json:"items"`
	// Claiming: Redis holds whose claim began and did not end (stuck
	// between its halves, or running as the report was read). Overcounted:
	// Redis claims whose ledger half ran more than once (the claim was
	// driven again), each sale counted more than once in Redis's ledger.
	// Repair settles both.
	Claiming    []string `json:"claiming,omitempty"`
	Overcounted []string `json:"overcounted,omitempty"`
}

// Drift describes the drifted items and unsettled Redis claims ("" when
// none).
func (rep Report) Drift() string {
	var parts []string
	if len(rep.Claiming) > 0 {
		parts = append(parts, fmt.Sprintf("redis claims stuck between their halves: %s", strings.Join(rep.Claiming, ", ")))
	}
	if len(rep.Overcounted) > 0 {
		parts = append(parts, fmt.Sprintf("redis claims counted more than once in its ledger: %s", strings.Join(rep.Overcounted, ", ")))
	}
	for _, d := range rep.Items {
		if d.Drifted() {
			parts = append(parts, fmt.Sprintf("item %d group %d: available redis %d mysql %d, held redis %d mysql %d",
				d.Key.ItemID, d.Key.GroupID, d.Redis.Available, d.MySQL.Available, d.Redis.Held, d.MySQL.Held))
		}
	}
	return strings.Join(parts, "; ")
}

// Reconcile compares both systems' books of a shop, item by item, after
// ending the shadow holds whose truth ended. A shop in StageRedis is not
// shadowed: its drift says what a backfill would change. Read while
// checkout runs, a call in flight between the two systems shows as drift
// of its units; Repair and the gate reconcile with the shop fenced.
func (r *Router) Reconcile(ctx context.Context, shopID uint64) (Report, error) {
	s := r.shop(shopID)
	s.fence.RLock()
	defer s.fence.RUnlock()
	stage := s.Stage()
	if err := r.catchUpBoth(ctx, shopID); err != nil {
		return Report{}, err
	}
	rep, err := r.reconcile(ctx, shopID, stage)
	if err == nil {
		r.reconciled(rep)
	}
	return rep, err
}

func (r *Router) reconcile(ctx context.Context, shopID uint64, stage Stage) (Report, error) {
	ctx = r.stockCtx(ctx)
	rep := Report{ShopID: shopID, Stage: stage, Truth: truthOf(stage)}
	var err error
	if rep.Claiming, err = r.cfg.Redis.ClaimingIDs(ctx, shopID); err != nil {
		return rep, err
	}
	slices.Sort(rep.Claiming)
	if rep.Overcounted, err = r.cfg.Redis.OvercountedClaims(ctx, shopID); err != nil {
		return rep, err
	}
	keys, err := r.shopKeys(ctx, shopID)
	if err != nil {
		return rep, err
	}
	for _, k := range keys {
		d := ItemDrift{Key: k}
		bk, err := r.cfg.Redis.Books(ctx, k)
		if err != nil {
			return rep, err
		}
		d.Redis = Figures{Available: bk.Available, Held: bk.Held, Sold: bk.Claimed}
		if d.MySQL.Available, err = r.cfg.Engine.Available(ctx, k); err != nil {
			return rep, err
		}
		if err := r.cfg.DB.QueryRowContext(ctx, `SELECT
			(SELECT COALESCE(SUM(quantity), 0) FROM inventory_reserved_quantities WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?),
			(SELECT COALESCE(MAX(claimed), 0) FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?)`,
			k.ShopID, k.ItemID, k.GroupID, k.ShopID, k.ItemID, k.GroupID).Scan(&d.MySQL.Held, &d.MySQL.Sold); err != nil {
			return rep, fmt.Errorf("migration: books of %+v: %w", k, err)
		}
		rep.Items = append(rep.Items, d)
	}
	return rep, nil
}

// Repair makes the shadow system of a shop a copy of its source of truth
// (for a shop in StageRedis: makes MySQL a copy of Redis, the backfill),
// with the shop fenced and the sweeps paused: the shadow's holds whose
// truth ended are ended, the truth's holds it lacks are carried over, and
// its sellable units are set to the truth's ledger net of live holds. It
// returns the reconcile report after the repair.
func (r *Router) Repair(ctx context.Context, shopID uint64) (Report, error) {
	s := r.shop(shopID)
	r.sweepMu.Lock()
	s.fence.Lock()
	stage := s.Stage()
	err := r.retry(ctx, func() error { return r.sync(ctx, shopID, truthOf(stage)) })
	s.fence.Unlock()
	r.sweepMu.Unlock()
	if err != nil {
		return Report{}, fmt.Errorf("migration: repair shop %d: %w", shopID, err)
	}
	return r.Reconcile(ctx, shopID)
}

// Backfill is Repair under the name of the step that starts shadowing: it
// sets MySQL's units of a shop from Redis's ledger net of its live holds
// and carries those holds over. A shop entering StageShadow is backfilled
// by its cutover; Backfill runs it by hand (again before a promotion, or
// after a shop ran on Redis alone for a while).
func (r *Router) Backfill(ctx context.Context, shopID uint64) (Report, error) {
	return r.Repair(ctx, shopID)
}

// Move is one shop's change in a rollout's dry run.
type Move struct {
	ShopID   uint64 `json:"shop_id"`
	From, To Stage
	// Gated says why the gate would hold the shop in StageShadow ("" if not).
	Gated string `json:"gated,omitempty"`
	// Volume is the shop's units sold and held in Redis (its ledger and
	// its counters), what the move puts on the other system.
	Sold, Held int64
}

// DryRun returns the shops a rollout would move, with their volumes,
// changing nothing.
func (r *Router) DryRun(ctx context.Context, ro Rollout) ([]Move, error) {
	st, err := r.resolve(ro)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	kill := r.kill
	ids := slices.Clone(r.cfg.ShopsByVolume)
	for _, set := range []map[uint64]bool{st.shadow, st.mysql} {
		for id := range set {
			ids = append(ids, id)
		}
	}
	for id := range r.shops {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var out []Move
	for _, id := range ids {
		s := r.shop(id)
		k := kill || s.killed.Load()
		to := StageRedis
		switch {
		case st.mysql[id] && !k:
			to = StageMySQL
		case st.mysql[id], st.shadow[id]:
			to = StageShadow
		}
		from := s.Stage()
		if to == from {
			continue
		}
		m := Move{ShopID: id, From: from, To: to}
		if to == StageMySQL {
			if from == StageRedis {
				m.Gated = fmt.Sprintf("quiet period: %v to go after entering shadow", r.cfg.QuietPeriod)
			} else {
				m.Gated = r.quiet(s)
			}
		}
		if err := r.cfg.DB.QueryRowContext(r.stockCtx(ctx), `SELECT COALESCE(SUM(claimed), 0) FROM redisstock_ledger WHERE shop_id = ?`, id).
			Scan(&m.Sold); err != nil {
			return nil, fmt.Errorf("migration: volume of shop %d: %w", id, err)
		}
		keys, err := r.shopKeys(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, key := range keys {
			bk, err := r.cfg.Redis.Books(ctx, key)
			if err != nil {
				return nil, err
			}
			m.Held += bk.Held
		}
		out = append(out, m)
	}
	return out, nil
}
