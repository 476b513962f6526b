package locks_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/locks"
	"github.com/holdtime/holdtime/testenv"
)

// A transaction tagged checkout_completion holds a row; the Reader names
// the tag behind the lock.
func ExampleReader_Read() {
	target, err := testenv.SharedTarget() // in your code: your own server
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	d, err := target.CreateDatabase(ctx, "example")
	if err != nil {
		log.Fatal(err)
	}
	defer d.Drop(ctx)
	cfg := d.Config()
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		log.Fatal(err)
	}
	app := conntag.OpenDB(connector, conntag.WithoutMetrics())
	defer app.Close()
	if _, err := app.ExecContext(ctx, "CREATE TABLE orders (id INT PRIMARY KEY, state VARCHAR(16)) ENGINE=InnoDB"); err != nil {
		log.Fatal(err)
	}
	if _, err := app.ExecContext(ctx, "INSERT INTO orders VALUES (1, 'new')"); err != nil {
		log.Fatal(err)
	}
	tctx := conntag.WithTag(ctx, "checkout_completion")
	tx, err := app.BeginTx(tctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(tctx, "UPDATE orders SET state = 'paid' WHERE id = 1"); err != nil {
		log.Fatal(err)
	}

	// The monitoring side: a pool with PROCESS and SELECT on performance_schema.
	r, err := locks.New(target.Admin(), locks.Config{ParseTag: conntag.ParseTag})
	if err != nil {
		log.Fatal(err)
	}
	enabled, err := r.LockOutputEnabled(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if !enabled { // MariaDB lists locks by kind only with it; set it because this example asks for it
		if err := r.SetLockOutput(ctx, true); err != nil {
			log.Fatal(err)
		}
		defer r.SetLockOutput(ctx, false)
	}
	for range 100 { // the server refreshes INNODB_TRX 100 ms after its last read
		snap, err := r.Read(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, t := range snap.Transactions {
			if t.Tag != "checkout_completion" {
				continue
			}
			fmt.Println(t.Tag, t.Isolation, t.Statement)
			for _, l := range t.Locks {
				fmt.Println(" ", strings.TrimPrefix(l.Table, d.Name+"."), l.Index, l.Kind, l.Mode, l.Rows)
			}
			return
		}
		time.Sleep(150 * time.Millisecond)
	}
	// Output:
	// checkout_completion READ COMMITTED UPDATE orders SET state = ? WHERE id = ?
	//   orders  table_intention IX 1
	//   orders PRIMARY record X 1
}
