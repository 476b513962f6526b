package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
)

// FleetOptions configures StartProxySQLFleet.
type FleetOptions struct {
	// ProxySQL configures every instance. Backend is required; Threads
	// defaults to 1 here (each instance of a fleet carries a light load,
	// and a fleet must fit on a small machine); AppPass defaults to one
	// random password for the whole fleet.
	ProxySQL ProxySQLOptions
	// N is the number of instances. Required.
	N int
	// Parallel bounds how many instances start at once. Default 8. A start
	// costs about 0.1 s of CPU (measured on a 2-core machine under a load
	// average of 15: 20 instances were up in 7 s at 4 or 8 at once, 8.4 s
	// at 2), the rest is waiting for the interfaces.
	Parallel int
}

// StartProxySQLFleet starts opts.N ProxySQLs in front of one backend, each
// with its own private directory and its own app and admin ports (all
// distinct within the fleet), sharing the app account. It returns them in
// start order, or an error after stopping those it started. Close each
// one, or use NewProxySQLFleet in tests.
func StartProxySQLFleet(ctx context.Context, opts FleetOptions) ([]*ProxySQL, error) {
	if opts.N <= 0 {
		return nil, fmt.Errorf("testenv: StartProxySQLFleet needs N > 0, not %d", opts.N)
	}
	po := opts.ProxySQL
	po.Threads = cmp.Or(po.Threads, 1)
	po.AppPass = cmp.Or(po.AppPass, randomHex(8))
	if po.Backend == nil || po.Backend.Server() == nil {
		return nil, fmt.Errorf("testenv: StartProxySQLFleet needs a Backend that testenv started")
	}
	// One account for the whole fleet, made once: concurrent ALTER USERs
	// of one account are not something to ask of the server.
	if err := createBackendUser(ctx, po.Backend, proxysqlAppUser, po.AppPass); err != nil {
		return nil, err
	}
	po.backendUserDone = true
	ports, err := reservePorts(2 * opts.N)
	if err != nil {
		return nil, err
	}
	fleet := make([]*ProxySQL, opts.N)
	errs := make([]error, opts.N)
	sem := make(chan struct{}, cmp.Or(opts.Parallel, 8))
	start := func(i int) {
		o := po
		o.appPort, o.adminPort = ports[2*i], ports[2*i+1]
		fleet[i], errs[i] = StartProxySQL(ctx, o)
		if errs[i] != nil {
			errs[i] = fmt.Errorf("ProxySQL %d of %d: %w", i+1, opts.N, errs[i])
		}
	}
	first := 0
	if !proxysqlTLSCached() {
		// The first start makes the TLS files every later one copies;
		// started together, each would make its own.
		start(0)
		first = 1
	}
	var wg sync.WaitGroup
	for i := first; i < opts.N && errs[0] == nil; i++ {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			start(i)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range fleet {
			if p != nil {
				p.Close()
			}
		}
		return nil, err
	}
	return fleet, nil
}

// NewProxySQLFleet starts a fleet for a test (see StartProxySQLFleet) and
// stops every instance in t.Cleanup. Without a proxysql binary it skips the
// test (fails it under HOLDTIME_REQUIRE_PROXYSQL=1).
func NewProxySQLFleet(tb testing.TB, opts FleetOptions) []*ProxySQL {
	tb.Helper()
	RequireProxySQL(tb)
	fleet, err := StartProxySQLFleet(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		var wg sync.WaitGroup
		for _, p := range fleet {
			wg.Go(func() {
				if err := p.Close(); err != nil {
					tb.Errorf("testenv: stop ProxySQL %s: %v", p.AdminAddr, err)
				}
			})
		}
		wg.Wait()
	})
	return fleet
}

// reservePorts returns n distinct free loopback ports: all are held open
// until the last is found, so none can be handed out twice.
func reservePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testenv: free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
