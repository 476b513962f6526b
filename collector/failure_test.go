package collector

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/testenv"
)

// TestFailureOf connects the way a source does to every kind of wrong
// address and credentials and checks the failure is classified by what
// happened, which is what lets `holdtime top` fail fast with the right
// advice.
func TestFailureOf(t *testing.T) {
	target := testenv.Shared(t)
	good := target.Config("")
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	with := func(f func(c *mysql.Config)) *mysql.Config {
		c := good.Clone()
		f(c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  *mysql.Config
		want Failure
	}{
		{"refused", with(func(c *mysql.Config) { c.Addr = deadAddr }), FailureRefused},
		{"unknown host", with(func(c *mysql.Config) { c.Addr = "no-such-host.invalid:3306" }), FailureUnknownHost},
		{"no socket", with(func(c *mysql.Config) { c.Net, c.Addr = "unix", filepath.Join(t.TempDir(), "mysqld.sock") }), FailureNoSocket},
		{"never answers", with(func(c *mysql.Config) { c.Addr = fakePeer(t, "slow") }), FailureTimeout},
		{"speaks HTTP and hangs up", with(func(c *mysql.Config) { c.Addr = fakePeer(t, "garbage") }), FailureClosed},
		{"wrong password", with(func(c *mysql.Config) { c.Passwd = "not-the-password" }), FailureAccessDenied},
		{"unknown database", with(func(c *mysql.Config) { c.DBName = "no_such_db_holdtime" }), FailureUnknownDB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mc, err := parseDSN(tc.cfg.FormatDSN(), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			db, err := openDB(mc, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			err = mc.Logger.(*causeLogger).explain(db.PingContext(ctx), start)
			if got := FailureOf(err); got != tc.want {
				t.Errorf("%v: classified %q, want %q", err, got, tc.want)
			}
			if tc.want.Permanent() == (tc.want == FailureTimeout || tc.want == FailureClosed) {
				t.Errorf("%s: Permanent() = %v", tc.want, tc.want.Permanent())
			}
		})
	}
}
