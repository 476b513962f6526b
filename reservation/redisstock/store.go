package redisstock

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/reservation"
)

// ClaimOrder is which system a claim updates first.
type ClaimOrder string

const (
	// ClaimLedgerFirst decrements the MySQL ledger, then ends the hold in
	// Redis. Dying in between undersells (see the package documentation).
	ClaimLedgerFirst ClaimOrder = "ledger_first"
	// ClaimRedisFirst ends the hold in Redis, then decrements the ledger.
	// Dying in between oversells.
	ClaimRedisFirst ClaimOrder = "redis_first"
)

// Config configures a Store. Redis and DB are required; every other field's
// zero value is its documented default.
type Config struct {
	// Redis is the client. New adds a hook to it that times every command
	// per tag (when MeterProvider is set); give the Store a client of its
	// own.
	Redis *redis.Client
	// DB holds the ledger (redisstock_ledger). Open it with conntag.
	DB *sql.DB
	// ClaimOrder defaults to ClaimLedgerFirst.
	ClaimOrder ClaimOrder
	// TTL is the hold time of a reservation whose ReserveParams.TTL is
	// zero. Default 15 minutes.
	TTL time.Duration
	// Retention is how long an ended reservation's hash stays, answering
	// retries. Default 24 h.
	Retention time.Duration
	// ExpiryInterval is how often Run sweeps due holds. Default 1 s.
	ExpiryInterval time.Duration
	// ExpiryBatch bounds the holds one sweep reads at a time. Default 100.
	ExpiryBatch int
	// KeyPrefix starts every key. Default "holdtime".
	KeyPrefix string
	// Tags are the tags of Redis commands and SQL statements, the
	// engine's by default (inventory_reserve, inventory_claim, ...).
	Tags reservation.Tags
	// MeterProvider receives the metrics (see the package documentation).
	MeterProvider metric.MeterProvider
	// BetweenClaimHalves, when set, runs between the two halves of every
	// claim (after the first system was updated, before the second). An
	// error ends the claim there and is returned, as if the process had
	// died at that point. It exists for fault injection; leave it nil.
	BetweenClaimHalves func(ctx context.Context, shopID uint64, reservationID string) error
	// Now is the clock of deadlines. Default time.Now.
	Now func() time.Time
}

// Store is the Redis reservation design. It is safe for concurrent use.
type Store struct {
	cfg     Config
	rdb     *redis.Client
	db      *sql.DB
	metrics *metrics
}

// ErrUnavailable wraps a Redis error (connection refused or lost, a server
// loading its data after a restart): whether a write took effect may be
// unknown, which is one of the design's problems.
var ErrUnavailable = errors.New("redisstock: redis unavailable")

// New validates cfg and returns a Store.
func New(cfg Config) (*Store, error) {
	if cfg.Redis == nil || cfg.DB == nil {
		return nil, errors.New("redisstock: Config.Redis and Config.DB are required")
	}
	cfg.ClaimOrder = cmp.Or(cfg.ClaimOrder, ClaimLedgerFirst)
	switch cfg.ClaimOrder {
	case ClaimLedgerFirst, ClaimRedisFirst:
	default:
		return nil, fmt.Errorf("redisstock: unknown ClaimOrder %q (ledger_first or redis_first)", cfg.ClaimOrder)
	}
	cfg.TTL = cmp.Or(cfg.TTL, 15*time.Minute)
	cfg.Retention = cmp.Or(cfg.Retention, 24*time.Hour)
	cfg.ExpiryInterval = cmp.Or(cfg.ExpiryInterval, time.Second)
	cfg.ExpiryBatch = cmp.Or(cfg.ExpiryBatch, 100)
	cfg.KeyPrefix = cmp.Or(cfg.KeyPrefix, "holdtime")
	cfg.Tags.Reserve = cmp.Or(cfg.Tags.Reserve, "inventory_reserve")
	cfg.Tags.Claim = cmp.Or(cfg.Tags.Claim, "inventory_claim")
	cfg.Tags.Release = cmp.Or(cfg.Tags.Release, "inventory_release")
	cfg.Tags.Refill = cmp.Or(cfg.Tags.Refill, "inventory_refill")
	cfg.Tags.Expire = cmp.Or(cfg.Tags.Expire, "inventory_expire")
	cfg.Tags.Stock = cmp.Or(cfg.Tags.Stock, "inventory_stock")
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TTL < 0 || cfg.Retention < 0 || cfg.ExpiryInterval < 0 || cfg.ExpiryBatch < 0 {
		return nil, errors.New("redisstock: TTL, Retention, ExpiryInterval and ExpiryBatch must not be negative")
	}
	m, err := newMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, rdb: cfg.Redis, db: cfg.DB, metrics: m}
	if cfg.MeterProvider != nil {
		s.rdb.AddHook(m)
	}
	return s, nil
}

