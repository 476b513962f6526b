package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/collector"
)

// localTop runs a collector in-process for `top --proxysql/--mysql`.
type localTop struct {
	c       *collector.Collector
	cancel  context.CancelFunc
	done    sync.WaitGroup
	targets map[string]localTarget // by target name
}

// localTarget is what a message about a target may say: its kind and
// address, never its credentials.
type localTarget struct {
	kind string // "mysql" or "proxysql"
	addr string // host:port or socket path
	net  string
}

// targetName splits an optional NAME= from a DSN; without one the instance
// is named by its address, never by its credentials.
func targetName(kind, v string) (name, dsn string, cfg *mysql.Config, err error) {
	dsn = v
	if n, rest, ok := strings.Cut(v, "="); ok && n != "" && !strings.ContainsAny(n, "@:/(") {
		name, dsn = n, rest
	}
	cfg, err = mysql.ParseDSN(dsn)
	if err != nil {
		// The driver's message can quote the DSN: say what is wrong without it.
		return "", "", nil, fmt.Errorf("--%s: not a DSN of the form [NAME=]user:pass@tcp(host:port)/", kind)
	}
	if name == "" {
		name = strings.NewReplacer("[", "", "]", "").Replace(cfg.Addr)
		if !collector.ValidTargetName(name) {
			// A socket path, a long host name: the address cannot be the
			// target label, a name can.
			return "", "", nil, fmt.Errorf("--%s: the DSN's address (%s) cannot name the target: put a name in front, "+
				"such as --%s db1='user:pass@%s(...)/' (1 to 64 of A-Za-z0-9_.:-)", kind, cfg.Net, kind, cfg.Net)
		}
	}
	return name, dsn, cfg, nil
}

func startLocalTop(ctx context.Context, proxysqlDSNs, mysqlDSNs []string, timeout time.Duration) (*localTop, error) {
	cfg := collector.Config{Timeout: timeout}
	targets := map[string]localTarget{}
	for _, v := range proxysqlDSNs {
		name, dsn, mc, err := targetName("proxysql", v)
		if err != nil {
			return nil, err
		}
		cfg.ProxySQL = append(cfg.ProxySQL, collector.ProxySQLConfig{Name: name, DSN: dsn})
		targets["proxysql/"+name] = localTarget{kind: "proxysql", addr: mc.Addr, net: mc.Net}
	}
	for _, v := range mysqlDSNs {
		name, dsn, mc, err := targetName("mysql", v)
		if err != nil {
			return nil, err
		}
		// top is interactive: poll faster than the daemon's default.
		// top shows hold, not locks: no lock reader (`holdtime locks` is the view of those).
		cfg.MySQL = append(cfg.MySQL, collector.MySQLConfig{Name: name, DSN: dsn, Interval: 250 * time.Millisecond, LocksInterval: -1})
		targets["mysql/"+name] = localTarget{kind: "mysql", addr: mc.Addr, net: mc.Net}
	}
	// top is interactive: a target given to the wrong flag ends it at once,
	// named, rather than after --timeout.
	if err := refuseWrongEndpoints(ctx, configEndpoints(cfg), true, nil); err != nil {
		return nil, err
	}
	c, err := collector.New(cfg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	l := &localTop{c: c, cancel: cancel, targets: targets}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		_ = c.Run(runCtx)
	}()
	return l, nil
}

// target describes a source's target for messages.
func (l *localTop) target(s collector.SourceStatus) localTarget {
	kind := "mysql"
	if s.Source != collector.SourceMySQL {
		kind = "proxysql"
	}
	t, ok := l.targets[kind+"/"+s.Target]
	if !ok {
		t = localTarget{kind: kind}
	}
	return t
}

// waitFirstPoll waits until every source has answered once. A failure that
// waiting cannot fix (refused, wrong password, unknown database...) ends it
// at once, with advice for that failure; others get the whole timeout.
func (l *localTop) waitFirstPoll(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, _ := l.c.Ready()
		if ok {
			return nil
		}
		late := time.Now().After(deadline)
		problems := map[string]string{} // one per target
		for _, s := range l.c.Sources() {
			t := l.target(s)
			key := t.kind + "/" + s.Target
			if s.Up || problems[key] != "" {
				continue
			}
			switch {
			case s.Failure.Permanent(), late && s.LastError != "":
				problems[key] = explainFailure(t, s.Failure, s.LastError, timeout)
			case late:
				problems[key] = explainFailure(t, collector.FailureTimeout, "", timeout)
			}
		}
		if len(problems) > 0 {
			msgs := slices.Sorted(maps.Values(problems))
			return errors.New(strings.Join(msgs, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (l *localTop) top(_ context.Context, q collector.TopQuery) (collector.TopResponse, error) {
	return l.c.TopReport(q)
}

func (l *localTop) tagDetail(_ context.Context, tag string) (collector.TagDetail, error) {
	return l.c.TagDetail(tag), nil
}

// waitCovered waits at least least, then until every layer's figures cover
// minCovered (rates over less are not shown), for at most timeout.
func (l *localTop) waitCovered(ctx context.Context, q collector.TopQuery, least, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	first := time.NewTimer(least)
	defer first.Stop()
	select {
	case <-first.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := l.c.TopReport(q)
		if err != nil {
			return err
		}
		short := false
		for _, ls := range resp.Layers {
			short = short || ls.CoveredSeconds < minCovered.Seconds()
		}
		if !short || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// stop ends the polling; errors closing connections after the user quit
// are not worth a message.
func (l *localTop) stop() {
	l.cancel()
	l.done.Wait()
}
