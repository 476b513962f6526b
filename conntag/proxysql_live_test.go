package conntag

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"database/sql/driver"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/testenv"
)

// pinCase is a statement that makes ProxySQL keep a client session on its
// backend connection (disable multiplexing), or one it must not pin for.
type pinCase struct {
	name  string
	setup []string // untagged, before the statement
	stmt  string   // sent untagged, then tagged
	// check, when set, runs right after stmt on the same session and must
	// return want: the statement's effect is still visible, so the session
	// stayed on its backend.
	check, want string
}

var pinCases = []pinCase{
	{name: "user variable", stmt: "SET @holdtime_x = 1", check: "SELECT @holdtime_x", want: "1"},
	{name: "user variable in select", stmt: "SELECT @holdtime_y := 2", check: "SELECT @holdtime_y", want: "2"},
	{name: "set session tracked", stmt: "SET SESSION sql_mode = 'ANSI_QUOTES'", check: "SELECT @@SESSION.sql_mode", want: "ANSI_QUOTES"},
	{name: "set session untracked", stmt: "SET SESSION max_heap_table_size = 33554432", check: "SELECT @@SESSION.max_heap_table_size", want: "33554432"},
	{name: "get_lock", stmt: "SELECT GET_LOCK('holdtime_pin', 0)", check: "SELECT IS_USED_LOCK('holdtime_pin') = CONNECTION_ID()", want: "1"},
	{name: "temporary table", stmt: "CREATE TEMPORARY TABLE holdtime_tmp (a INT)", check: "SELECT COUNT(*) FROM holdtime_tmp", want: "0"},
	{name: "last_insert_id", setup: []string{"CREATE TABLE IF NOT EXISTS holdtime_ai (id INT AUTO_INCREMENT PRIMARY KEY)"},
		stmt: "INSERT INTO holdtime_ai VALUES ()", check: "SELECT LAST_INSERT_ID() > 0", want: "1"},
	{name: "select last_insert_id", stmt: "SELECT LAST_INSERT_ID()"},
	{name: "found_rows", setup: []string{"CREATE TABLE IF NOT EXISTS holdtime_fr (a INT)", "DELETE FROM holdtime_fr", "INSERT INTO holdtime_fr VALUES (1),(2),(3)"},
		stmt: "SELECT SQL_CALC_FOUND_ROWS a FROM holdtime_fr LIMIT 1", check: "SELECT FOUND_ROWS()", want: "3"},
	{name: "autocommit off", stmt: "SET autocommit = 0"},
	{name: "begin", stmt: "BEGIN"},
	{name: "plain select", stmt: "SELECT 1"},
}

// sessionState is what ProxySQL did with a session after a statement: whether
// it kept a backend connection bound to the idle session, and what the
// check statement returned.
type sessionState struct {
	held  bool
	check string
}

func TestProxySQLSeesTagsAsUntagged(t *testing.T) {
	testenv.RequireProxySQL(t)
	d := testenv.NewDatabase(t)
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep_comment=%v", !drop), func(t *testing.T) {
			ctx := context.Background()
			px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name, DigestsDropComments: drop})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			app, err := sql.Open("mysql", px.AppDSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { app.Close() })
			app.SetMaxIdleConns(0) // a closed sql.Conn ends its ProxySQL session
			admin, err := sql.Open("mysql", px.AdminDSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { admin.Close() })
			for _, c := range pinCases {
				t.Run(c.name, func(t *testing.T) {
					untagged := runPinCase(t, app, admin, c, c.stmt)
					tagged := runPinCase(t, app, admin, c, InjectTag(c.stmt, "checkout_completion"))
					leading := runPinCase(t, app, admin, c, "/* conn_tag:checkout_completion */ "+c.stmt)
					t.Logf("untagged %+v, tagged %+v, tag in front (old placement) %+v", untagged, tagged, leading)
					if tagged != untagged {
						t.Errorf("ProxySQL treats %q (%+v) differently from %q (%+v)", InjectTag(c.stmt, "checkout_completion"), tagged, c.stmt, untagged)
					}
				})
			}
		})
	}
}

