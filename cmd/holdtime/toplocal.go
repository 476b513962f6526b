package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/collector"
)

// localTop runs a collector in-process for `top --proxysql/--mysql`.
type localTop struct {
	c      *collector.Collector
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// targetName splits an optional NAME= from a DSN; without one the instance
// is named by its address, never by its credentials.
func targetName(kind, v string) (name, dsn string, err error) {
	dsn = v
	if n, rest, ok := strings.Cut(v, "="); ok && n != "" && !strings.ContainsAny(n, "@:/(") {
		name, dsn = n, rest
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		// The driver's message can quote the DSN: say what is wrong without it.
		return "", "", fmt.Errorf("--%s: not a DSN of the form [NAME=]user:pass@tcp(host:port)/", kind)
	}
	if name == "" {
		name = strings.NewReplacer("[", "", "]", "").Replace(cfg.Addr)
	}
	if name == "" {
		name = kind
	}
	return name, dsn, nil
}

func startLocalTop(ctx context.Context, proxysqlDSNs, mysqlDSNs []string, timeout time.Duration) (*localTop, error) {
	cfg := collector.Config{Timeout: timeout}
	for _, v := range proxysqlDSNs {
		name, dsn, err := targetName("proxysql", v)
		if err != nil {
			return nil, err
		}
		cfg.ProxySQL = append(cfg.ProxySQL, collector.ProxySQLConfig{Name: name, DSN: dsn})
	}
	for _, v := range mysqlDSNs {
		name, dsn, err := targetName("mysql", v)
		if err != nil {
			return nil, err
		}
		// top is interactive: poll faster than the daemon's default.
		cfg.MySQL = append(cfg.MySQL, collector.MySQLConfig{Name: name, DSN: dsn, Interval: 250 * time.Millisecond})
	}
	c, err := collector.New(cfg)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	l := &localTop{c: c, cancel: cancel}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		_ = c.Run(runCtx)
	}()
	return l, nil
}

// waitFirstPoll waits until every source has answered once, and says which
// did not within timeout.
func (l *localTop) waitFirstPoll(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, down := l.c.Ready()
		if ok {
			return nil
		}
		// Wrong credentials will not get better by waiting.
		denied := len(down) > 0
		for _, s := range l.c.Sources() {
			if !s.Up && !strings.Contains(s.LastError, "Access denied") {
				denied = false
			}
		}
		if denied || time.Now().After(deadline) {
			var why []string
			for _, s := range l.c.Sources() {
				if !s.Up && s.LastError != "" {
					why = append(why, s.Target+": "+s.LastError)
				}
			}
			msg := fmt.Sprintf("no answer from %s within %v", strings.Join(down, ", "), timeout)
			if denied {
				msg = strings.Join(down, ", ") + " refused the login"
			}
			if len(why) > 0 {
				msg += " (" + strings.Join(why, "; ") + ")"
			}
			return fmt.Errorf("%s: check the address and credentials "+
				"(a MySQL account needs PROCESS and SELECT on performance_schema; ProxySQL needs its admin interface, port 6032)", msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (l *localTop) top(_ context.Context, window string) (collector.TopResponse, error) {
	w, err := time.ParseDuration(window)
	if err != nil {
		return collector.TopResponse{}, err
	}
	return collector.TopResponse{At: time.Now().UTC(), Rows: l.c.Top(w), Sources: l.c.Sources()}, nil
}

// stop ends the polling; errors closing connections after the user quit
// are not worth a message.
func (l *localTop) stop() {
	l.cancel()
	l.done.Wait()
}
