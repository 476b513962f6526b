package collector

import (
	"strings"
	"testing"
	"time"
)

// TestSpanRouterNeverGuessesAnInstance: a span reaches the target it
// names and no other; a span naming no address reaches the collector's only
// target, and with two targets none, counted; an address nobody listens at
// is counted.
func TestSpanRouterNeverGuessesAnInstance(t *testing.T) {
	px1 := ProxySQLConfig{Name: "px1", DSN: "admin:admin@tcp(10.0.0.1:6032)/", ClientAddress: "10.0.0.1:6033"}
	px2 := ProxySQLConfig{Name: "px2", DSN: "admin:admin@tcp(10.0.0.2:6032)/", ClientAddress: "PX2.example:6033"}
	db := MySQLConfig{Name: "db", DSN: "monitor:pw@tcp(10.0.0.9)/"}
	type span struct {
		host string
		port int64
	}
	for _, tc := range []struct {
		name              string
		cfg               Config
		spans             []span
		want              map[string]int // target -> hints received
		noAddr, unknownAt int64
	}{
		{"each instance its own", Config{ProxySQL: []ProxySQLConfig{px1, px2}, MySQL: []MySQLConfig{db}},
			[]span{{"10.0.0.1", 6033}, {"px2.example", 6033}, {"10.0.0.9", 0}, {"10.0.0.9", 3306}},
			map[string]int{"px1": 1, "px2": 1, "db": 2}, 0, 0},
		{"no address among several", Config{ProxySQL: []ProxySQLConfig{px1}, MySQL: []MySQLConfig{db}},
			[]span{{"", 0}, {"", 0}}, map[string]int{}, 2, 0},
		{"an address nobody listens at", Config{ProxySQL: []ProxySQLConfig{px1, px2}},
			[]span{{"10.0.0.1", 6032}, {"10.0.0.3", 6033}}, map[string]int{}, 0, 2},
		{"no address with one target", Config{ProxySQL: []ProxySQLConfig{{Name: "px", DSN: px1.DSN}}},
			[]span{{"", 0}, {"10.0.0.1", 6033}}, map[string]int{"px": 1}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.OTLP.Enabled = true
			cfg, err := tc.cfg.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			r, err := newSpanRouter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, p := range cfg.ProxySQL {
				if r.proxyHinted(cfg, p.Name) {
					r.connect(cfg, r.proxyKeys[p.Name], func(int64, sessionHint) { got[p.Name]++ })
				}
			}
			for _, m := range cfg.MySQL {
				if r.mysqlHinted(cfg, m.Name) {
					r.connect(cfg, r.mysqlKeys[m.Name], func(int64, sessionHint) { got[m.Name]++ })
				}
			}
			for _, s := range tc.spans {
				r.Route(s.host, s.port, s.host != "", 7, sessionHint{Tag: "t", Start: time.Now(), End: time.Now()})
			}
			for target, n := range tc.want {
				if got[target] != n {
					t.Errorf("%s received %d hints, want %d (all: %v)", target, got[target], n, got)
				}
			}
			for target, n := range got {
				if tc.want[target] == 0 && n > 0 {
					t.Errorf("%s received %d hints meant for another target", target, n)
				}
			}
			if r.noAddress.Load() != tc.noAddr || r.unknownAddress.Load() != tc.unknownAt {
				t.Errorf("unrouted: %d without address, %d unknown; want %d, %d",
					r.noAddress.Load(), r.unknownAddress.Load(), tc.noAddr, tc.unknownAt)
			}
		})
	}
}

// TestSpanRoutesRejectAmbiguousAddresses: two targets at one address, or a
// ClientAddress that is not host:port, fail New with the cause.
func TestSpanRoutesRejectAmbiguousAddresses(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{ProxySQL: []ProxySQLConfig{{Name: "a", DSN: "u:p@tcp(h:6032)/", ClientAddress: "h:6033"}, {Name: "b", DSN: "u:p@tcp(h:6032)/", ClientAddress: "H:6033"}}},
			`both listen at h:6033`},
		{Config{ProxySQL: []ProxySQLConfig{{Name: "a", DSN: "u:p@tcp(h:6032)/", ClientAddress: "h"}}}, "ClientAddress must be host:port"},
		{Config{ProxySQL: []ProxySQLConfig{{Name: "a", DSN: "u:p@tcp(h:6032)/", ClientAddress: "h:0"}}}, "port must be 1 to 65535"},
		{Config{ProxySQL: []ProxySQLConfig{{Name: "a", DSN: "u:p@tcp(h:6032)/", ClientAddress: "db:3306"}}, MySQL: []MySQLConfig{{Name: "db", DSN: "u:p@tcp(db)/"}}},
			"both listen at db:3306"},
	} {
		tc.cfg.OTLP.Enabled = true
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error saying %q", err, tc.want)
		}
	}
}
