package locks

import (
	"slices"
	"testing"
)

// TestChainsShapes: Chains against hand-made waits, for the shapes a live
// server makes rarely: a waiter with two blockers (two shared holders), an
// unknown blocker, and a cycle the server has not broken yet.
func TestChainsShapes(t *testing.T) {
	ref := func(th int64, tag string) TrxRef { return TrxRef{ThreadID: th, Tag: tag} }
	unknown := TrxRef{TrxID: "0", Tag: UnknownTag}
	for _, tc := range []struct {
		name  string
		waits []Wait
		// roots by thread (0: unknown), with held-up counts and kills
		roots  []int64
		heldUp []int
		kills  []string
	}{
		{"two shared holders block one writer", []Wait{
			{Waiting: ref(3, "w"), Blocking: ref(1, "s1")}, {Waiting: ref(3, "w"), Blocking: ref(2, "s2")},
		}, []int64{1, 2}, []int{1, 1}, []string{"KILL 1", "KILL 2"}},
		{"unknown blockers are roots of their own, without KILL", []Wait{
			{Waiting: ref(3, "w"), Blocking: unknown}, {Waiting: ref(4, "x"), Blocking: unknown},
		}, []int64{0, 0}, []int{1, 1}, []string{"", ""}},
		{"a cycle not yet broken still shows", []Wait{
			{Waiting: ref(1, "a"), Blocking: ref(2, "b")}, {Waiting: ref(2, "b"), Blocking: ref(1, "a")},
		}, []int64{1}, []int{1}, []string{"KILL 1"}},
		{"chain of four", []Wait{
			{Waiting: ref(2, "w1"), Blocking: ref(1, "r")}, {Waiting: ref(3, "w2"), Blocking: ref(1, "r")},
			{Waiting: ref(4, "w3"), Blocking: ref(2, "w1")},
		}, []int64{1}, []int{3}, []string{"KILL 1"}},
	} {
		cs := Chains(tc.waits)
		var roots []int64
		var held []int
		var kills []string
		for _, c := range cs {
			roots, held, kills = append(roots, c.Root.ThreadID), append(held, c.HeldUp), append(kills, c.Kill)
		}
		if !slices.Equal(roots, tc.roots) || !slices.Equal(held, tc.heldUp) || !slices.Equal(kills, tc.kills) {
			t.Errorf("%s: roots %v held up %v kills %q; want %v %v %q", tc.name, roots, held, kills, tc.roots, tc.heldUp, tc.kills)
		}
	}
}
