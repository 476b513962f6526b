package libtest

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// next returns "function file:line" of the line after its caller's, as
// the hold profile writes frames.
func next() string {
	pc, file, line, _ := runtime.Caller(1)
	return fmt.Sprintf("%s %s:%d", runtime.FuncForPC(pc).Name(), file, line+1)
}

// open is a conntag pool on a fresh database with every hold sampled.
func open(t *testing.T) (*sql.DB, *conntag.HoldProfile) {
	t.Helper()
	d := testenv.NewDatabase(t)
	connector, err := mysql.NewConnector(d.Config())
	if err != nil {
		t.Fatal(err)
	}
	hp := conntag.NewHoldProfile(1)
	db := conntag.OpenDB(connector, conntag.WithHoldProfile(hp), conntag.WithoutMetrics())
	t.Cleanup(func() { db.Close() })
	return db, hp
}

// checkHottest asserts that the tag's hottest frame is want, the user's
// line, with all of the tag's hold time.
func checkHottest(t *testing.T, hp *conntag.HoldProfile, tag, want string) {
	t.Helper()
	frame, share := conntag.HottestFrame(hp.Profile(), map[string]string{"conn_tag": tag})
	if frame != want {
		t.Errorf("%s: HottestFrame = %q, want the user's line %q", tag, frame, want)
	}
	if share != 1 {
		t.Errorf("%s: the user's line has %.0f%% of the tag's hold time, want all of it", tag, share*100)
	}
}

// sqlxTransfer is user code: a transaction through sqlx, held across a
// slow statement.
func sqlxTransfer(ctx context.Context, db *sqlx.DB) (string, error) {
	at := next()
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return at, err
	}
	var n int
	if err := tx.GetContext(ctx, &n, "SELECT SLEEP(0.02)"); err != nil {
		tx.Rollback()
		return at, err
	}
	return at, tx.Commit()
}

func sqlxLookup(ctx context.Context, db *sqlx.DB) (string, error) {
	var names []string
	at := next()
	err := db.SelectContext(ctx, &names, "SELECT 'a' UNION ALL SELECT 'b'")
	return at, err
}

func TestSqlxHottestFrameIsUsers(t *testing.T) {
	raw, hp := open(t)
	db := sqlx.NewDb(raw, "mysql")
	txCtx := conntag.WithTag(context.Background(), "sqlx_transfer")
	selCtx := conntag.WithTag(context.Background(), "sqlx_lookup")
	var txAt, selAt string
	for range 5 {
		var err error
		if txAt, err = sqlxTransfer(txCtx, db); err != nil {
			t.Fatal(err)
		}
		if selAt, err = sqlxLookup(selCtx, db); err != nil {
			t.Fatal(err)
		}
	}
	checkHottest(t, hp, "sqlx_transfer", txAt)
	checkHottest(t, hp, "sqlx_lookup", selAt)
}

type item struct {
	ID   int64 `gorm:"primaryKey"`
	Name string
}

// gormCheckout is user code: a gorm transaction.
func gormCheckout(ctx context.Context, db *gorm.DB) (string, error) {
	at := next()
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&item{Name: "x"}).Error; err != nil {
			return err
		}
		return tx.Exec("DO SLEEP(0.02)").Error
	})
	return at, err
}

func gormList(ctx context.Context, db *gorm.DB) (string, error) {
	var items []item
	at := next()
	err := db.WithContext(ctx).Limit(10).Find(&items).Error
	return at, err
}

func TestGormHottestFrameIsUsers(t *testing.T) {
	raw, hp := open(t)
	db, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: raw}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&item{}); err != nil {
		t.Fatal(err)
	}
	txCtx := conntag.WithTag(context.Background(), "gorm_checkout")
	listCtx := conntag.WithTag(context.Background(), "gorm_list")
	var txAt, listAt string
	for range 5 {
		if txAt, err = gormCheckout(txCtx, db); err != nil {
			t.Fatal(err)
		}
		if listAt, err = gormList(listCtx, db); err != nil {
			t.Fatal(err)
		}
	}
	checkHottest(t, hp, "gorm_checkout", txAt)
	checkHottest(t, hp, "gorm_list", listAt)
}
