package conntag

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// queryer is the part of *sql.DB a library sees (sqlx, sqlc output and
// query builders take it), to show a handed-over pool still tags.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func libraryCount(ctx context.Context, q queryer) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM items WHERE id > ?", 0).Scan(&n)
	return n, err
}

func TestServerReceivesTaggedText(t *testing.T) {
	f := newFixture(t)
	f.logStatements(t)
	ctx := context.Background()
	mustExec := func(ctx context.Context, q string, args ...any) {
		t.Helper()
		if _, err := f.db.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(WithTag(ctx, "setup"), "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))")
	mustExec(WithTag(ctx, "exec_tag"), "INSERT INTO items VALUES (1, 'a')")
	mustExec(WithTag(ctx, "exec_args"), "INSERT INTO items VALUES (?, ?)", 2, "b")

	var name string
	if err := f.db.QueryRowContext(WithTag(ctx, "query_tag"), "SELECT name FROM items WHERE id = 1").Scan(&name); err != nil {
		t.Fatal(err)
	}
	st, err := f.db.PrepareContext(WithTag(ctx, "prepared_tag"), "SELECT name FROM items WHERE id = ?")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.QueryRowContext(WithTag(ctx, "executor_tag"), 2).Scan(&name); err != nil {
		t.Fatal(err)
	}
	st.Close()

	tx, err := f.db.BeginTx(WithTag(ctx, "tx_tag"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(WithTag(ctx, "tx_tag"), "UPDATE items SET name = 'c' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	c, err := f.db.Conn(WithTag(ctx, "conn_tag_borrow"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecContext(WithTag(ctx, "dbconn_tag"), "DELETE FROM items WHERE id = 99"); err != nil {
		t.Fatal(err)
	}
	c.Close()

	if n, err := libraryCount(WithTag(ctx, "library_tag"), f.db); err != nil || n != 2 {
		t.Fatalf("library query: n=%d err=%v", n, err)
	}
	mustExec(ctx, "UPDATE items SET name = 'd' WHERE id = 2")

	seen := strings.Join(f.statementsSeen(t), "\n")
	for _, want := range []string{
		"CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20)) /* conn_tag:setup */",
		"INSERT INTO items VALUES (1, 'a') /* conn_tag:exec_tag */",
		"INSERT INTO items VALUES (?, ?) /* conn_tag:exec_args */",
		"SELECT name FROM items WHERE id = 1 /* conn_tag:query_tag */",
		"SELECT name FROM items WHERE id = ? /* conn_tag:prepared_tag */",
		"UPDATE items SET name = 'c' WHERE id = 1 /* conn_tag:tx_tag */",
		"DELETE FROM items WHERE id = 99 /* conn_tag:dbconn_tag */",
		"SELECT COUNT(*) FROM items WHERE id > ? /* conn_tag:library_tag */",
		"UPDATE items SET name = 'd' WHERE id = 2 /* conn_tag:untagged */",
	} {
		if !strings.Contains(seen, want) {
			t.Errorf("server did not see %q; it saw:\n%s", want, seen)
		}
	}
	if strings.Contains(seen, "executor_tag") {
		t.Errorf("a prepared statement's text changed with the executing context's tag:\n%s", seen)
	}

	m := f.metrics(t)
	ops := m["holdtime.client.operations"]
	for _, tag := range []string{"exec_tag", "exec_args", "query_tag", "executor_tag", "tx_tag", "dbconn_tag", "library_tag", "untagged"} {
		if ops[tag].sum == 0 {
			t.Errorf("no operation recorded for tag %s: %v", tag, ops)
		}
	}
	// An Exec with arguments that the driver declines (driver.ErrSkip) and
	// database/sql redoes as prepare+exec counts once.
	if got := ops["exec_args"].sum; got != 1 {
		t.Errorf("exec_args operations = %v, want 1", got)
	}
	if ops["prepared_tag"].sum != 0 {
		t.Errorf("the preparer's tag got the execution: %v", ops)
	}
	// tx_tag: BEGIN, UPDATE, COMMIT.
	if got := ops["tx_tag"].sum; got != 3 {
		t.Errorf("tx_tag operations = %v, want 3 (begin, update, commit)", got)
	}
	holds := m["holdtime.connection.holds"]
	if holds["conn_tag_borrow"].sum != 1 {
		t.Errorf("the db.Conn hold is not attributed to its borrower: %v", holds)
	}
	if holds["dbconn_tag"].sum != 0 {
		t.Errorf("a statement's tag took the hold of another borrower: %v", holds)
	}
}

func TestFormatsReachServer(t *testing.T) {
	f := newFixture(t, WithFormat(FormatSQLCommenter), WithStaticAttributes(map[string]string{"service": "shop"}))
	f.logStatements(t)
	ctx := WithTag(context.Background(), "sc")
	if _, err := f.db.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	seen := strings.Join(f.statementsSeen(t), "\n")
	if !strings.Contains(seen, "SELECT 1 /*conn_tag='sc',service='shop'*/") {
		t.Errorf("sqlcommenter text not seen:\n%s", seen)
	}
}
