package reservation

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/holdtime/holdtime/testenv"
)

// TestMigrateMissingDatabaseNamesIt: a DSN naming a database that does not
// exist fails Migrate with the server's own cause, not the lock's, whether
// the login fails (MySQL) or the first statement does (ProxySQL accepts any
// schema at login). Through ProxySQL this said "another Migrate held the
// lock for 60 s".
func TestMigrateMissingDatabaseNamesIt(t *testing.T) {
	d := testenv.NewDatabase(t)
	direct := d.Config()
	direct.DBName = "ht_no_such_db_migrate"
	cfgs := map[string]*mysql.Config{"mysql": direct}
	if d.Target.Server() != nil { // ProxySQL's app user is made on a server of our own
		testenv.RequireProxySQL(t)
		p, err := testenv.StartProxySQL(t.Context(), testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		app := p.AppConfig()
		app.DBName = "ht_no_such_db_migrate"
		cfgs["proxysql"] = app
	}
	for name, mc := range cfgs {
		t.Run(name, func(t *testing.T) {
			connector, err := mysql.NewConnector(mc)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(connector)
			t.Cleanup(func() { db.Close() })
			e, err := New(db, Config{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err = e.Migrate(ctx)
			if err == nil {
				t.Fatal("Migrate on a missing database succeeded")
			}
			msg := err.Error()
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1049 || !strings.Contains(msg, "Unknown database") ||
				strings.Contains(msg, "another Migrate") || errors.Is(err, ErrMigrateLocked) {
				t.Errorf("Migrate: %v\nwant the driver's 1049 Unknown database wrapped, nothing about the lock", err)
			}
			if mc.Passwd != "" && strings.Contains(msg, mc.Passwd) {
				t.Errorf("the message shows the password: %v", err)
			}
			t.Logf("%s: %v", name, err)
		})
	}
}

// TestMigrateWaitsForAnotherMigrate: while another Migrate holds the
// migration lock (a connection holding it, as a Migrate in progress does),
// Migrate waits MigrateLockWait and then says so with ErrMigrateLocked; a
// context that ends first says that instead; once the lock is free Migrate
// runs.
func TestMigrateWaitsForAnotherMigrate(t *testing.T) {
	_, db := setup(t, Config{})
	holder, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var got int64
	if err := holder.QueryRowContext(t.Context(), "SELECT GET_LOCK('holdtime_reservation_migrate', 10)").Scan(&got); err != nil || got != 1 {
		t.Fatalf("take the lock as a running Migrate does: %d, %v", got, err)
	}
	e, err := New(db, Config{MigrateLockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	err = e.Migrate(t.Context())
	waited := time.Since(start)
	if !errors.Is(err, ErrMigrateLocked) || !strings.Contains(err.Error(), "another Migrate held it for 1s") ||
		waited < 900*time.Millisecond || waited > 10*time.Second {
		t.Errorf("Migrate while the lock is held: %v after %v; want ErrMigrateLocked after about 1 s", err, waited)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err = e.Migrate(ctx)
	if errors.Is(err, ErrMigrateLocked) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "stopped waiting for the migration lock") {
		t.Errorf("Migrate whose context ends while it waits: %v; want the context's deadline, not ErrMigrateLocked", err)
	}

	if _, err := holder.ExecContext(t.Context(), migrateUnlock); err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(t.Context()); err != nil {
		t.Errorf("Migrate once the lock is free: %v", err)
	}
}
