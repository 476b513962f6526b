package locks_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/holdtime/holdtime/locks"
)

// BenchmarkParseStatus parses a status text the server cut at 1 MiB (the
// largest it returns) and a small one, against counting its lines (the
// least any parser does).
func BenchmarkParseStatus(b *testing.B) {
	big := readTestdata(b, "mariadb-truncated.txt.gz")
	small := readTestdata(b, "mariadb-deadlock.txt")
	b.Run("baseline_count_lines_1MiB", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(big)))
		for b.Loop() {
			_ = strings.Count(big, "\n")
		}
	})
	b.Run("parse_1MiB", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(big)))
		for b.Loop() {
			_ = locks.ParseStatus(big)
		}
	})
	b.Run("parse_deadlock_6KiB", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(small)))
		for b.Loop() {
			_ = locks.ParseStatus(small)
		}
	})
}

// BenchmarkRead measures one Read against a real server, idle and with 20
// open transactions holding locks, against one SELECT 1 round trip on the
// same pool: what a collector's poll costs, in round trips.
func BenchmarkRead(b *testing.B) {
	e := setup(b)
	ctx := context.Background()
	db := e.d.Target.Admin()
	b.Run("baseline_select_1", func(b *testing.B) {
		for b.Loop() {
			var n int
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
				b.Fatal(err)
			}
		}
	})
	read := func(b *testing.B) {
		for b.Loop() {
			if _, err := e.reader.Read(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	saturation := func(b *testing.B) {
		for b.Loop() {
			if _, err := e.reader.ReadSaturation(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("read_saturation", saturation)
	b.Run("read_idle", read)
	e.exec("CREATE TABLE bench (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
	var values []string
	for i := range 60 {
		values = append(values, fmt.Sprintf("(%d, 0)", i))
	}
	e.exec("INSERT INTO bench VALUES " + strings.Join(values, ", "))
	for i := range 20 {
		x := e.begin(fmt.Sprint("bench_", i%4), sql.LevelReadCommitted)
		if n := x.rows("SELECT id FROM bench WHERE id BETWEEN ? AND ? FOR UPDATE", 3*i, 3*i+2); n != 3 {
			b.Fatalf("%d rows", n)
		}
	}
	waitFor(b, "the transactions", func() bool { s := e.read(); return len(s.Transactions) >= 20 })
	b.Run("read_20_transactions", read)
}