// Config returns the Store's configuration with defaults filled in.
func (s *Store) Config() Config { return s.cfg }

const ledgerDDL = `CREATE TABLE IF NOT EXISTS redisstock_ledger (
    shop_id            BIGINT UNSIGNED NOT NULL,
    inventory_item_id  BIGINT UNSIGNED NOT NULL,
    inventory_group_id BIGINT UNSIGNED NOT NULL,
    on_hand            BIGINT NOT NULL DEFAULT 0,
    claimed            BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id)
) ENGINE=InnoDB`

// claimsDDL: one receipt per reservation whose claim ran the ledger half,
// with how many times it ran (see SettleClaim).
const claimsDDL = `CREATE TABLE IF NOT EXISTS redisstock_claims (
    shop_id        BIGINT UNSIGNED NOT NULL,
    reservation_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    runs           INT NOT NULL,
    created_at     DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id, reservation_id),
    KEY redisstock_claims_created (created_at)
) ENGINE=InnoDB`

// Migrate creates the ledger and claim receipt tables when missing.
func (s *Store) Migrate(ctx context.Context) error {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Stock)
	for _, ddl := range []string{ledgerDDL, claimsDDL} {
		if _, err := s.db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("redisstock: create tables: %w", err)
		}
	}
	return nil
}

func (s *Store) shopKey(shop uint64, kind string) string {
	return s.cfg.KeyPrefix + ":{" + strconv.FormatUint(shop, 10) + "}:" + kind
}

func (s *Store) availKey(k reservation.ItemKey) string {
	return s.shopKey(k.ShopID, "avail:"+field(k.ItemID, k.GroupID))
}

func (s *Store) heldKey(k reservation.ItemKey) string {
	return s.shopKey(k.ShopID, "held:"+field(k.ItemID, k.GroupID))
}

func (s *Store) resKey(shop uint64, id string) string { return s.shopKey(shop, "res:"+id) }
func (s *Store) claimingKey(shop uint64) string       { return s.shopKey(shop, "claiming") }
func (s *Store) expiryKey() string                    { return s.cfg.KeyPrefix + ":expiry" }
func member(shop uint64, id string) string            { return strconv.FormatUint(shop, 10) + "/" + id }

func field(item, group uint64) string {
	return strconv.FormatUint(item, 10) + ":" + strconv.FormatUint(group, 10)
}

// Receive adds stock: the ledger first, then the Redis counter (two
// systems again: a failure between them leaves Redis short, which the
// caller sees as an error and can repair with SetAvailable).
func (s *Store) Receive(ctx context.Context, k reservation.ItemKey, quantity int64) error {
	if quantity <= 0 {
		return fmt.Errorf("redisstock: receive quantity %d must be positive", quantity)
	}
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Stock)
	if _, err := s.db.ExecContext(ctx, `INSERT INTO redisstock_ledger
		(shop_id, inventory_item_id, inventory_group_id, on_hand) VALUES (?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE on_hand = on_hand + ?`, k.ShopID, k.ItemID, k.GroupID, quantity, quantity); err != nil {
		return fmt.Errorf("redisstock: receive %+v in the ledger: %w", k, err)
	}
	if err := s.rdb.IncrBy(ctx, s.availKey(k), quantity).Err(); err != nil {
		return fmt.Errorf("redisstock: receive %+v in redis (the ledger has it): %w", k, unavailable(err))
	}
	return nil
}

