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

// Reserve makes the reservation in the source of truth of the shop's stage
// and, from StageShadow on, in the shadow too (bounded by
// Config.ShadowTimeout, never failing the call). ReserveParams.InTx runs
// only when MySQL is the source of truth; a cart with InTx is refused on a
// Redis-truth shop.
func (r *Router) Reserve(ctx context.Context, p reservation.ReserveParams) (*reservation.Reservation, error) {
	stage := r.Stage(p.ShopID)
	if stage != StageRedis {
		r.touched(p.ShopID)
	}
	truth, shadow := BackendRedis, Backend("")
	switch stage {
	case StageShadow:
		shadow = BackendMySQL
	case StageMySQL:
		truth, shadow = BackendMySQL, BackendRedis
	}
	if truth == BackendRedis && p.InTx != nil {
		return nil, fmt.Errorf("migration: reserve %s: ReserveParams.InTx needs MySQL as the source of truth (shop %d is on %s)",
			p.ReservationID, p.ShopID, stage)
	}
	start := time.Now()
	res, err := r.reserveIn(ctx, truth, p, truth)
	r.metrics.op(ctx, opReserve, stage, truth, roleTruth, start, err)
	if shadow == "" || (err != nil && !errors.Is(err, reservation.ErrInsufficientStock)) {
		return res, err
	}
	sp := p
	sp.InTx = nil
	sctx, cancel := context.WithTimeout(ctx, r.cfg.ShadowTimeout)
	defer cancel()
	start = time.Now()
	sres, serr := r.reserveIn(sctx, shadow, sp, truth)
	r.metrics.op(ctx, opReserve, stage, shadow, roleShadow, start, serr)
	m := Mismatch{Stage: stage, ShopID: p.ShopID, ReservationID: p.ReservationID, Truth: outcomeText(err), Shadow: outcomeText(serr)}
	switch {
	case serr != nil && !errors.Is(serr, reservation.ErrInsufficientStock):
		m.Kind = KindShadowError
	case err == nil && serr != nil:
		m.Kind = KindShadowRefused
	case err != nil && serr == nil:
		m.Kind = KindTruthRefused
		// The customer was refused: the shadow must not keep the units.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShadowTimeout)
		r.releaseIn(rctx, shadow, p.ShopID, p.ReservationID)
		cancel()
	case err == nil && !sameLines(res.Lines, sres.Lines):
		m.Kind, m.Truth, m.Shadow = KindLines, fmt.Sprint(res.Lines), fmt.Sprint(sres.Lines)
	}
	if m.Kind != "" {
		r.mismatch(ctx, m)
	}
	return res, err
}

