package locks_test

import (
	"database/sql"
	"strconv"
	"testing"

	"github.com/holdtime/holdtime/locks"
)

// chainScene is the four-tag chain: root holds rows 1 and 3 idle;
// first_waiter holds row 2 and waits for row 1; second_waiter waits for
// row 3; behind_waiter waits for row 2, behind first_waiter. One tree:
// root -> {first_waiter -> behind_waiter, second_waiter}.
func chainScene(t *testing.T, e *env) (root, first, second, behind *tx) {
	t.Helper()
	e.exec("CREATE TABLE r (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
	e.exec("INSERT INTO r VALUES (1, 0), (2, 0), (3, 0)")
	root = e.begin("chain_root", sql.LevelReadCommitted)
	if err := root.exec("UPDATE r SET v = v + 1 WHERE id IN (1, 3)"); err != nil {
		t.Fatal(err)
	}
	first = e.begin("first_waiter", sql.LevelReadCommitted)
	if err := first.exec("UPDATE r SET v = v + 1 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	second = e.begin("second_waiter", sql.LevelReadCommitted)
	behind = e.begin("behind_waiter", sql.LevelReadCommitted)
	done := make(chan error, 3)
	// Each ends its transaction once through, so the chain unwinds when
	// the root ends.
	for _, w := range []struct {
		x  *tx
		id int
	}{{first, 1}, {second, 3}, {behind, 2}} {
		go func() {
			err := w.x.exec("UPDATE r SET v = v + 1 WHERE id = ?", w.id)
			w.x.end()
			done <- err
		}()
	}
	t.Cleanup(func() {
		root.end()
		for range 3 {
			<-done
		}
	})
	return root, first, second, behind
}

// TestChainTree (done-when): the four-tag chain is one tree rooted at the
// session that waits for no one, holding up three, with KILL of the root.
func TestChainTree(t *testing.T) {
	e := setup(t)
	root, first, second, behind := chainScene(t, e)
	s := e.readUntil("three waits", func(s *locks.Snapshot) bool { return len(s.Waits) == 3 })
	if len(s.Chains) != 1 {
		t.Fatalf("%d chains, want 1: %+v", len(s.Chains), s.Chains)
	}
	c := s.Chains[0]
	if c.Root.ThreadID != root.id || c.Root.Tag != "chain_root" || c.HeldUp != 3 || c.Kill != "KILL "+itoa(root.id) {
		t.Errorf("chain root %+v held up %d kill %q; want chain_root (thread %d) holding up 3", c.Root, c.HeldUp, c.Kill, root.id)
	}
	if !c.Root.Idle || c.Root.IdleSeconds <= 0 || c.Root.User == "" {
		t.Errorf("root %+v: want it idle, with its idle time and user", c.Root)
	}
	got := map[int64][]int64{}
	var walk func(parent int64, ns []locks.ChainNode)
	walk = func(parent int64, ns []locks.ChainNode) {
		for _, n := range ns {
			got[parent] = append(got[parent], n.Session.ThreadID)
			if n.WaitingMode == "" || n.BlockingMode == "" || n.LockData == "" || n.WaitSeconds <= 0 {
				t.Errorf("node %+v: want both lock modes, the locked record and the wait time", n)
			}
			walk(n.Session.ThreadID, n.Waiters)
		}
	}
	walk(root.id, c.Waiters)
	if len(got[root.id]) != 2 || len(got[first.id]) != 1 || got[first.id][0] != behind.id || len(got) != 2 {
		t.Errorf("tree %v: want %d -> {%d -> {%d}, %d}", got, root.id, first.id, behind.id, second.id)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
