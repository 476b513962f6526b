// Package faultproxy is a TCP proxy in front of a MySQL or MariaDB server
// that breaks connections at the commands a test chooses, so the test can
// check what code does when it cannot know whether a statement took effect.
//
//	p, err := faultproxy.Listen("tcp", serverAddr)
//	t.Cleanup(func() { p.Close() })
//	cfg.Addr = p.Addr() // the client's go-sql-driver/mysql config
//	lost := p.Inject(faultproxy.Fault{Action: faultproxy.LoseReply}) // the next COMMIT
//	err := tx.Commit() // committed on the server; the client gets ErrInvalidConn
//	lost.Fired()       // 1
//
// Two faults, at any command a Match selects (by default every COMMIT):
//
//   - LoseReply forwards the command, waits for the server's first reply
//     packet (the OK of a COMMIT: the transaction is durable), then closes
//     both connections without passing the reply on.
//   - DropBefore closes both connections instead of forwarding the command:
//     the server never sees it and rolls the transaction back.
//
// The client sees the same thing in both cases, a connection that ended
// while it waited for the reply; only the server knows which happened. That
// is the case code that retries after a lost connection must get right.
//
// The proxy understands as much of the client/server protocol as it needs:
// packet framing (a command is a client packet with sequence number 0) and
// the server's greeting, in which it clears the TLS and compression
// capabilities so that it can read every command. A client that requires
// TLS (tls=true) is therefore refused by the driver; tls=preferred falls
// back to plain text.
//
// Close stops the listener, closes every connection and returns once every
// goroutine the proxy started has ended.
package faultproxy
