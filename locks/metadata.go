package locks

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// MetadataWait is a session waiting for a metadata lock (a table's
// definition: DDL behind an open transaction, or statements behind a
// waiting DDL) that another session holds, from
// performance_schema.metadata_locks. Both sides are tagged like
// transactions are.
type MetadataWait struct {
	// Object is what is locked: "TABLE shop.units", "SCHEMA shop", ...
	Object string `json:"object"`
	// WaitingType and BlockingType are the lock types (EXCLUSIVE,
	// SHARED_READ, SHARED_UPGRADABLE, ...); BlockingDuration TRANSACTION
	// (held until the holder's transaction ends), STATEMENT or EXPLICIT.
	WaitingType      string  `json:"waiting_type"`
	BlockingType     string  `json:"blocking_type"`
	BlockingDuration string  `json:"blocking_duration"`
	Waiting          TrxRef  `json:"waiting"`
	Blocking         TrxRef  `json:"blocking"`
	WaitSeconds      float64 `json:"wait_seconds"` // whole seconds (the session's statement time)
}

// readMetadataWaits reads metadata-lock waits where the server records
// them, and tags both sides from their statements.
func (r *Reader) readMetadataWaits(ctx context.Context, conn *sql.Conn, s *Snapshot) error {
	var enabled string
	if err := conn.QueryRowContext(ctx, queryMDLInstrument).Scan(&enabled); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.Notes = append(s.Notes, "metadata-lock waits not read: performance_schema unreadable ("+oneLine(err)+")")
		return nil
	}
	if enabled != "YES" {
		s.Notes = append(s.Notes, "metadata-lock waits not visible: the performance_schema instrument "+
			"wait/lock/metadata/sql/mdl is off (MariaDB's default); turn it on with `"+EnableMDLInstrument+"`")
		return nil
	}
	rows, err := conn.QueryContext(ctx, queryMDLWaits)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.Notes = append(s.Notes, "metadata-lock waits unreadable ("+oneLine(err)+")")
		return nil
	}
	defer rows.Close()
	var running [][2]string // per wait: the waiting and blocking sessions' running statements
	for rows.Next() {
		var m MetadataWait
		var typ, schema, name, gcmd string
		var winfo, ginfo sql.NullString
		var gtime int64
		var wtime float64
		if err := rows.Scan(&m.Waiting.ThreadID, &m.Blocking.ThreadID, &typ, &schema, &name, &m.WaitingType,
			&m.BlockingType, &m.BlockingDuration, &winfo, &ginfo, &wtime, &gcmd, &gtime,
			&m.Waiting.User, &m.Waiting.Host, &m.Blocking.User, &m.Blocking.Host); err != nil {
			return fmt.Errorf("locks: read performance_schema.metadata_locks: %w", err)
		}
		m.Object = strings.TrimSpace(typ + " " + strings.Trim(schema+"."+name, "."))
		m.WaitSeconds = wtime
		m.Blocking.Idle = !ginfo.Valid
		if gcmd == "Sleep" {
			m.Blocking.IdleSeconds = float64(gtime)
		}
		s.MetadataWaits = append(s.MetadataWaits, m)
		running = append(running, [2]string{winfo.String, ginfo.String})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("locks: read performance_schema.metadata_locks: %w", err)
	}
	rows.Close()
	if len(running) == 0 {
		return nil
	}
	var ids []string
	for _, m := range s.MetadataWaits {
		ids = append(ids, strconv.FormatInt(m.Waiting.ThreadID, 10), strconv.FormatInt(m.Blocking.ThreadID, 10))
	}
	history, _ := r.readHistory(ctx, conn, ids) // unreadable: tags from the running statements only
	for i := range s.MetadataWaits {
		for j, ref := range []*TrxRef{&s.MetadataWaits[i].Waiting, &s.MetadataWaits[i].Blocking} {
			ref.Tag, ref.Tags, ref.Statement = tagOf(r.cfg.ParseTag, running[i][j], history[ref.ThreadID])
		}
	}
	return nil
}

// EnableMDLInstrument turns on what MariaDB needs to show metadata-lock
// waits (for a person to run; it lasts until the server restarts:
// performance-schema-instrument='wait/lock/metadata/sql/mdl=ON' in the
// server's configuration keeps it).
const EnableMDLInstrument = "UPDATE performance_schema.setup_instruments SET ENABLED = 'YES', TIMED = 'YES' " +
	"WHERE NAME = 'wait/lock/metadata/sql/mdl'"
