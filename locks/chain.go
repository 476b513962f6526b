package locks

import (
	"cmp"
	"slices"
	"strconv"
)

// Chain is the lock waits that lead to one root blocker: a session that
// holds others up and waits for no one. Ending the root (its transaction
// committing, rolling back, or the session killed) releases the chain.
type Chain struct {
	Root TrxRef `json:"root"`
	// HeldUp counts the sessions waiting for the root, directly or behind
	// another waiter.
	HeldUp int `json:"held_up"`
	// Kill is the statement that would end the root's session; printed for
	// a person to decide, never run. Empty when the root is unknown.
	Kill    string      `json:"kill,omitempty"`
	Waiters []ChainNode `json:"waiters"`
}

// ChainNode is one session waiting, with what it waits for and who waits
// for it in turn.
type ChainNode struct {
	Session      TrxRef      `json:"session"`
	Lock         *Lock       `json:"lock,omitempty"`
	WaitingMode  string      `json:"waiting_mode,omitempty"`
	BlockingMode string      `json:"blocking_mode,omitempty"`
	LockData     string      `json:"lock_data,omitempty"`
	WaitSeconds  float64     `json:"wait_seconds"`
	Waiters      []ChainNode `json:"waiters,omitempty"`
}

// Chains arranges waits as trees from their root blockers, the root holding
// up most sessions first. A waiter with two blockers shows under both. An
// unknown blocker is a root of its own, without a KILL.
func Chains(waits []Wait) []Chain {
	key := func(r TrxRef, i int) string {
		if r.ThreadID > 0 {
			return strconv.FormatInt(r.ThreadID, 10)
		}
		return "?" + strconv.Itoa(i) // unknown: never the same session as another
	}
	children := map[string][]int{} // blocker key -> waits
	waiting := map[string]bool{}
	refs := map[string]TrxRef{}
	var order []string
	for i, w := range waits {
		b := key(w.Blocking, i)
		if _, ok := refs[b]; !ok {
			order = append(order, b)
		}
		refs[b] = w.Blocking
		children[b] = append(children[b], i)
		waiting[key(w.Waiting, -1-i)] = true
	}
	var build func(k string, path map[string]bool, held map[string]bool) []ChainNode
	build = func(k string, path map[string]bool, held map[string]bool) []ChainNode {
		var out []ChainNode
		for _, i := range children[k] {
			w := waits[i]
			wk := key(w.Waiting, -1-i)
			if path[wk] {
				continue // a cycle: the server is about to roll one back
			}
			held[wk] = true
			path[wk] = true
			out = append(out, ChainNode{Session: w.Waiting, Lock: w.Lock, WaitingMode: w.WaitingMode,
				BlockingMode: w.BlockingMode, LockData: w.LockData, WaitSeconds: w.WaitSeconds,
				Waiters: build(wk, path, held)})
			delete(path, wk)
		}
		return out
	}
	var chains []Chain
	covered := map[string]bool{}
	add := func(k string) {
		held := map[string]bool{}
		c := Chain{Root: refs[k], Waiters: build(k, map[string]bool{k: true}, held)}
		delete(held, k)
		c.HeldUp = len(held)
		if c.Root.ThreadID > 0 {
			c.Kill = "KILL " + strconv.FormatInt(c.Root.ThreadID, 10)
		}
		for h := range held {
			covered[h] = true
		}
		covered[k] = true
		chains = append(chains, c)
	}
	for _, k := range order {
		if !waiting[k] {
			add(k)
		}
	}
	// Waits in a cycle with no root (a deadlock not yet resolved): one
	// chain from the lowest thread of each.
	rest := slices.Clone(order)
	slices.SortStableFunc(rest, func(a, b string) int { return cmp.Compare(refs[a].ThreadID, refs[b].ThreadID) })
	for _, k := range rest {
		if !covered[k] {
			add(k)
		}
	}
	slices.SortStableFunc(chains, func(a, b Chain) int {
		return cmp.Or(cmp.Compare(b.HeldUp, a.HeldUp), cmp.Compare(a.Root.ThreadID, b.Root.ThreadID))
	})
	return chains
}
