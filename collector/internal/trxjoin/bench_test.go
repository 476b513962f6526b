package trxjoin

import (
	"context"
	"testing"
)

// BenchmarkReadServer is the cost of one read against a MariaDB whose
// statement history holds the backends' statements, next to the cheapest
// round trip on the same connection.
func BenchmarkReadServer(b *testing.B) {
	db := openDB(b, fullServer(b))
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var ids []int64
	for range 4 {
		c, err := db.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		var id int64
		if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			b.Fatal(err)
		}
		for range 20 {
			if _, err := c.ExecContext(ctx, "SELECT 1 /* conn_tag:bench */"); err != nil {
				b.Fatal(err)
			}
		}
		ids = append(ids, id)
	}
	b.Run("baseline=SELECT 1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var n int
			if err := conn.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ReadServer 4 backends", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ReadServer(ctx, conn, ids); err != nil {
				b.Fatal(err)
			}
		}
	})
}
