package migration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
)

// Operation names, the "operation" attribute.
const (
	opReserve = "reserve"
	opClaim   = "claim"
	opRelease = "release"
)

// Roles of a call.
const (
	roleTruth  = "truth"
	roleShadow = "shadow"
)

// Reserve makes the reservation in the source of truth of the shop's
// stage. From StageShadow on, the shadow then records what the truth
// decided: nothing when the truth refused; exactly the truth's lines when
// it granted (bounded by Config.ShadowTimeout, never failing the call; a
// shadow that cannot record them is a KindShadowShort mismatch).
// ReserveParams.InTx runs only when MySQL is the source of truth; a cart
// with InTx is refused on a Redis-truth shop.
func (r *Router) Reserve(ctx context.Context, p reservation.ReserveParams) (*reservation.Reservation, error) {
	s := r.shop(p.ShopID)
	s.fence.RLock()
	defer s.fence.RUnlock()
	stage := s.Stage()
	truth := truthOf(stage)
	if truth == BackendRedis && p.InTx != nil {
		return nil, fmt.Errorf("migration: reserve %s: ReserveParams.InTx needs MySQL as the source of truth (shop %d is on %s)",
			p.ReservationID, p.ShopID, stage)
	}
	if stage != StageRedis {
		// From the truth's grant to the shadow's record, this call is in
		// flight: a short shadow waits for such calls (see record).
		s.inFlight(1)
		defer s.inFlight(-1)
	}
	start := time.Now()
	res, err := r.reserveIn(ctx, truth, p)
	r.metrics.op(ctx, opReserve, stage, truth, roleTruth, start, err)
	if stage == StageRedis || err != nil {
		return res, err // refused or failed: the shadow takes nothing
	}
	shadow := other(truth)
	sctx, cancel := context.WithTimeout(ctx, r.cfg.ShadowTimeout)
	defer cancel()
	start = time.Now()
	deadline := res.ExpiresAt.Add(r.cfg.ShadowGrace)
	sres, serr := r.record(sctx, s, shadow, truth, p.ReservationID, res.Lines, deadline)
	var cerr error // a catch-up that could not end: the shadow could not be brought level
	for try := 0; errors.Is(serr, reservation.ErrInsufficientStock); try++ {
		// The shadow may still hold units the truth's expiry gave back
		// (the shadow follows expiries after the truth's sweep): catch up
		// and try again; then again each time another record of the shop
		// in flight ends (it may be of a hold the truth already expired),
		// within ShadowTimeout.
		if try > 0 && !r.othersRecording(sctx, s) {
			break
		}
		if cerr = r.catchUpShared(sctx, s, shadow); cerr != nil {
			break
		}
		sres, serr = r.record(sctx, s, shadow, truth, p.ReservationID, res.Lines, deadline)
	}
	if serr == nil && !time.Now().Before(res.ExpiresAt) {
		// Recorded after the truth's deadline: the truth's sweep may have
		// expired it before there was a record to follow.
		r.followOne(sctx, p.ShopID, p.ReservationID, truth)
	}
	r.metrics.op(ctx, opReserve, stage, shadow, roleShadow, start, serr)
	m := Mismatch{Stage: stage, ShopID: p.ShopID, ReservationID: p.ReservationID, Truth: "ok", Shadow: outcomeText(serr)}
	switch {
	case errors.Is(serr, reservation.ErrInsufficientStock) && r.endedFirst(sctx, p.ShopID, p.ReservationID, truth):
		// The truth's hold expired before the shadow could record it
		// (a record slower than the hold's TTL): the truth gave its units
		// back and may have granted them again, and the shadow, which
		// never took them, agrees with it.
	case errors.Is(serr, reservation.ErrInsufficientStock) && cerr != nil:
		// Short, and the catch-up that would have given it the units the
		// truth ended failed or ran out of ShadowTimeout: the shadow
		// could not follow in time, which says nothing of its drift.
		m.Kind, m.Shadow = KindShadowError, "insufficient_stock; catch-up: "+outcomeText(cerr)
	case errors.Is(serr, reservation.ErrInsufficientStock):
		m.Kind = KindShadowShort
	case serr != nil:
		m.Kind = KindShadowError
	case !sameLines(res.Lines, sres.Lines) || sres.State != reservation.StateHeld:
		m.Kind, m.Truth, m.Shadow = KindLines, fmt.Sprint(res.Lines), fmt.Sprint(sres.State, sres.Lines)
	}
	if m.Kind != "" {
		r.mismatch(ctx, m)
	}
	return res, nil
}

