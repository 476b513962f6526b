package reservation

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/conntag"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

const (
	createMigrations = `CREATE TABLE IF NOT EXISTS holdtime_reservation_migrations (
    version    INT NOT NULL PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB`
	selectMigrations = `SELECT version FROM holdtime_reservation_migrations`
	insertMigration  = `INSERT INTO holdtime_reservation_migrations (version, name) VALUES (?, ?)`
	// GET_LOCK serialises concurrent Migrate calls (several app instances
	// starting at once); DDL cannot run inside a transaction.
	migrateLock       = `SELECT GET_LOCK('holdtime_reservation_migrate', ?)`
	migrateUnlock     = `DO RELEASE_LOCK('holdtime_reservation_migrate')`
	migrationFileGlob = "migrations/*.sql"
)

type migration struct {
	version    int
	name       string
	statements []string
}

// migrations returns the embedded migrations in version order. A file is
// named NNN_name.sql and holds statements ending in ';' at the end of a line.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, migrationFileGlob)
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, path := range names {
		name := strings.TrimPrefix(path, "migrations/")
		num, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("reservation: migration %s is not named NNN_name.sql", name)
		}
		body, err := migrationFiles.ReadFile(path)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: version, name: name, statements: splitStatements(string(body))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// splitStatements splits a migration file into statements, dropping "--"
// comment lines.
func splitStatements(body string) []string {
	var stmts []string
	var cur strings.Builder
	for line := range strings.Lines(body) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(trimmed, ";") {
			stmts = append(stmts, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		stmts = append(stmts, s)
	}
	return stmts
}

// Migrate creates or updates the engine's tables. It is idempotent and safe
// to call from several processes at once.
func (e *Engine) Migrate(ctx context.Context) error {
	ctx = conntag.WithTag(ctx, e.cfg.Tags.Stock)
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("reservation: migrate: get a connection: %w", err)
	}
	defer conn.Close()
	if err := takeMigrateLock(ctx, conn, e.cfg.MigrateLockWait); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), migrateUnlock)

	if _, err := conn.ExecContext(ctx, createMigrations); err != nil {
		return fmt.Errorf("reservation: migrate: create the migrations table (does the user have CREATE?): %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, selectMigrations)
	if err != nil {
		return fmt.Errorf("reservation: migrate: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("reservation: migrate: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("reservation: migrate: %w", err)
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		for _, stmt := range m.statements {
			if _, err := conn.ExecContext(ctx, stmt); err != nil && !alreadyApplied(err) {
				return fmt.Errorf("reservation: migrate: %s failed (fix the cause and run Migrate again; statements are idempotent): %w", m.name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, insertMigration, m.version, m.name); err != nil {
			return fmt.Errorf("reservation: migrate: record %s: %w", m.name, err)
		}
	}
	return nil
}

// takeMigrateLock takes the server-wide migration lock on conn, waiting at
// most wait. Each way it can fail has its own message: only GET_LOCK's 0
// (it waited the whole time) means another Migrate holds the lock; a failed
// query is the connection's or the server's cause (a missing database behind
// ProxySQL, a refused login, a lost connection), returned wrapped.
func takeMigrateLock(ctx context.Context, conn *sql.Conn, wait time.Duration) error {
	// GET_LOCK counts whole seconds: round up so the wait is never shorter
	// than configured.
	secs := int64((wait + time.Second - 1) / time.Second)
	var locked sql.NullInt64
	err := conn.QueryRowContext(ctx, migrateLock, secs).Scan(&locked)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("reservation: migrate: stopped waiting for the migration lock: %w", context.Cause(ctx))
	case err != nil:
		return fmt.Errorf("reservation: migrate: take the migration lock: %w", err)
	case !locked.Valid:
		// NULL: the server refused the lock request or killed it.
		return errors.New("reservation: migrate: take the migration lock: GET_LOCK returned NULL " +
			"(the request was killed or the server is out of memory): retry")
	case locked.Int64 != 1:
		return fmt.Errorf("%w: another Migrate held it for %v; retry once it has finished "+
			"(or raise Config.MigrateLockWait)", ErrMigrateLocked, time.Duration(secs)*time.Second)
	}
	return nil
}

// alreadyApplied reports whether a migration statement failed only because
// an earlier, interrupted Migrate had applied it: ALTER TABLE … ADD COLUMN
// or ADD KEY has no IF NOT EXISTS on MySQL 8, so a re-run meets duplicate
// column (1060) or key (1061) names.
func alreadyApplied(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1060 || me.Number == 1061)
}
