-- Writes that survive a lost COMMIT reply exactly once, and a pool bound
-- that holds. Runs on MySQL >= 8.0 and MariaDB >= 10.6; the ALTER adds
-- columns at the end (instant on both) and Migrate treats "duplicate
-- column" on a re-run as done.

-- Every write marks a row it writes with a random token of the operation.
-- When the reply to its COMMIT is lost, a retry locks that row (which waits
-- for the first attempt to end on the server) and reads the token: its own
-- means the first attempt committed. reserve_token is the Reserve that
-- created the reservation; end_token the Claim, Release or expiry that
-- ended its hold (0 while held, and for rows older than this migration).
ALTER TABLE inventory_reservations
    ADD COLUMN reserve_token BIGINT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN end_token BIGINT UNSIGNED NOT NULL DEFAULT 0;

-- Stock changes (Receive, Adjust): one row per change, written in the
-- transaction that changes the ledger. adjustment_id is the caller's
-- idempotency key (StockParams.AdjustmentID), NULL when none was given;
-- token is the engine's, which resolves a lost reply without one. Rows
-- older than Config.Retention are deleted with ended reservations.
CREATE TABLE IF NOT EXISTS inventory_adjustments (
    shop_id            BIGINT UNSIGNED NOT NULL,
    token              BIGINT UNSIGNED NOT NULL,
    adjustment_id      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    inventory_item_id  BIGINT UNSIGNED NOT NULL,
    inventory_group_id BIGINT UNSIGNED NOT NULL,
    quantity           BIGINT NOT NULL,
    created_at         DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (shop_id, token),
    UNIQUE KEY inventory_adjustments_id (shop_id, adjustment_id),
    KEY inventory_adjustments_created (created_at)
) ENGINE=InnoDB;

-- Receipts of refills and pruning batches, which write no row of their own
-- that outlives them: the token of each such transaction. Deleted after
-- Config.Retention.
CREATE TABLE IF NOT EXISTS inventory_receipts (
    token      BIGINT UNSIGNED NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (token),
    KEY inventory_receipts_created (created_at)
) ENGINE=InnoDB;

-- One row per item/group pool: the lock that refills, releases and expiries
-- take before they count the pool and add units to it, so that the pool
-- never exceeds Config.PoolSize. Created by the first of them.
CREATE TABLE IF NOT EXISTS inventory_pools (
    shop_id            BIGINT UNSIGNED NOT NULL,
    inventory_item_id  BIGINT UNSIGNED NOT NULL,
    inventory_group_id BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id)
) ENGINE=InnoDB;
