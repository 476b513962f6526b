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

	deleteUnitsPrefix = `DELETE FROM inventory_reservation_units WHERE id IN (`

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

	insertReservation = `INSERT INTO inventory_reservations (shop_id, reservation_id, state, expires_at) ` +
		`VALUES (?, ?, 'held', NOW(6) + INTERVAL ? MICROSECOND)`
	insertReservedPrefix = `INSERT INTO inventory_reserved_quantities ` +
		`(shop_id, reservation_id, inventory_item_id, inventory_group_id, quantity) VALUES `
	insertReservedRow = `(?, ?, ?, ?, ?)`

	selectReservation = `SELECT state, UNIX_TIMESTAMP(expires_at) FROM inventory_reservations WHERE shop_id = ? AND reservation_id = ?`
	// lockReservation decides claim against expiry by the database clock.
	lockReservation = `SELECT state, expires_at <= NOW(6) FROM inventory_reservations ` +
		`WHERE shop_id = ? AND reservation_id = ? FOR UPDATE`
	selectReserved = `SELECT inventory_item_id, inventory_group_id, quantity FROM inventory_reserved_quantities ` +
		`WHERE shop_id = ? AND reservation_id = ? ORDER BY inventory_item_id, inventory_group_id`
	deleteReserved = `DELETE FROM inventory_reserved_quantities WHERE shop_id = ? AND reservation_id = ?`
	setState       = `UPDATE inventory_reservations SET state = ? WHERE shop_id = ? AND reservation_id = ?`
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
