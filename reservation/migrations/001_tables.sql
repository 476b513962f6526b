-- The reservation engine's tables. Every statement is idempotent (IF NOT
-- EXISTS) and runs on MySQL >= 8.0 and MariaDB >= 10.6.

-- The ledger: the source of truth per (shop, item, location group).
-- on_hand counts units stocked and not yet sold; claimed counts units sold.
-- Units neither pooled nor held are "ledger-only": on_hand - pooled - held.
CREATE TABLE IF NOT EXISTS inventory_ledger (
    shop_id            BIGINT UNSIGNED NOT NULL,
    inventory_item_id  BIGINT UNSIGNED NOT NULL,
    inventory_group_id BIGINT UNSIGNED NOT NULL,
    on_hand            BIGINT NOT NULL DEFAULT 0,
    claimed            BIGINT NOT NULL DEFAULT 0,
    updated_at         DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id)
) ENGINE=InnoDB;

-- The bounded pool: one row per available unit. The primary key leads with
-- the item so that a locking read of N units takes N record locks.
CREATE TABLE IF NOT EXISTS inventory_reservation_units (
    shop_id            BIGINT UNSIGNED NOT NULL,
    inventory_item_id  BIGINT UNSIGNED NOT NULL,
    inventory_group_id BIGINT UNSIGNED NOT NULL,
    id                 BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id, id),
    KEY inventory_reservation_units_id (id)
) ENGINE=InnoDB;

-- The pool of the counter baseline strategy: one row per item/group.
CREATE TABLE IF NOT EXISTS inventory_pool_counters (
    shop_id            BIGINT UNSIGNED NOT NULL,
    inventory_item_id  BIGINT UNSIGNED NOT NULL,
    inventory_group_id BIGINT UNSIGNED NOT NULL,
    available          BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id)
) ENGINE=InnoDB;

-- Reservations: one row per idempotency key, the row a claim, a release and
-- the expiry sweeper lock. Rows stay after the hold ends so that retries are
-- answered with the same outcome.
CREATE TABLE IF NOT EXISTS inventory_reservations (
    shop_id        BIGINT UNSIGNED NOT NULL,
    reservation_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state          VARCHAR(8) CHARACTER SET ascii NOT NULL,
    expires_at     DATETIME(6) NOT NULL,
    created_at     DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at     DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id, reservation_id),
    KEY inventory_reservations_expiry (state, expires_at)
) ENGINE=InnoDB;

-- Reserved quantities: the holds. A row exists exactly while its units are
-- held; claim, release and expiry delete it.
CREATE TABLE IF NOT EXISTS inventory_reserved_quantities (
    shop_id            BIGINT UNSIGNED NOT NULL,
    reservation_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    inventory_item_id  BIGINT UNSIGNED NOT NULL,
    inventory_group_id BIGINT UNSIGNED NOT NULL,
    quantity           BIGINT NOT NULL,
    PRIMARY KEY (shop_id, reservation_id, inventory_item_id, inventory_group_id),
    KEY inventory_reserved_quantities_item (shop_id, inventory_item_id, inventory_group_id, quantity)
) ENGINE=InnoDB;