// reserveIn reserves in the source of truth. A MySQL hold gets its route
// row (truth = mysql) in its own transaction.
func (r *Router) reserveIn(ctx context.Context, b Backend, p reservation.ReserveParams) (*reservation.Reservation, error) {
	if b == BackendRedis {
		return r.cfg.Redis.Reserve(ctx, p)
	}
	p.InTx = withRoute(p, BackendMySQL)
	return r.cfg.Engine.Reserve(ctx, p)
}

// withRoute wraps p.InTx to write the route row of a MySQL hold first.
func withRoute(p reservation.ReserveParams, truth Backend) func(context.Context, *sql.Tx) error {
	own := p.InTx
	return func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO migration_routes (shop_id, reservation_id, truth) VALUES (?, ?, ?)`,
			p.ShopID, p.ReservationID, string(truth)); err != nil {
			return err
		}
		if own != nil {
			return own(ctx, tx)
		}
		return nil
	}
}

// record is mirror for shop s.
func (r *Router) record(ctx context.Context, s *shop, shadow, truth Backend, id string, lines []reservation.ReservedLine, deadline time.Time) (*reservation.Reservation, error) {
	return r.mirror(ctx, shadow, truth, s.id, id, lines, deadline)
}

// inFlight counts the shop's reserves between the truth's call and the
// shadow's record; one ending wakes the short shadows waiting.
func (s *shop) inFlight(d int) {
	s.catchMu.Lock()
	s.mirroring += d
	if d < 0 && s.mirrored != nil {
		close(s.mirrored)
		s.mirrored = nil
	}
	s.catchMu.Unlock()
}

// othersRecording waits, when other reserves of shop s are in flight (a
// truth's grant not yet recorded in the shadow: its hold may be one the
// truth already expired, whose record this shadow must see to catch up),
// for one to end, and reports whether it waited.
func (r *Router) othersRecording(ctx context.Context, s *shop) bool {
	s.catchMu.Lock()
	if s.mirroring <= 1 { // this call's own
		s.catchMu.Unlock()
		return false
	}
	if s.mirrored == nil {
		s.mirrored = make(chan struct{})
	}
	ch := s.mirrored
	s.catchMu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// catchUpShared is catchUp for the reserve path: it waits for a catchUp of
// the shop that is running (it may have started before this call's
// trigger), then runs its own.
func (r *Router) catchUpShared(ctx context.Context, s *shop, shadow Backend) error {
	for {
		s.catchMu.Lock()
		ch := s.catching
		if ch == nil {
			ch = make(chan struct{})
			s.catching = ch
			s.catchMu.Unlock()
			err := r.catchUp(ctx, s.id, shadow)
			s.catchMu.Lock()
			s.catching = nil
			close(ch)
			s.catchMu.Unlock()
			return err
		}
		s.catchMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// truthState is a reservation's state in its source of truth (held for a
// Redis hold being claimed; "" when the truth does not know it).
func (r *Router) truthState(ctx context.Context, shopID uint64, id string, truth Backend) (reservation.State, error) {
	ctx = r.stockCtx(ctx)
	var state string
	if truth == BackendRedis {
		st, err := r.cfg.Redis.States(ctx, shopID, []string{id})
		if err != nil {
			return "", err
		}
		state = st[0]
		if state == "claiming" {
			state = string(reservation.StateHeld)
		}
	} else if err := r.cfg.DB.QueryRowContext(ctx, `SELECT state FROM inventory_reservations WHERE shop_id = ? AND reservation_id = ?`,
		shopID, id).Scan(&state); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", err
	}
	return reservation.State(state), nil
}

// endedFirst reports whether the truth says a reservation it granted
// expired: a shadow that could not record it has nothing to record.
func (r *Router) endedFirst(ctx context.Context, shopID uint64, id string, truth Backend) bool {
	st, err := r.truthState(ctx, shopID, id, truth)
	return err == nil && st == reservation.StateExpired
}

// followOne makes the shadow's record of one reservation follow its
// truth when the truth no longer holds it.
func (r *Router) followOne(ctx context.Context, shopID uint64, id string, truth Backend) error {
	state, err := r.truthState(ctx, shopID, id, truth)
	if err != nil {
		return err
	}
	switch state {
	case reservation.StateHeld:
		return nil
	case reservation.StateClaimed:
		return ignoreEnded(r.endIn(r.stockCtx(ctx), opClaim, other(truth), shopID, id, true))
	}
	return ignoreEnded(r.endIn(r.stockCtx(ctx), opRelease, other(truth), shopID, id, true))
}

// mirror records in the shadow system a hold the truth granted: exactly
// its lines, each from its own location group, until deadline.
func (r *Router) mirror(ctx context.Context, shadow, truth Backend, shopID uint64, id string, lines []reservation.ReservedLine, deadline time.Time) (*reservation.Reservation, error) {
	if shadow == BackendRedis {
		return r.cfg.Redis.Mirror(ctx, shopID, id, lines, deadline)
	}
	p := reservation.ReserveParams{ShopID: shopID, ReservationID: id, TTL: max(time.Until(deadline), time.Millisecond)}
	for _, l := range lines {
		p.Lines = append(p.Lines, reservation.Line{ItemID: l.ItemID, Quantity: l.Quantity, GroupIDs: []uint64{l.GroupID}})
	}
	p.InTx = withRoute(p, truth)
	return r.cfg.Engine.Reserve(ctx, p)
}

// Truth returns the source of truth of a reservation (MySQL when it made
// it as the source of truth, else Redis) and whether MySQL holds it at all.
// The route is looked up for every shop that ever left StageRedis (saved
// with the shop: it survives a restart).
func (r *Router) Truth(ctx context.Context, shopID uint64, reservationID string) (truth Backend, inMySQL bool, err error) {
	r.mu.Lock()
	s := r.shops[shopID]
	r.mu.Unlock()
	if s == nil || !s.everLeft.Load() {
		return BackendRedis, false, nil
	}
	var t string
	err = r.cfg.DB.QueryRowContext(ctx, `SELECT truth FROM migration_routes WHERE shop_id = ? AND reservation_id = ?`,
		shopID, reservationID).Scan(&t)
	switch {
	case err == nil:
		return Backend(t), true, nil
	case errors.Is(err, sql.ErrNoRows):
		return BackendRedis, false, nil
	}
	return "", false, fmt.Errorf("migration: route of %s: %w", reservationID, err)
}

// Claim claims in the system that made the reservation as the source of
// truth. The shadow, when it holds the reservation, follows the truth's
// answer: it claims what the truth claimed, and gives back the units of a
// hold the truth found expired or released (it never claims one).
func (r *Router) Claim(ctx context.Context, shopID uint64, reservationID string) error {
	return r.end(ctx, opClaim, shopID, reservationID)
}

// Release releases in the system that made the reservation; the shadow
// follows like Claim.
func (r *Router) Release(ctx context.Context, shopID uint64, reservationID string) error {
	return r.end(ctx, opRelease, shopID, reservationID)
}

func (r *Router) end(ctx context.Context, op string, shopID uint64, id string) error {
	s := r.shop(shopID)
	s.fence.RLock()
	defer s.fence.RUnlock()
	tag := r.cfg.Engine.Config().Tags.Claim
	if op == opRelease {
		tag = r.cfg.Engine.Config().Tags.Release
	}
	truth, inMySQL, err := r.Truth(conntag.WithTag(ctx, tag), shopID, id)
	if err != nil {
		return err
	}
	stage := s.Stage()
	start := time.Now()
	err = r.endIn(ctx, op, truth, shopID, id, false)
	r.metrics.op(ctx, op, stage, truth, roleTruth, start, err)
	if truth == BackendRedis && !inMySQL {
		return err // Redis's alone
	}
	if !isAnswer(err) {
		return err // the truth's outcome is unknown: a retry, or catchUp, makes the shadow follow
	}
	if truth == BackendRedis && errors.Is(err, reservation.ErrExpired) {
		// Redis found the hold due but gives its units back only when its
		// sweeper passes: the truth gives them back first, now, or the
		// shadow (following at once) would have units the truth has not.
		r.cfg.Redis.Expire(ctx, shopID, id)
	}
	// What the shadow does: claim what the truth claimed, give back
	// what the truth does not hold, nothing when the truth never had it.
	follow, kind := opRelease, KindRelease
	switch {
	case err == nil && op == opClaim, errors.Is(err, reservation.ErrClaimed):
		follow, kind = opClaim, KindClaim
	case errors.Is(err, reservation.ErrNotFound):
		// The truth lost it (a Redis restart): the shadow gives it back.
		kind = KindClaim
		if op == opRelease {
			kind = KindRelease
		}
		r.mismatch(ctx, Mismatch{Kind: kind, Stage: stage, ShopID: shopID, ReservationID: id, Truth: outcomeText(err), Shadow: "held"})
	}
	shadow := other(truth)
	sctx, cancel := context.WithTimeout(ctx, r.cfg.ShadowTimeout)
	defer cancel()
	start = time.Now()
	serr := r.endIn(sctx, follow, shadow, shopID, id, true)
	r.metrics.op(ctx, follow, stage, shadow, roleShadow, start, serr)
	switch {
	case follow == opRelease && errors.Is(serr, reservation.ErrExpired):
		serr = nil // the shadow's own sweeper ended it (ShadowGrace after the truth's deadline)
	case follow == opRelease && errors.Is(serr, reservation.ErrNotFound) && r.endedFirst(sctx, shopID, id, truth):
		// The truth's hold expired before the shadow recorded it (see
		// Reserve): the shadow never had it, and agrees.
		serr = nil
	}
	if serr != nil {
		k := kind
		if !isAnswer(serr) {
			k = KindShadowError
		}
		r.mismatch(ctx, Mismatch{Kind: k, Stage: stage, ShopID: shopID, ReservationID: id, Truth: outcomeText(err), Shadow: outcomeText(serr)})
	}
	return err
}

// endIn ends a hold in one system. A shadow claim in Redis never drives
// again a claim of the hold that is running (ClaimHeld): a catch-up and the
// call's own follow-up may claim it at the same time, and a second run of
// its halves would count the sale twice in Redis's ledger.
func (r *Router) endIn(ctx context.Context, op string, b Backend, shop uint64, id string, shadow bool) error {
	switch {
	case op == opClaim && b == BackendRedis && shadow:
		return r.cfg.Redis.ClaimHeld(ctx, shop, id)
	case op == opClaim && b == BackendRedis:
		return r.cfg.Redis.Claim(ctx, shop, id)
	case op == opClaim:
		return r.cfg.Engine.Claim(ctx, shop, id)
	case b == BackendRedis:
		return r.cfg.Redis.Release(ctx, shop, id)
	}
	return r.cfg.Engine.Release(ctx, shop, id)
}

// ExpireDue expires due holds in both systems, then ends the shadow holds
// whose truth expired, and returns how many holds the sweeps expired.
func (r *Router) ExpireDue(ctx context.Context) (int, error) {
	r.sweepMu.RLock()
	n, err := r.cfg.Redis.ExpireDue(ctx)
	m, err2 := r.cfg.Engine.ExpireDue(ctx)
	r.sweepMu.RUnlock()
	return n + m, errors.Join(err, err2, r.catchUpAll(ctx))
}

// catchUpAll runs catchUp for every shop that left StageRedis.
func (r *Router) catchUpAll(ctx context.Context) error {
	r.mu.Lock()
	var shops []*shop
	for _, s := range r.shops {
		if s.everLeft.Load() {
			shops = append(shops, s)
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, s := range shops {
		s.fence.RLock()
		errs = append(errs, r.catchUpBoth(ctx, s.id))
		s.fence.RUnlock()
	}
	return errors.Join(errs...)
}

// Run does both systems' background work until ctx ends: the engine's
// refills (Engine.RunRefill), both systems' expiry sweeps (at the
// engine's and the Store's ExpiryInterval; paused while a cutover runs,
// and followed by the shadows), the gate (the rollout applied again every
// Config.GateInterval) and, every 10 minutes, the deletion of route rows
// older than the engine's Config.TTL plus Config.Retention and of the
// Redis design's claim receipts older than its Config.Retention. Do not run
// the Engine's or the Store's own Run beside it.
func (r *Router) Run(ctx context.Context) error {
	var errs [2]error
	done := make(chan struct{})
	go func() { defer close(done); errs[0] = r.cfg.Engine.RunRefill(ctx) }()
	loop := func(every time.Duration, do func()) chan struct{} {
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					do()
				}
			}
		}()
		return stopped
	}
	sweep := func(expire func(context.Context) (int, error)) func() {
		return func() {
			r.sweepMu.RLock()
			n, _ := expire(ctx)
			r.sweepMu.RUnlock()
			if n > 0 {
				r.catchUpAll(ctx)
			}
		}
	}
	loops := []chan struct{}{
		loop(r.cfg.Redis.Config().ExpiryInterval, sweep(r.cfg.Redis.ExpireDue)),
		loop(r.cfg.Engine.Config().ExpiryInterval, sweep(r.cfg.Engine.ExpireDue)),
		loop(r.cfg.GateInterval, func() {
			r.applyMu.Lock()
			err := r.apply(ctx, false)
			r.applyMu.Unlock()
			if err != nil && ctx.Err() == nil && r.cfg.Logger != nil {
				r.cfg.Logger.Warn("migration: rollout not applied", "error", err)
			}
		}),
		loop(10*time.Minute, func() {
			ec := r.cfg.Engine.Config()
			r.PruneRoutes(ctx, ec.TTL+ec.Retention)
			r.cfg.Redis.PruneClaims(ctx, r.cfg.Redis.Config().Retention)
		}),
	}
	for _, l := range loops {
		<-l
	}
	<-done
	return errs[0]
}

// PruneRoutes deletes the route rows of reservations made more than
// olderThan ago (in batches of 1,000), and returns how many. Keep routes at
// least as long as a hold can last: a claim without its route goes to Redis.
func (r *Router) PruneRoutes(ctx context.Context, olderThan time.Duration) (int64, error) {
	ctx = conntag.WithTag(ctx, r.cfg.Engine.Config().Tags.Expire)
	var total int64
	for {
		res, err := r.cfg.DB.ExecContext(ctx, `DELETE FROM migration_routes
			WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT 1000`, olderThan.Microseconds())
		if err != nil {
			return total, fmt.Errorf("migration: prune routes: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < 1000 {
			return total, nil
		}
	}
}

// Receive stocks an item/group in both systems (the engine first, then
// Redis; a failure of either is returned). See ReceiveOnce to make it safe
// to repeat.
func (r *Router) Receive(ctx context.Context, k reservation.ItemKey, quantity int64) error {
	return r.ReceiveOnce(ctx, reservation.StockParams{ItemKey: k, Quantity: quantity})
}

// ReceiveOnce is Receive with p.AdjustmentID as its idempotency key: a
// receipt whose id was applied is not applied again in either system, so
// the call is safe to repeat after any error. (Without an id it is
// Receive.)
func (r *Router) ReceiveOnce(ctx context.Context, p reservation.StockParams) error {
	if p.Quantity <= 0 {
		return fmt.Errorf("migration: receive quantity %d must be positive", p.Quantity)
	}
	s := r.shop(p.ShopID)
	s.fence.RLock()
	defer s.fence.RUnlock()
	if err := r.cfg.Engine.Receive(ctx, p); err != nil {
		return err
	}
	if _, err := r.cfg.Engine.Refill(ctx, p.ItemKey); err != nil {
		return err
	}
	if p.AdjustmentID == "" {
		return r.cfg.Redis.Receive(ctx, p.ItemKey, p.Quantity)
	}
	res, err := r.cfg.DB.ExecContext(r.stockCtx(ctx), `INSERT IGNORE INTO migration_receipts (shop_id, adjustment_id) VALUES (?, ?)`,
		p.ShopID, p.AdjustmentID)
	if err != nil {
		return fmt.Errorf("migration: receipt %s: %w", p.AdjustmentID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil // Redis has it
	}
	if err := r.cfg.Redis.Receive(ctx, p.ItemKey, p.Quantity); err != nil {
		// Not applied: forget the receipt so that a retry applies it.
		r.cfg.DB.ExecContext(r.stockCtx(context.WithoutCancel(ctx)), `DELETE FROM migration_receipts WHERE shop_id = ? AND adjustment_id = ?`,
			p.ShopID, p.AdjustmentID)
		return err
	}
	return nil
}

// isAnswer reports whether err is a system's answer about the reservation
// (as opposed to a failure to get one).
func isAnswer(err error) bool {
	for _, a := range []error{reservation.ErrInsufficientStock, reservation.ErrNotFound, reservation.ErrExpired,
		reservation.ErrReleased, reservation.ErrClaimed} {
		if errors.Is(err, a) {
			return true
		}
	}
	return err == nil
}

// outcomeText is an outcome as compared between systems.
func outcomeText(err error) string {
	for _, a := range []struct {
		err  error
		name string
	}{{reservation.ErrInsufficientStock, "insufficient_stock"}, {reservation.ErrNotFound, "not_found"},
		{reservation.ErrExpired, "expired"}, {reservation.ErrReleased, "released"}, {reservation.ErrClaimed, "claimed"}} {
		if errors.Is(err, a.err) {
			return a.name
		}
	}
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}

func sameLines(a, b []reservation.ReservedLine) bool {
	cmpLine := func(x, y reservation.ReservedLine) int {
		if x.ItemID != y.ItemID {
			return int(x.ItemID) - int(y.ItemID)
		}
		if x.GroupID != y.GroupID {
			return int(x.GroupID) - int(y.GroupID)
		}
		return int(x.Quantity - y.Quantity)
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, cmpLine)
	slices.SortFunc(b, cmpLine)
	return slices.Equal(a, b)
}

// mismatch counts m, samples it to the log, and hands it to OnMismatch;
// it restarts the shop's quiet period.
func (r *Router) mismatch(ctx context.Context, m Mismatch) {
	m.At = time.Now()
	r.shop(m.ShopID).lastMismatch.Store(m.At.UnixNano())
	r.mu.Lock()
	r.mismatches[m.Kind]++
	sample := r.cfg.Logger != nil && m.At.Sub(r.lastSample[m.Kind]) >= r.cfg.SampleInterval
	if sample {
		r.lastSample[m.Kind] = m.At
	}
	r.mu.Unlock()
	r.metrics.mismatch(ctx, m)
	if sample {
		r.cfg.Logger.Info("migration mismatch", "kind", m.Kind, "stage", m.Stage, "shop", m.ShopID,
			"reservation", m.ReservationID, "truth", m.Truth, "shadow", m.Shadow)
	}
	if r.cfg.OnMismatch != nil {
		r.cfg.OnMismatch(m)
	}
}
