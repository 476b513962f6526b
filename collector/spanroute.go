package collector

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
)

// defaultMySQLPort is the port of a server.address without server.port:
// the conventions leave the port out when it is the protocol's default.
const defaultMySQLPort = 3306

// Why a hold span's session id was not offered to any target.
const (
	// UnroutedNoAddress: the span names no server.address and the
	// configuration has more than one target that could own the session
	// id (ProxySQL session ids are small per-instance integers, so any
	// choice would be a guess).
	UnroutedNoAddress = "no_address"
	// UnroutedUnknownAddress: the span's server.address:server.port is no
	// ProxySQL target's ClientAddress and no MySQL target's DSN address.
	UnroutedUnknownAddress = "unknown_address"
)

// hintSink takes what an app hold span says about one session of one
// target: a ProxySQL instance's session book or a MySQL server's.
type hintSink func(id int64, h sessionHint)

// spanRouter sends a hold span's session hint to the one target the span's
// connection went through, named by the address it dialled. A session id is
// only meaningful on the instance that issued it: offered to every target,
// a span from an app behind one ProxySQL named a same-numbered session on
// another (issue 24).
type spanRouter struct {
	byAddr map[string]hintSink // routeKey -> the target listening there
	// proxyKeys and mysqlKeys are the route keys of the targets, by name,
	// known before the targets are: a target that can receive no hint
	// must not wait for one.
	proxyKeys, mysqlKeys map[string]string
	// sole is the one target that can own a session id when the
	// configuration has exactly one; spans naming no address go to it.
	sole hintSink
	// unrouted counts spans whose session id went nowhere, by reason.
	noAddress, unknownAddress atomic.Int64
}

// routeKey is how an address is compared: host lower-cased, port decimal.
func routeKey(host string, port int64) string {
	return strings.ToLower(strings.Trim(host, "[]")) + ":" + strconv.FormatInt(port, 10)
}

// parseClientAddress checks a ProxySQLConfig.ClientAddress and returns its
// route key.
func parseClientAddress(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "", errors.New("ClientAddress must be host:port, the address apps dial (ProxySQL's mysql-interfaces, often port 6033)")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", errors.New("ClientAddress port must be 1 to 65535")
	}
	return routeKey(host, int64(p)), nil
}

// dsnRouteKey is the route key of the address a MySQL DSN dials; false for
// a socket or a DSN without an address.
func dsnRouteKey(mc *mysql.Config) (string, bool) {
	if mc.Net != "tcp" || mc.Addr == "" {
		return "", false
	}
	host, port, err := net.SplitHostPort(mc.Addr)
	if err != nil {
		return routeKey(mc.Addr, defaultMySQLPort), true
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		return "", false
	}
	return routeKey(host, p), true
}

// newSpanRouter plans the routes of cfg's targets; it returns nil without
// the OTLP receiver.
func newSpanRouter(cfg Config) (*spanRouter, error) {
	if !cfg.OTLP.Enabled {
		return nil, nil
	}
	r := &spanRouter{byAddr: map[string]hintSink{}, proxyKeys: map[string]string{}, mysqlKeys: map[string]string{}}
	owner := map[string]string{}
	claim := func(key, who string) error {
		if prev, ok := owner[key]; ok {
			return fmt.Errorf("%s and %s both listen at %s: a span could not tell them apart; give each its own address", prev, who, key)
		}
		owner[key] = who
		return nil
	}
	for _, p := range cfg.ProxySQL {
		if p.ClientAddress == "" {
			continue
		}
		key, err := parseClientAddress(p.ClientAddress)
		if err != nil {
			return nil, fmt.Errorf("proxysql target %q: %w", p.Name, err)
		}
		if err := claim(key, "proxysql target "+strconv.Quote(p.Name)); err != nil {
			return nil, err
		}
		r.proxyKeys[p.Name] = key
	}
	for _, m := range cfg.MySQL {
		mc, err := parseDSN(m.DSN, cfg.Timeout)
		if err != nil {
			return nil, fmt.Errorf("mysql target %q: %w", m.Name, err)
		}
		key, ok := dsnRouteKey(mc)
		if !ok || m.JoinOnly {
			continue // a join-only target credits nothing: its spans are the full target's
		}
		if err := claim(key, "mysql target "+strconv.Quote(m.Name)); err != nil {
			return nil, err
		}
		r.mysqlKeys[m.Name] = key
	}
	return r, nil
}

// soleTarget reports whether cfg has exactly one target that can own a
// session id: then a span naming no address can only be its.
func soleTarget(cfg Config) bool { return len(cfg.ProxySQL)+len(cfg.MySQL) == 1 }

// proxyHinted and mysqlHinted say whether a target can receive hints.
func (r *spanRouter) proxyHinted(cfg Config, name string) bool {
	return r != nil && (r.proxyKeys[name] != "" || soleTarget(cfg))
}

func (r *spanRouter) mysqlHinted(cfg Config, name string) bool {
	return r != nil && (r.mysqlKeys[name] != "" || soleTarget(cfg))
}

// connect routes a target's key (and, when it is the only target, spans
// without an address) to sink.
func (r *spanRouter) connect(cfg Config, key string, sink hintSink) {
	if key != "" {
		r.byAddr[key] = sink
	}
	if soleTarget(cfg) {
		r.sole = sink
	}
}

// route offers a hold span's session hint to its target, or counts it.
// haveAddr is false when the span named no server.address.
// Route gives h to the target whose client address the span names.
func (r *spanRouter) Route(host string, port int64, haveAddr bool, id int64, h sessionHint) {
	if !haveAddr {
		if r.sole != nil {
			r.sole(id, h)
			return
		}
		r.noAddress.Add(1)
		return
	}
	if port == 0 {
		port = defaultMySQLPort
	}
	if sink := r.byAddr[routeKey(host, port)]; sink != nil {
		sink(id, h)
		return
	}
	r.unknownAddress.Add(1)
}

// spanRouterMetrics exposes the router's counts: its own family, read at
// scrape time.
type spanRouterMetrics struct {
	r      *spanRouter
	target string
	desc   *prometheus.Desc
}

func newSpanRouterMetrics(r *spanRouter, target string) *spanRouterMetrics {
	return &spanRouterMetrics{r: r, target: target, desc: prometheus.NewDesc("holdtime_collector_spans_unrouted_total",
		"App hold spans with a session id that no target read: the span named no server.address while several targets could own the id (no_address), or an address no target is configured with (unknown_address). Their app-layer figures still count.",
		[]string{"target", "reason"}, nil)}
}

func (m *spanRouterMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc }

func (m *spanRouterMetrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.r.noAddress.Load()), m.target, UnroutedNoAddress)
	ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.r.unknownAddress.Load()), m.target, UnroutedUnknownAddress)
}
