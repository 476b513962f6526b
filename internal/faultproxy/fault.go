package faultproxy

import (
	"strings"
	"sync"
)

// Action is what a fault does to the command it matches.
type Action int

const (
	// LoseReply forwards the command, waits for the server's first reply
	// packet, then closes both connections without passing that packet on:
	// the command took effect and the client cannot know.
	LoseReply Action = iota + 1
	// DropBefore closes both connections instead of forwarding the command:
	// the server never sees it.
	DropBefore
)

func (a Action) String() string {
	switch a {
	case LoseReply:
		return "LoseReply"
	case DropBefore:
		return "DropBefore"
	}
	return "Action(?)"
}

// ComQuery is the command code of a text statement (COM_QUERY).
const ComQuery = 0x03

// Command is one command a client sent, as a Match sees it.
type Command struct {
	// ConnectionID is the server's id of the connection (CONNECTION_ID()),
	// from its greeting; 0 when the greeting could not be read.
	ConnectionID uint32
	// Code is the command code: ComQuery for a text statement.
	Code byte
	// Query is the statement text of a ComQuery command, as sent.
	Query string
}

// Fault selects commands and what to do to them.
type Fault struct {
	// Action is what to do; required.
	Action Action
	// Match selects the commands to fault. Default: Statement("COMMIT").
	Match func(Command) bool
	// Times is how many matching commands to fault: 0 means once, a
	// negative number every match until Cancel.
	Times int
}

// Statement returns a Match that selects the text statement stmt, compared
// without regard to case, surrounding white space, a trailing ';' or
// leading /* … */ comments (such as conntag's tag).
func Statement(stmt string) func(Command) bool {
	want := normalize(stmt)
	return func(c Command) bool {
		return c.Code == ComQuery && strings.EqualFold(normalize(c.Query), want)
	}
}

// StatementPrefix returns a Match that selects text statements that begin
// with prefix, compared as Statement compares (case, white space and
// leading comments ignored), such as "INSERT INTO inventory_ledger".
func StatementPrefix(prefix string) func(Command) bool {
	want := normalize(prefix)
	return func(c Command) bool {
		if c.Code != ComQuery {
			return false
		}
		q := normalize(c.Query)
		return len(q) >= len(want) && strings.EqualFold(q[:len(want)], want)
	}
}

// normalize strips leading comments, white space and a trailing ';'.
func normalize(q string) string {
	for {
		q = strings.TrimSpace(q)
		if !strings.HasPrefix(q, "/*") {
			break
		}
		end := strings.Index(q[2:], "*/")
		if end < 0 {
			return q // an unterminated comment is the statement
		}
		q = q[2+end+2:]
	}
	return strings.TrimSpace(strings.TrimSuffix(q, ";"))
}

// Injection is an armed fault. Its methods are safe for concurrent use.
type Injection struct {
	p      *Proxy
	action Action
	match  func(Command) bool
	times  int // the Times asked for; negative: unlimited

	mu      sync.Mutex
	claimed int // commands selected, fired or in flight
	fired   int
	done    chan struct{}
}

// Fired returns how many commands the fault has broken so far. A command
// counts just before the proxy closes its connections, so a client that saw
// the break finds it counted: for LoseReply once the server has answered
// (or closed the connection first), for DropBefore at once.
func (i *Injection) Fired() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.fired
}

// Done is closed once the fault has fired Times times (never for an
// unlimited fault).
func (i *Injection) Done() <-chan struct{} { return i.done }

// Cancel disarms the fault: no further command is selected. A command
// already selected is still broken.
func (i *Injection) Cancel() { i.p.remove(i) }

// claim selects c when it matches and the budget allows. Called with the
// proxy's lock held.
func (i *Injection) claim(c Command) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.times >= 0 && i.claimed >= i.times {
		return false
	}
	if !i.match(c) {
		return false
	}
	i.claimed++
	return true
}

// exhausted reports whether no further command can be selected.
func (i *Injection) exhausted() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.times >= 0 && i.claimed >= i.times
}

func (i *Injection) fire() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.fired++
	if i.fired == i.times {
		close(i.done)
	}
}