// reserveIn reserves in one system. A MySQL hold gets its route row (which
// system is the truth) in its own transaction.
func (r *Router) reserveIn(ctx context.Context, b Backend, p reservation.ReserveParams, truth Backend) (*reservation.Reservation, error) {
	if b == BackendRedis {
		return r.cfg.Redis.Reserve(ctx, p)
	}
	own := p.InTx
	p.InTx = func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO migration_routes (shop_id, reservation_id, truth) VALUES (?, ?, ?)`,
			p.ShopID, p.ReservationID, string(truth)); err != nil {
			return err
		}
		if own != nil {
			return own(ctx, tx)
		}
		return nil
	}
	return r.cfg.Engine.Reserve(ctx, p)
}

// Truth returns the source of truth of a reservation (MySQL when it made
// it as the source of truth, else Redis) and whether MySQL holds it at all.
func (r *Router) Truth(ctx context.Context, shopID uint64, reservationID string) (truth Backend, inMySQL bool, err error) {
	if !r.mayRoute(shopID) {
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
// truth, and in the shadow when there is one: MySQL when it holds the
// reservation, Redis for every MySQL-truth one (a Redis shadow that never
// got the reservation shows as a KindClaim mismatch after the reserve's own).
func (r *Router) Claim(ctx context.Context, shopID uint64, reservationID string) error {
	return r.end(ctx, opClaim, KindClaim, shopID, reservationID)
}

// Release releases in the system that made the reservation, and in the
// other like Claim.
func (r *Router) Release(ctx context.Context, shopID uint64, reservationID string) error {
	return r.end(ctx, opRelease, KindRelease, shopID, reservationID)
}

func (r *Router) end(ctx context.Context, op string, kind Kind, shop uint64, id string) error {
	tag := r.cfg.Engine.Config().Tags.Claim
	if op == opRelease {
		tag = r.cfg.Engine.Config().Tags.Release
	}
	truth, inMySQL, err := r.Truth(conntag.WithTag(ctx, tag), shop, id)
	if err != nil {
		return err
	}
	stage := r.Stage(shop)
	start := time.Now()
	err = r.endIn(ctx, op, truth, shop, id)
	r.metrics.op(ctx, op, stage, truth, roleTruth, start, err)
	if truth == BackendRedis && !inMySQL {
		return err // Redis's alone
	}
	if err != nil && !isAnswer(err) {
		return err // the customer retries; the shadow follows then
	}
	shadow := BackendMySQL
	if truth == BackendMySQL {
		shadow = BackendRedis
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.ShadowTimeout)
	defer cancel()
	start = time.Now()
	serr := r.endIn(sctx, op, shadow, shop, id)
	r.metrics.op(ctx, op, stage, shadow, roleShadow, start, serr)
	if outcomeText(err) != outcomeText(serr) {
		k := kind
		if !isAnswer(serr) {
			k = KindShadowError
		}
		r.mismatch(ctx, Mismatch{Kind: k, Stage: stage, ShopID: shop, ReservationID: id, Truth: outcomeText(err), Shadow: outcomeText(serr)})
	}
	return err
}

func (r *Router) endIn(ctx context.Context, op string, b Backend, shop uint64, id string) error {
	switch {
	case op == opClaim && b == BackendRedis:
		return r.cfg.Redis.Claim(ctx, shop, id)
	case op == opClaim:
		return r.cfg.Engine.Claim(ctx, shop, id)
	case b == BackendRedis:
		return r.cfg.Redis.Release(ctx, shop, id)
	}
	return r.cfg.Engine.Release(ctx, shop, id)
}

func (r *Router) releaseIn(ctx context.Context, b Backend, shop uint64, id string) error {
	return r.endIn(ctx, opRelease, b, shop, id)
}

// ExpireDue expires due holds in both systems.
func (r *Router) ExpireDue(ctx context.Context) (int, error) {
	n, err := r.cfg.Redis.ExpireDue(ctx)
	m, err2 := r.cfg.Engine.ExpireDue(ctx)
	return n + m, errors.Join(err, err2)
}

// Run runs both systems' background work (the engine's refill and expiry,
// Redis's expiry) and deletes route rows older than the engine's
// Config.TTL plus Config.Retention every 10 minutes, until ctx ends.
func (r *Router) Run(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- r.cfg.Redis.Run(ctx) }()
	pruned := make(chan struct{})
	go func() {
		defer close(pruned)
		t := time.NewTicker(10 * time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				ec := r.cfg.Engine.Config()
				r.PruneRoutes(ctx, ec.TTL+ec.Retention)
			}
		}
	}()
	err := r.cfg.Engine.Run(ctx)
	<-pruned
	return errors.Join(err, <-done)
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

// touched remembers that a shop left StageRedis: from then on its claims
// and releases look up their route.
func (r *Router) touched(shop uint64) {
	if _, ok := r.everMoved.Load(shop); !ok {
		r.everMoved.Store(shop, true)
	}
}

// mayRoute reports whether a shop can have MySQL reservations: it is past
// StageRedis in the rollout or was since this Router started. (A Router
// that starts while a shop is back on Redis with MySQL holds in flight must
// be given the shop in an allow-list until they ended.)
func (r *Router) mayRoute(shop uint64) bool {
	if _, ok := r.everMoved.Load(shop); ok {
		return true
	}
	st := r.rollout.Load()
	return st.shadow[shop] || st.mysql[shop]
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

// mismatch counts m, samples it to the log, and hands it to OnMismatch.
func (r *Router) mismatch(ctx context.Context, m Mismatch) {
	m.At = time.Now()
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
