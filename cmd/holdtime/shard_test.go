package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdtime/holdtime/internal/shard"
)

// TestCollectShardConfig: collectors given the same flags and different
// --shard values poll disjoint parts of the fleet that cover all of it;
// flags naming another shard's target are accepted; bad values are
// refused clearly.
func TestCollectShardConfig(t *testing.T) {
	fleet := []string{"px-a", "px-b", "px-c", "px-d", "px-e"}
	base := func(sh string) *collectCmd {
		c := &collectCmd{shard: sh, listen: "127.0.0.1:0", plInterval: 250 * time.Millisecond, poolInterval: 5 * time.Second,
			digestInterval: 10 * time.Second, mysqlInterval: time.Second, maxTags: 10, timeout: 5 * time.Second}
		for _, name := range fleet {
			c.proxysql = append(c.proxysql, name+"=u:secretpw@tcp(127.0.0.1:1)/")
			c.eventsLogs = append(c.eventsLogs, name+"=/tmp/"+name+".log")
		}
		return c
	}
	seen := map[string]int{}
	exporters := 0
	for i := 0; i < 3; i++ {
		c := base(fmt.Sprintf("%d/3", i))
		c.otlp = true // a shard may own no ProxySQL
		c.mysql = []string{"db=u:secretpw@tcp(127.0.0.1:1)/"}
		cfg, err := c.config(prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatalf("shard %d/3: %v", i, err)
		}
		// The server: exported by the shard that owns it, read for the
		// join by every other shard that has ProxySQLs to join.
		switch {
		case shard.Owner("db", 3) == i:
			if len(cfg.MySQL) != 1 || cfg.MySQL[0].JoinOnly {
				t.Errorf("shard %d/3 owns db but has %+v", i, cfg.MySQL)
			}
			exporters++
		case len(cfg.ProxySQL) > 0:
			if len(cfg.MySQL) != 1 || !cfg.MySQL[0].JoinOnly {
				t.Errorf("shard %d/3 has ProxySQLs but reads db as %+v; want join-only", i, cfg.MySQL)
			}
		default:
			if len(cfg.MySQL) != 0 {
				t.Errorf("shard %d/3 has no ProxySQL, yet reads db: %+v", i, cfg.MySQL)
			}
		}
		for _, p := range cfg.ProxySQL {
			seen[p.Name]++
			if p.EventsLog != "/tmp/"+p.Name+".log" {
				t.Errorf("shard %d/3: %s lost its events log: %q", i, p.Name, p.EventsLog)
			}
		}
		if len(cfg.ProxySQL)+len(c.others) != len(fleet) {
			t.Errorf("shard %d/3: %d own + %d others, want %d", i, len(cfg.ProxySQL), len(c.others), len(fleet))
		}
	}
	if exporters != 1 {
		t.Errorf("%d shards export db's figures, want 1", exporters)
	}
	for _, name := range fleet {
		if seen[name] != 1 {
			t.Errorf("%s polled by %d shards, want 1", name, seen[name])
		}
	}
	for _, bad := range []string{"2/2", "-1/2", "1", "a/b", "0/0", "1/2/3"} {
		_, err := base(bad).config(prometheus.NewRegistry(), nil)
		if err == nil || !strings.Contains(err.Error(), "INDEX/COUNT") {
			t.Errorf("--shard %s: %v; want an INDEX/COUNT error", bad, err)
		}
	}
	// A shard that would poll nothing says so, without a DSN.
	c := base("0/2")
	c.proxysql, c.eventsLogs = c.proxysql[:1], nil
	if shard.Owner("px-a", 2) == 0 {
		c.shard = "1/2"
	}
	_, err := c.config(prometheus.NewRegistry(), nil)
	if err == nil || !strings.Contains(err.Error(), "would poll nothing") || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("a shard owning nothing: %v", err)
	}
}
