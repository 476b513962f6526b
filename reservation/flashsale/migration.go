package flashsale

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
	"github.com/holdtime/holdtime/reservation/migration"
	"github.com/holdtime/holdtime/reservation/redisstock"
)

// MigrationBackend sells through a migration.Router: each shop on the
// system of its stage. Its audit asks every reservation's source of truth
// whether it was claimed.
type MigrationBackend struct {
	R      *migration.Router
	Redis  *redisstock.Store
	Engine *reservation.Engine
	DB     *sql.DB // the engine's

	mu   sync.Mutex
	made map[uint64]map[string][]reservation.ReservedLine // shop -> reservation -> lines
}

// Name implements Backend.
func (b *MigrationBackend) Name() string { return "migration" }

func (b *MigrationBackend) Receive(ctx context.Context, k reservation.ItemKey, q int64) error {
	return b.R.Receive(ctx, k, q)
}

func (b *MigrationBackend) Reserve(ctx context.Context, p reservation.ReserveParams) (*reservation.Reservation, error) {
	res, err := b.R.Reserve(ctx, p)
	if err == nil {
		b.mu.Lock()
		if b.made == nil {
			b.made = map[uint64]map[string][]reservation.ReservedLine{}
		}
		if b.made[p.ShopID] == nil {
			b.made[p.ShopID] = map[string][]reservation.ReservedLine{}
		}
		b.made[p.ShopID][p.ReservationID] = res.Lines
		b.mu.Unlock()
	}
	return res, err
}

// Claim implements Backend. A killed claim dies after the source of truth
// answered and before the shadow was told (the router's two halves): the
// sale drives it again.
func (b *MigrationBackend) Claim(ctx context.Context, shop uint64, id string) error {
	err := b.R.Claim(ctx, shop, id)
	if err == nil && Killed(ctx) {
		return ErrKilled
	}
	return err
}

func (b *MigrationBackend) ExpireDue(ctx context.Context) (int, error) { return b.R.ExpireDue(ctx) }
func (b *MigrationBackend) Run(ctx context.Context) error              { return b.R.Run(ctx) }

// Counters are the router's mismatches by kind.
func (b *MigrationBackend) Counters() map[string]int64 {
	out := map[string]int64{}
	for k, v := range b.R.Mismatches() {
		out[string(k)] = v
	}
	return out
}

// Sellable asks the system new reservations of the shop go to now.
func (b *MigrationBackend) Sellable(ctx context.Context, k reservation.ItemKey) (int64, int64, error) {
	if b.R.Stage(k.ShopID) == migration.StageMySQL {
		return EngineBackend(b.Engine, b.DB).Sellable(ctx, k)
	}
	bk, err := b.Redis.Books(ctx, k)
	return bk.Available, bk.Held, err
}

// Audit counts, per item/group, the units of every reservation its source
// of truth says it claimed (Claimed), and as leaked the engine's leaks plus
// the units of reservations their source of truth still holds at rest. (A
// shadow's stuck hold is not the truth's: the mismatch counts it.)
func (b *MigrationBackend) Audit(ctx context.Context, k reservation.ItemKey) (Books, error) {
	ctx = conntag.WithTag(ctx, auditTag)
	eb, err := Audit(ctx, b.DB, b.Engine.Config().Strategy, k)
	if err != nil {
		return Books{}, err
	}
	rb, err := b.Redis.Books(ctx, k)
	if err != nil {
		return Books{}, err
	}
	b.mu.Lock()
	made := b.made[k.ShopID]
	ids := make([]string, 0, len(made))
	for id := range made {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	slices.Sort(ids)
	var claimed, stuck int64
	for _, id := range ids {
		var qty int64
		for _, l := range made[id] {
			if l.ItemID == k.ItemID && l.GroupID == k.GroupID {
				qty += l.Quantity
			}
		}
		if qty == 0 {
			continue
		}
		st, err := b.TruthState(ctx, k.ShopID, id)
		if err != nil {
			return Books{}, err
		}
		switch st {
		case reservation.StateClaimed:
			claimed += qty
		case reservation.StateHeld:
			stuck += qty // at rest: its source of truth still holds it
		}
	}
	return Books{OnHand: eb.OnHand, Claimed: claimed, Held: rb.Held, OrphanHeld: eb.Leaked() + stuck, separate: true}, nil
}

// TruthState is what a reservation's source of truth says of it.
func (b *MigrationBackend) TruthState(ctx context.Context, shop uint64, id string) (reservation.State, error) {
	truth, _, err := b.R.Truth(ctx, shop, id)
	if err != nil {
		return "", err
	}
	if truth == migration.BackendRedis {
		res, err := b.Redis.Lookup(ctx, shop, id)
		if errors.Is(err, reservation.ErrNotFound) {
			return "missing", nil
		}
		if err != nil {
			return "", err
		}
		return res.State, nil
	}
	var st string
	err = b.DB.QueryRowContext(ctx, `SELECT state FROM inventory_reservations WHERE shop_id = ? AND reservation_id = ?`,
		shop, id).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "missing", nil
	}
	return reservation.State(st), err
}
