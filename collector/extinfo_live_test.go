package collector

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/holdtime/holdtime/testenv"
)

// TestProcesslistQueryExtInfoLive runs queryProcesslist on a real ProxySQL
// with idle sessions and sessions in a transaction: it answers in one
// query, with extended_info for the sessions holding a backend and NULL
// for the idle ones; it logs the bytes of extended_info against the
// former query (extended_info for every session).
func TestProcesslistQueryExtInfoLive(t *testing.T) {
	testenv.RequireProxySQL(t)
	d := testenv.NewDatabase(t)
	ctx := context.Background()
	px, err := testenv.StartProxySQL(ctx, testenv.ProxySQLOptions{Backend: testenv.Shared(t), Schema: d.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	app, err := sql.Open("mysql", px.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	const idle, holding = 40, 3
	for i := range idle + holding {
		c, err := app.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i < holding {
			if _, err := c.ExecContext(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := sql.Open("mysql", px.StatsDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	former := strings.Replace(queryProcesslist,
		"CASE WHEN srv_host IS NOT NULL OR command = 'Connect' THEN extended_info END AS extended_info", "extended_info", 1)
	if former == queryProcesslist {
		t.Fatal("the query no longer selects extended_info with CASE: update this test")
	}
	read := func(q string) (rows, held, withExt, extBytes int, took time.Duration) {
		start := time.Now()
		rs, err := stats.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rs.Close()
		for rs.Next() {
			var r ProcesslistRow
			var timeMS sql.NullInt64
			if err := rs.Scan(&r.ThreadID, &r.SessionID, &r.User, &r.DB, &r.CliHost, &r.CliPort, &r.Hostgroup,
				&r.LSrvHost, &r.LSrvPort, &r.SrvHost, &r.SrvPort, &r.Command, &timeMS, &r.Info, &r.StatusFlags,
				&r.ExtendedInfo); err != nil {
				t.Fatal(err)
			}
			rows++
			if r.SrvHost.Valid {
				held++
			}
			if r.ExtendedInfo.Valid {
				withExt++
				extBytes += len(r.ExtendedInfo.String)
				if q == queryProcesslist && !r.SrvHost.Valid && r.Command.String != "Connect" {
					t.Errorf("session %d: idle (command %s), yet extended_info is selected", r.SessionID, r.Command.String)
				}
			} else if r.SrvHost.Valid || q != queryProcesslist {
				t.Errorf("session %d holds a backend or the query is the former one, yet no extended_info", r.SessionID)
			}
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		return rows, held, withExt, extBytes, time.Since(start)
	}
	rows, held, withExt, newBytes, newTook := read(queryProcesslist)
	fRows, _, fExt, oldBytes, oldTook := read(former)
	if rows < idle+holding || held < holding || withExt != held {
		t.Fatalf("%d rows, %d holding a backend, %d with extended_info; want >= %d, >= %d, as many as holding",
			rows, held, withExt, idle+holding, holding)
	}
	if fRows != rows || fExt != rows || newBytes*2 > oldBytes {
		t.Fatalf("former query: %d rows, %d with extended_info, %d bytes of it; now %d bytes", fRows, fExt, oldBytes, newBytes)
	}
	t.Logf("%d sessions, %d holding: extended_info %d bytes (%d rows), formerly %d bytes (%d rows); read in %v, formerly %v",
		rows, held, newBytes, withExt, oldBytes, fExt, newTook, oldTook)
}
