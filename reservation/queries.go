package reservation

// The statements the engine runs. Parameter lists are built by repeating the
// fixed fragments below, never from caller input.

const (
	// One branch of the unit fetch, one per (line, location group). The
	// parentheses let each branch keep its own LIMIT and locking clause.
	fetchUnitsSkipLocked = `(SELECT ? AS part, id FROM inventory_reservation_units ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? ` +
		`ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED)`
	fetchUnitsForUpdate = `(SELECT ? AS part, id FROM inventory_reservation_units ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? ` +
		`ORDER BY id LIMIT ? FOR UPDATE)`
	fetchUnitsJoin = ` UNION ALL `

	// Units are deleted by their full primary key, through it (see
	// deleteUnits): (key AND id IN (…)) OR … per item/group.
	deleteUnitsPrefix = `DELETE u FROM inventory_reservation_units u FORCE INDEX (PRIMARY) WHERE `
	deleteUnitsKey    = `(u.shop_id = ? AND u.inventory_item_id = ? AND u.inventory_group_id = ? AND u.id IN (`
	deleteUnitsOr     = ` OR `

	// Inserts units for one item/group, one row of VALUES per unit, up to
	// insertUnitsMax rows (3,000 parameters) per statement.
	insertUnitsPrefix = `INSERT INTO inventory_reservation_units (shop_id, inventory_item_id, inventory_group_id) VALUES `
	insertUnitsRow    = `(?, ?, ?)`
	insertUnitsMax    = 1000

	takeCounter = `UPDATE inventory_pool_counters SET available = available - ? ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND available >= ?`
	addCounter = `INSERT INTO inventory_pool_counters (shop_id, inventory_item_id, inventory_group_id, available) ` +
		`VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE available = available + ?`
	removeCounter = `UPDATE inventory_pool_counters SET available = available - ? ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? AND available >= ?`

	insertReservation = `INSERT INTO inventory_reservations (shop_id, reservation_id, state, expires_at, reserve_token) ` +
		`VALUES (?, ?, 'held', NOW(6) + INTERVAL ? MICROSECOND, ?)`
	insertReservedPrefix = `INSERT INTO inventory_reserved_quantities ` +
		`(shop_id, reservation_id, inventory_item_id, inventory_group_id, quantity) VALUES `
	insertReservedRow = `(?, ?, ?, ?, ?)`

	selectReservation = `SELECT state, UNIX_TIMESTAMP(expires_at), reserve_token FROM inventory_reservations ` +
		`WHERE shop_id = ? AND reservation_id = ?`
	// lockReservation decides claim against expiry by the database clock.
	lockReservation = `SELECT state, expires_at <= NOW(6), end_token FROM inventory_reservations ` +
		`WHERE shop_id = ? AND reservation_id = ? FOR UPDATE`
	// lockReserveToken resolves a reserve whose COMMIT reply was lost: the
	// locking read waits for that transaction to end on the server.
	lockReserveToken = `SELECT reserve_token FROM inventory_reservations ` +
		`WHERE shop_id = ? AND reservation_id = ? FOR UPDATE`
	// lockEndTokensPrefix resolves an expiry batch whose COMMIT reply was
	// lost: the end tokens of its reservations, locked.
	lockEndTokensPrefix = `SELECT end_token FROM inventory_reservations WHERE (shop_id, reservation_id) IN (`
	lockEndTokensSuffix = `) FOR UPDATE`
	selectReserved      = `SELECT inventory_item_id, inventory_group_id, quantity FROM inventory_reserved_quantities ` +
		`WHERE shop_id = ? AND reservation_id = ? ORDER BY inventory_item_id, inventory_group_id`
	deleteReserved = `DELETE FROM inventory_reserved_quantities WHERE shop_id = ? AND reservation_id = ?`
	setState       = `UPDATE inventory_reservations SET state = ?, end_token = ? WHERE shop_id = ? AND reservation_id = ?`
	claimLedger    = `UPDATE inventory_ledger SET on_hand = on_hand - ?, claimed = claimed + ? ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`

	// selectDue finds holds past their expiry; SKIP LOCKED leaves the ones a
	// claim or release is deciding to that operation.
	selectDue = `SELECT shop_id, reservation_id FROM inventory_reservations ` +
		`WHERE state = 'held' AND expires_at <= NOW(6) ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`

	// selectPrunable finds ended reservations past Config.Retention through
	// the (state, expires_at) index; updated_at (when the hold ended) keeps
	// a hold that ended late, such as a release after its expiry time, for
	// the full retention too.
	selectPrunable = `SELECT shop_id, reservation_id FROM inventory_reservations ` +
		`WHERE state IN ('claimed', 'released', 'expired') AND expires_at < NOW(6) - INTERVAL ? MICROSECOND ` +
		`AND updated_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ? FOR UPDATE SKIP LOCKED`
	deleteReservationsPrefix = `DELETE FROM inventory_reservations WHERE (shop_id, reservation_id) IN (`
	deleteReservationsRow    = `(?, ?)`

	// Receipts: a refill or a pruning batch inserts its token in its own
	// transaction; a retry after a lost COMMIT reply looks for it with a
	// locking read, which waits for that transaction to end on the server.
	insertReceipt = `INSERT INTO inventory_receipts (token) VALUES (?)`
	lockReceipt   = `SELECT COUNT(*) FROM inventory_receipts WHERE token = ? FOR UPDATE`
	pruneReceipts = `DELETE FROM inventory_receipts WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?`

	// Stock changes: one row per Receive or Adjust, written with the ledger
	// change. adjustment_id is NULL when the caller gave none.
	insertAdjustment = `INSERT INTO inventory_adjustments ` +
		`(shop_id, token, adjustment_id, inventory_item_id, inventory_group_id, quantity) VALUES (?, ?, ?, ?, ?, ?)`
	selectAdjustmentByID = `SELECT token, inventory_item_id, inventory_group_id, quantity FROM inventory_adjustments ` +
		`WHERE shop_id = ? AND adjustment_id = ?`
	selectAdjustmentByToken = `SELECT token, inventory_item_id, inventory_group_id, quantity FROM inventory_adjustments ` +
		`WHERE shop_id = ? AND token = ?`
	pruneAdjustments = `DELETE FROM inventory_adjustments WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?`

	// The pool row of an item/group (inventory_pools) is the lock of every
	// transaction that adds units to its pool: refills, releases, expiries.
	// They count the pool after taking it, so that no two count the same
	// room. The counts are subqueries, which a locking read does not lock
	// (MySQL and MariaDB both lock the rows of a subquery only when it has a
	// locking clause of its own): reserves keep taking units meanwhile.
	insertPool = `INSERT INTO inventory_pools (shop_id, inventory_item_id, inventory_group_id) VALUES (?, ?, ?) ` +
		`ON DUPLICATE KEY UPDATE shop_id = shop_id`
	lockPoolUnits = `SELECT (SELECT COUNT(*) FROM inventory_reservation_units u ` +
		`WHERE u.shop_id = p.shop_id AND u.inventory_item_id = p.inventory_item_id AND u.inventory_group_id = p.inventory_group_id) ` +
		`FROM inventory_pools p WHERE p.shop_id = ? AND p.inventory_item_id = ? AND p.inventory_group_id = ? FOR UPDATE`
	lockPoolCounter = `SELECT COALESCE((SELECT c.available FROM inventory_pool_counters c ` +
		`WHERE c.shop_id = p.shop_id AND c.inventory_item_id = p.inventory_item_id AND c.inventory_group_id = p.inventory_group_id), 0) ` +
		`FROM inventory_pools p WHERE p.shop_id = ? AND p.inventory_item_id = ? AND p.inventory_group_id = ? FOR UPDATE`
	// The same with the held quantity, for refills: pool and holds from one
	// snapshot (see countUnits).
	lockPoolUnitsHeld = `SELECT (SELECT COUNT(*) FROM inventory_reservation_units u ` +
		`WHERE u.shop_id = p.shop_id AND u.inventory_item_id = p.inventory_item_id AND u.inventory_group_id = p.inventory_group_id), ` +
		`COALESCE((SELECT SUM(q.quantity) FROM inventory_reserved_quantities q ` +
		`WHERE q.shop_id = p.shop_id AND q.inventory_item_id = p.inventory_item_id AND q.inventory_group_id = p.inventory_group_id), 0) ` +
		`FROM inventory_pools p WHERE p.shop_id = ? AND p.inventory_item_id = ? AND p.inventory_group_id = ? FOR UPDATE`
	lockPoolCounterHeld = `SELECT COALESCE((SELECT c.available FROM inventory_pool_counters c ` +
		`WHERE c.shop_id = p.shop_id AND c.inventory_item_id = p.inventory_item_id AND c.inventory_group_id = p.inventory_group_id), 0), ` +
		`COALESCE((SELECT SUM(q.quantity) FROM inventory_reserved_quantities q ` +
		`WHERE q.shop_id = p.shop_id AND q.inventory_item_id = p.inventory_item_id AND q.inventory_group_id = p.inventory_group_id), 0) ` +
		`FROM inventory_pools p WHERE p.shop_id = ? AND p.inventory_item_id = ? AND p.inventory_group_id = ? FOR UPDATE`

	receiveLedger = `INSERT INTO inventory_ledger (shop_id, inventory_item_id, inventory_group_id, on_hand) ` +
		`VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE on_hand = on_hand + ?`
	adjustLedger = `UPDATE inventory_ledger SET on_hand = on_hand + ? ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?`
	// lockLedger is the per-item/group lock of refills and adjustments.
	lockLedger = `SELECT on_hand FROM inventory_ledger ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? FOR UPDATE`
	selectAvailable = `SELECT l.on_hand - COALESCE((SELECT SUM(q.quantity) FROM inventory_reserved_quantities q ` +
		`WHERE q.shop_id = l.shop_id AND q.inventory_item_id = l.inventory_item_id ` +
		`AND q.inventory_group_id = l.inventory_group_id), 0) FROM inventory_ledger l ` +
		`WHERE l.shop_id = ? AND l.inventory_item_id = ? AND l.inventory_group_id = ?`

	// Pool depth and held quantity in one statement, so that under READ
	// COMMITTED both come from one snapshot: a reserve or a release that
	// commits between two statements would otherwise be counted twice or
	// not at all.
	countUnits = `SELECT (SELECT COUNT(*) FROM inventory_reservation_units ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), ` +
		`COALESCE((SELECT SUM(quantity) FROM inventory_reserved_quantities ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), 0)`
	countCounter = `SELECT COALESCE((SELECT available FROM inventory_pool_counters ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), 0), ` +
		`COALESCE((SELECT SUM(quantity) FROM inventory_reserved_quantities ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ?), 0)`
	// removeUnits takes pooled units off sale for a negative adjustment.
	removeUnitsSelect = `SELECT id FROM inventory_reservation_units ` +
		`WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = ? ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`
)

