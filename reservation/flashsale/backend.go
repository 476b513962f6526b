package flashsale

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/redisstock"
)

// Backend is a reservation system a sale drives: the engine (any strategy),
// the Redis design (package redisstock), or a migration between them
// (package migration). Run builds the engine itself when Config.Backend is
// nil.
type Backend interface {
	// Name describes the backend in reports (skip_locked, redis ledger_first, ...).
	Name() string
	// Receive stocks one item/group.
	Receive(ctx context.Context, k reservation.ItemKey, quantity int64) error
	Reserve(ctx context.Context, p reservation.ReserveParams) (*reservation.Reservation, error)
	// Claim, after payment. A claim the sale marked killed (see
	// Config.KillClaims) must die where the backend is most fragile and
	// return an error; the sale then drives the claim again.
	Claim(ctx context.Context, shopID uint64, reservationID string) error
	ExpireDue(ctx context.Context) (int, error)
	// Sellable is what one item/group can still sell now, and what live
	// holds keep (abandoned holds come back when they expire).
	Sellable(ctx context.Context, k reservation.ItemKey) (sellable, held int64, err error)
	// Audit reads the books of one item/group at rest.
	Audit(ctx context.Context, k reservation.ItemKey) (Books, error)
	// Run does the background work (refill, expiry) until ctx ends.
	Run(ctx context.Context) error
}

// killKey marks a claim's context: this claim dies between its halves.
type killKey struct{}

func withKill(ctx context.Context) context.Context { return context.WithValue(ctx, killKey{}, true) }

// Killed reports whether the sale marked ctx's claim to be killed
// (Config.KillClaims). A Backend of your own calls it in its claim path.
func Killed(ctx context.Context) bool { v, _ := ctx.Value(killKey{}).(bool); return v }

// ErrKilled is what a killed claim returns: the process died there.
var ErrKilled = errors.New("flashsale: claim killed between its halves (fault injection)")

// engineBackend is the reservation engine.
type engineBackend struct {
	e        *reservation.Engine
	db       *sql.DB
	strategy reservation.Strategy
	lastNs   atomic.Int64 // the latest claim's duration: where a kill lands
}

// EngineBackend drives e, whose tables are in db.
func EngineBackend(e *reservation.Engine, db *sql.DB) Backend {
	return &engineBackend{e: e, db: db, strategy: e.Config().Strategy}
}

func (b *engineBackend) Name() string { return string(b.strategy) }

func (b *engineBackend) Receive(ctx context.Context, k reservation.ItemKey, q int64) error {
	if err := b.e.Receive(ctx, reservation.StockParams{ItemKey: k, Quantity: q}); err != nil {
		return err
	}
	_, err := b.e.Refill(ctx, k)
	return err
}

func (b *engineBackend) Reserve(ctx context.Context, p reservation.ReserveParams) (*reservation.Reservation, error) {
	return b.e.Reserve(ctx, p)
}

// Claim is one transaction: there is no "between the halves". A killed
// claim has its context cancelled at a random point of a claim's usual
// duration, which rolls the transaction back (or loses its COMMIT's reply)
// wherever it is, as a dying process would.
func (b *engineBackend) Claim(ctx context.Context, shop uint64, id string) error {
	if !Killed(ctx) {
		start := time.Now()
		err := b.e.Claim(ctx, shop, id)
		b.lastNs.Store(int64(time.Since(start)))
		return err
	}
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	after := time.Duration(rand.Int64N(max(b.lastNs.Load(), int64(time.Millisecond))))
	t := time.AfterFunc(after, cancel)
	defer t.Stop()
	if err := b.e.Claim(kctx, shop, id); err != nil || kctx.Err() != nil {
		return errors.Join(ErrKilled, err)
	}
	return nil
}

func (b *engineBackend) ExpireDue(ctx context.Context) (int, error) { return b.e.ExpireDue(ctx) }
func (b *engineBackend) Run(ctx context.Context) error              { return b.e.Run(ctx) }

func (b *engineBackend) Sellable(ctx context.Context, k reservation.ItemKey) (int64, int64, error) {
	ctx = conntag.WithTag(ctx, auditTag)
	n, err := b.e.Available(ctx, k)
	if err != nil {
		return 0, 0, err
	}
	var h int64
	err = b.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(quantity), 0) FROM inventory_reserved_quantities
		WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`, k.ShopID, k.ItemID, k.GroupID).Scan(&h)
	return n, h, err
}

func (b *engineBackend) Audit(ctx context.Context, k reservation.ItemKey) (Books, error) {
	return Audit(ctx, b.db, b.strategy, k)
}

// RedisBackend is the Redis design under sale.
type RedisBackend struct {
	*redisstock.Store
}

// NewRedisBackend builds a redisstock.Store from cfg for a sale: its
// claims die between their halves when the sale marks them killed (a
// BetweenClaimHalves of cfg's own still runs first).
func NewRedisBackend(cfg redisstock.Config) (*RedisBackend, error) {
	own := cfg.BetweenClaimHalves
	cfg.BetweenClaimHalves = func(ctx context.Context, shop uint64, id string) error {
		if own != nil {
			if err := own(ctx, shop, id); err != nil {
				return err
			}
		}
		if Killed(ctx) {
			return ErrKilled
		}
		return nil
	}
	s, err := redisstock.New(cfg)
	if err != nil {
		return nil, err
	}
	return &RedisBackend{Store: s}, nil
}

func (b *RedisBackend) Name() string { return "redis " + string(b.Config().ClaimOrder) }

func (b *RedisBackend) Sellable(ctx context.Context, k reservation.ItemKey) (int64, int64, error) {
	bk, err := b.Books(ctx, k)
	return bk.Available, bk.Held, err
}

// Audit maps both systems' books: Pooled is Redis's available count, Held
// its live holds (at rest every one is a stuck hold: leaked), OnHand and
// Claimed the ledger's.
func (b *RedisBackend) Audit(ctx context.Context, k reservation.ItemKey) (Books, error) {
	bk, err := b.Books(ctx, k)
	return Books{OnHand: bk.OnHand, Claimed: bk.Claimed, Pooled: bk.Available, Held: bk.Held, OrphanHeld: bk.Held,
		separate: true}, err
}

// KillConnections KILLs every connection to database name but the caller's:
// the engine's "restart" fault (its process dies, MySQL drops its
// sessions mid-transaction). admin needs the privilege to KILL them.
func KillConnections(ctx context.Context, admin *sql.DB, name string) error {
	rows, err := admin.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()`, name)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
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
	for _, id := range ids {
		// KILL takes no placeholder; id is an integer the server gave.
		admin.ExecContext(ctx, fmt.Sprintf("KILL %d", id)) // one that ended meanwhile is fine
	}
	return nil
}