// Available is the Redis counter of one item/group (0 when the key is
// missing, as after a restart that kept nothing).
func (s *Store) Available(ctx context.Context, k reservation.ItemKey) (int64, error) {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Stock)
	n, err := s.rdb.Get(ctx, s.availKey(k)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisstock: available %+v: %w", k, unavailable(err))
	}
	return n, nil
}

// Books is what each system says about one item/group.
type Books struct {
	Available int64 // Redis: units sellable
	Held      int64 // Redis: units held by live reservations
	OnHand    int64 // ledger: units stocked and not sold
	Claimed   int64 // ledger: units sold
}

// Books reads both systems (not atomically across them: read at rest).
func (s *Store) Books(ctx context.Context, k reservation.ItemKey) (Books, error) {
	var b Books
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Stock)
	vals, err := s.rdb.MGet(ctx, s.availKey(k), s.heldKey(k)).Result()
	if err != nil {
		return b, fmt.Errorf("redisstock: books %+v: %w", k, unavailable(err))
	}
	for i, p := range []*int64{&b.Available, &b.Held} {
		if str, ok := vals[i].(string); ok {
			*p, _ = strconv.ParseInt(str, 10, 64)
		}
	}
	err = s.db.QueryRowContext(ctx, `SELECT on_hand, claimed FROM redisstock_ledger
		WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`, k.ShopID, k.ItemID, k.GroupID).
		Scan(&b.OnHand, &b.Claimed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return b, fmt.Errorf("redisstock: books %+v: %w", k, err)
	}
	return b, nil
}

// SetAvailable overwrites the Redis counter of one item/group, the repair
// an operator runs after Redis lost or miscounted it.
func (s *Store) SetAvailable(ctx context.Context, k reservation.ItemKey, n int64) error {
	ctx = conntag.WithTag(ctx, s.cfg.Tags.Stock)
	if err := s.rdb.Set(ctx, s.availKey(k), n, 0).Err(); err != nil {
		return fmt.Errorf("redisstock: set available %+v: %w", k, unavailable(err))
	}
	return nil
}

// unavailable marks Redis errors other than a script's answer.
func unavailable(err error) error {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// hash is a reservation hash as HGETALL returns it.
type hash struct {
	state    string
	deadline time.Time
	lines    []reservation.ReservedLine
}

func parseHash(vals []any) (hash, error) {
	var h hash
	if len(vals)%2 != 0 {
		return h, fmt.Errorf("redisstock: malformed reservation hash (%d fields)", len(vals))
	}
	for i := 0; i < len(vals); i += 2 {
		k, _ := vals[i].(string)
		v, _ := vals[i+1].(string)
		switch k {
		case "_state":
			h.state = v
		case "_deadline":
			ms, _ := strconv.ParseInt(v, 10, 64)
			h.deadline = time.UnixMilli(ms)
		default:
			item, group, ok := strings.Cut(k, ":")
			it, err1 := strconv.ParseUint(item, 10, 64)
			gr, err2 := strconv.ParseUint(group, 10, 64)
			q, err3 := strconv.ParseInt(v, 10, 64)
			if !ok || err1 != nil || err2 != nil || err3 != nil {
				return h, fmt.Errorf("redisstock: malformed reservation field %q=%q", k, v)
			}
			h.lines = append(h.lines, reservation.ReservedLine{ItemID: it, GroupID: gr, Quantity: q})
		}
	}
	return h, nil
}

func (h hash) reservation(shop uint64, id string) *reservation.Reservation {
	st := reservation.State(h.state)
	if h.state == "claiming" {
		st = reservation.StateHeld
	}
	r := &reservation.Reservation{ShopID: shop, ID: id, State: st, ExpiresAt: h.deadline}
	if st == reservation.StateHeld {
		r.Lines = h.lines
	}
	return r
}