// Claim and release groups (group.go). Each statement names one shop and
// lists the group's reservation ids or ledger rows: a range read of the
// primary key, never a scan.
const (
	lockReservationsPrefix = `SELECT reservation_id, state, expires_at <= NOW(6), end_token FROM inventory_reservations ` +
		`WHERE shop_id = ? AND reservation_id IN (`
	lockReservationsSuffix    = `) ORDER BY reservation_id FOR UPDATE`
	selectReservedGroupPrefix = `SELECT reservation_id, inventory_item_id, inventory_group_id, quantity ` +
		`FROM inventory_reserved_quantities WHERE shop_id = ? AND reservation_id IN (`
	selectReservedGroupSuffix = ` ORDER BY reservation_id, inventory_item_id, inventory_group_id`
	deleteReservedGroupPrefix = `DELETE FROM inventory_reserved_quantities WHERE shop_id = ? AND reservation_id IN (`
	// Every member's own token: CASE reservation_id WHEN ? THEN ? … END.
	setStateGroupPrefix = `UPDATE inventory_reservations SET state = ?, end_token = CASE reservation_id`
	setStateGroupWhen   = ` WHEN ? THEN ?`
	setStateGroupMiddle = ` END WHERE shop_id = ? AND reservation_id IN (`
	// One update of every ledger row of a claim group.
	claimLedgersOnHand  = `UPDATE inventory_ledger SET on_hand = on_hand - CASE`
	claimLedgersWhen    = ` WHEN inventory_item_id = ? AND inventory_group_id = ? THEN ?`
	claimLedgersClaimed = ` END, claimed = claimed + CASE`
	claimLedgersWhere   = ` END WHERE shop_id = ? AND (`
	claimLedgersRow     = `(inventory_item_id = ? AND inventory_group_id = ?)`
	claimLedgersOr      = ` OR `
)
