package shard

import (
	"fmt"
	"testing"
)

// TestShardsSplitAFleetOnceAndStably: every target has exactly one owner,
// shards get a fair part, and adding a collector moves only the targets
// the new collector takes.
func TestShardsSplitAFleetOnceAndStably(t *testing.T) {
	names := make([]string, 500)
	for i := range names {
		names[i] = fmt.Sprintf("px%d", i)
	}
	for n := 1; n <= 6; n++ {
		per := make([]int, n)
		for _, name := range names {
			owners := 0
			for i := 0; i < n; i++ {
				if (Shard{i, n}).Owns(name) {
					owners++
					per[i]++
				}
			}
			if owners != 1 {
				t.Fatalf("%s has %d owners among %d shards", name, owners, n)
			}
			if n > 1 {
				if was, now := Owner(name, n-1), Owner(name, n); was != now && now != n-1 {
					t.Errorf("%s moved from shard %d to %d going from %d to %d collectors; only moves to the new one are allowed", name, was, now, n-1, n)
				}
			}
		}
		for i, got := range per {
			if fair := len(names) / n; got < fair/2 {
				t.Errorf("%d shards: shard %d owns %d of %d targets (fair: %d)", n, i, got, len(names), fair)
			}
		}
	}
}

func TestParse(t *testing.T) {
	for _, bad := range []string{"2/2", "-1/2", "1", "a/b", "0/0", "1/2/3"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if s, err := Parse("1/3"); err != nil || s != (Shard{1, 3}) {
		t.Errorf("Parse(1/3) = %v, %v", s, err)
	}
	if s, err := Parse(""); err != nil || s != (Shard{0, 1}) || !s.Owns("anything") {
		t.Errorf("Parse(\"\") = %v, %v", s, err)
	}
}
