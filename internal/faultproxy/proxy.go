package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from a loopback port to a server and breaks
// them where its armed faults say. Create it with Listen; its methods are
// safe for concurrent use.
type Proxy struct {
	network, upstream string
	ln                net.Listener
	ctx               context.Context // cancelled by Close: ends dials
	cancel            context.CancelFunc
	wg                sync.WaitGroup // the accept loop and every connection's goroutines

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}
	faults []*Injection
}

// Listen starts a proxy on a free port of 127.0.0.1 that forwards every
// connection to the server at address on network ("tcp" or "unix").
func Listen(network, address string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen on 127.0.0.1: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{network: network, upstream: address, ln: ln, ctx: ctx, cancel: cancel, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address (host:port) for clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Inject arms f. Faults are tried in the order they were armed; a command
// gets at most one.
func (p *Proxy) Inject(f Fault) *Injection {
	if f.Action != LoseReply && f.Action != DropBefore {
		panic(fmt.Sprintf("faultproxy: Fault.Action %d is not LoseReply or DropBefore", f.Action))
	}
	i := &Injection{p: p, action: f.Action, match: f.Match, times: f.Times, done: make(chan struct{})}
	if i.match == nil {
		i.match = Statement("COMMIT")
	}
	if i.times == 0 {
		i.times = 1
	}
	p.mu.Lock()
	p.faults = append(p.faults, i)
	p.mu.Unlock()
	return i
}

// Conns returns the number of client connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// DropAll closes every open connection (both sides), like a network blip;
// the proxy keeps accepting new ones.
func (p *Proxy) DropAll() {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Close stops accepting, closes every connection and waits until every
// goroutine of the proxy has returned. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	p.mu.Unlock()
	var err error
	if first {
		p.cancel()
		err = p.ln.Close()
		p.DropAll()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.ctx.Err() != nil {
				return
			}
			// Out of file descriptors or similar: let it pass.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		c := &conn{p: p, client: client}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go c.serve()
	}
}

// match returns the fault that selects cmd, if any.
func (p *Proxy) match(cmd Command) *Injection {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, i := range p.faults {
		if i.claim(cmd) {
			if i.exhausted() {
				p.faults = slices.DeleteFunc(p.faults, func(x *Injection) bool { return x == i })
			}
			return i
		}
	}
	return nil
}

func (p *Proxy) remove(i *Injection) {
	p.mu.Lock()
	p.faults = slices.DeleteFunc(p.faults, func(x *Injection) bool { return x == i })
	p.mu.Unlock()
}

// conn is one client connection and its server connection.
type conn struct {
	p      *Proxy
	client net.Conn
	connID atomic.Uint32
	// lose is the LoseReply fault waiting for the server's reply to the
	// command just forwarded.
	lose atomic.Pointer[Injection]

	mu     sync.Mutex
	server net.Conn
	closed bool
}

func (c *conn) serve() {
	defer c.p.wg.Done()
	defer func() {
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	}()
	var d net.Dialer
	server, err := d.DialContext(c.p.ctx, c.p.network, c.p.upstream)
	if err != nil {
		c.close()
		return
	}
	c.mu.Lock()
	c.server = server
	closed := c.closed
	c.mu.Unlock()
	if closed {
		server.Close()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.fromServer()
	}()
	c.fromClient()
	<-done
}

// close closes both sides. A reply still awaited is lost: its fault fires,
// before the client can see the connection end.
func (c *conn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	server := c.server
	c.mu.Unlock()
	if i := c.lose.Swap(nil); i != nil {
		i.fire()
	}
	c.client.Close()
	if server != nil {
		server.Close()
	}
}

// fromClient forwards the client's packets and applies faults to commands.
func (c *conn) fromClient() {
	r := bufio.NewReader(c.client)
	for {
		frame, err := readFrame(r)
		if err != nil {
			c.close()
			return
		}
		if cmd, ok := command(frame, c.connID.Load()); ok {
			if i := c.p.match(cmd); i != nil {
				switch i.action {
				case DropBefore:
					i.fire()
					c.close()
					return
				case LoseReply:
					c.lose.Store(i)
				}
			}
		}
		if _, err := c.server.Write(frame); err != nil {
			c.close()
			return
		}
	}
}

// fromServer forwards the server's packets, patching its greeting, and
// swallows the reply a LoseReply fault waits for.
func (c *conn) fromServer() {
	r := bufio.NewReader(c.server)
	greeting := true
	for {
		frame, err := readFrame(r)
		if err != nil {
			c.close()
			return
		}
		if greeting {
			greeting = false
			c.connID.Store(patchGreeting(frame))
		} else if c.lose.Load() != nil {
			c.close() // fires the fault
			return
		}
		if _, err := c.client.Write(frame); err != nil {
			c.close()
			return
		}
	}
}
