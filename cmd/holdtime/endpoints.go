package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/internal/doctor"
)

// endpoint is a target as collect, top and doctor are given it.
type endpoint struct {
	flag string // "proxysql" or "mysql"
	name string
	cfg  *mysql.Config
}

func (e endpoint) want() doctor.Kind {
	if e.flag == "proxysql" {
		return doctor.KindProxySQLAdmin
	}
	return doctor.KindMySQL
}

// maxIdentify bounds the connections opened at once to identify targets: a
// fleet of ProxySQLs is checked in parallel, not one second at a time.
const maxIdentify = 16

// refuseWrongEndpoints tells what answers at every target, in parallel,
// each within doctor.IdentifyTimeout, and returns an error naming each
// target given to the wrong flag (a MySQL server as --proxysql, ProxySQL's
// client port as its admin port, its admin as --mysql, something that is
// not MySQL). A target that cannot be reached or refuses the login is left
// to the command's own handling: a source that is down at start keeps the
// others running. A silent port (no greeting in time) is refused only when
// strict; otherwise it is logged, since a loaded server can greet late.
func refuseWrongEndpoints(ctx context.Context, eps []endpoint, strict bool, logger *slog.Logger) error {
	problems := make([]string, len(eps))
	sem := make(chan struct{}, maxIdentify)
	var wg sync.WaitGroup
	for i, e := range eps {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ep, err := doctor.Identify(ctx, e.cfg)
			if err != nil {
				return
			}
			msg := doctor.WrongEndpoint(e.want(), ep, e.flag)
			if msg == "" {
				return
			}
			msg = fmt.Sprintf("--%s %s (%s): %s", e.flag, e.name, e.cfg.Addr, msg)
			if ep.Silent && !strict {
				if logger != nil {
					logger.Warn("target may not be a MySQL-protocol server; polling it anyway", "target", e.name, "flag", e.flag, "detail", ep.Detail)
				}
				return
			}
			problems[i] = msg
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	var msgs []string
	for _, p := range problems {
		if p != "" {
			msgs = append(msgs, p)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// configEndpoints lists a collector config's ProxySQL and MySQL targets
// (their DSNs were validated when the config was built).
func configEndpoints(cfg collector.Config) []endpoint {
	var eps []endpoint
	for _, p := range cfg.ProxySQL {
		if mc, err := mysql.ParseDSN(p.DSN); err == nil {
			eps = append(eps, endpoint{flag: "proxysql", name: p.Name, cfg: mc})
		}
	}
	for _, m := range cfg.MySQL {
		if mc, err := mysql.ParseDSN(m.DSN); err == nil {
			eps = append(eps, endpoint{flag: "mysql", name: m.Name, cfg: mc})
		}
	}
	return eps
}