// runPinCase runs c on a new ProxySQL session with stmt as the statement
// and returns what ProxySQL did with the session.
func runPinCase(t *testing.T, app, admin *sql.DB, c pinCase, stmt string) sessionState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// ProxySQL answers this exact text itself, with the session's id.
	var sid int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&sid); err != nil {
		t.Fatal(err)
	}
	for _, q := range c.setup {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := conn.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	var st sessionState
	var srv sql.NullString
	// The admin interface has no prepared statements; sid is an integer.
	err = admin.QueryRowContext(ctx, fmt.Sprintf("SELECT srv_host FROM stats_mysql_processlist WHERE SessionID = %d", sid)).Scan(&srv)
	if err != nil {
		t.Fatalf("session %d in stats_mysql_processlist: %v", sid, err)
	}
	st.held = srv.Valid && srv.String != ""
	if c.check != "" {
		var v sql.NullString
		if err := conn.QueryRowContext(ctx, c.check).Scan(&v); err != nil {
			t.Fatalf("%s: %v", c.check, err)
		}
		st.check = strings.TrimSpace(v.String)
		if !v.Valid {
			st.check = "NULL"
		}
	}
	// Leave nothing behind for the next session on this backend.
	for _, q := range []string{"ROLLBACK", "SET autocommit = 1", "SELECT RELEASE_LOCK('holdtime_pin')", "DROP TEMPORARY TABLE IF EXISTS holdtime_tmp"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return st
}

// TestProxySQLUserVariableUnderLoad is the live run of issue 13 item 8 made
// a test: sessions tagged through conntag set a user variable and read it
// back on the same connection through ProxySQL while other sessions run
// tagged statements on both ProxySQL threads. ProxySQL must pin every
// session to its backend after SET @x, so every read sees its own value.
func TestProxySQLUserVariableUnderLoad(t *testing.T) {
	testenv.RequireProxySQL(t)
	d := testenv.NewDatabase(t)
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep_comment=%v", !drop), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: d.Target, Schema: d.Name, DigestsDropComments: drop})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			connector, err := mysql.NewConnector(px.AppConfig())
			if err != nil {
				t.Fatal(err)
			}
			db := OpenDB(connector, WithoutMetrics())
			t.Cleanup(func() { db.Close() })
			const setters, others, rounds = 6, 4, 150
			var (
				wg             sync.WaitGroup
				stop           = make(chan struct{})
				checked, wrong atomic.Int64
				firstWrong     atomic.Value
				errMu          sync.Mutex
				firstErr       error
			)
			fail := func(err error) {
				errMu.Lock()
				defer errMu.Unlock()
				if firstErr == nil {
					firstErr = err
				}
			}
			for w := range others {
				wg.Add(1)
				go func() {
					defer wg.Done()
					octx := WithTag(ctx, fmt.Sprintf("other_%d", w))
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						var n int
						if err := db.QueryRowContext(octx, "SELECT ? + 1", i).Scan(&n); err != nil {
							fail(err)
							return
						}
					}
				}()
			}
			var setWG sync.WaitGroup
			for w := range setters {
				setWG.Add(1)
				go func() {
					defer setWG.Done()
					sctx := WithTag(ctx, fmt.Sprintf("user_variable_%d", w))
					for i := range rounds {
						conn, err := db.Conn(sctx)
						if err != nil {
							fail(err)
							return
						}
						want := int64(w*1_000_000 + i + 1)
						var got sql.NullInt64
						_, err = conn.ExecContext(sctx, fmt.Sprintf("SET @holdtime_v = %d", want))
						if err == nil {
							err = conn.QueryRowContext(sctx, "SELECT @holdtime_v").Scan(&got)
						}
						// A new session next round: close, do not pool.
						_ = conn.Raw(func(any) error { return driver.ErrBadConn })
						conn.Close()
						if err != nil {
							fail(err)
							return
						}
						checked.Add(1)
						if !got.Valid || got.Int64 != want {
							wrong.Add(1)
							firstWrong.CompareAndSwap(nil, fmt.Sprintf("SET @holdtime_v = %d then SELECT @holdtime_v gave %v", want, got))
						}
					}
				}()
			}
			setWG.Wait()
			close(stop)
			wg.Wait()
			if firstErr != nil {
				t.Fatal(firstErr)
			}
			t.Logf("%d SET/SELECT pairs through ProxySQL, %d read another session's value or NULL", checked.Load(), wrong.Load())
			if wrong.Load() > 0 {
				t.Errorf("%d of %d reads of a user variable missed it; first: %v", wrong.Load(), checked.Load(), firstWrong.Load())
			}
		})
	}
}
