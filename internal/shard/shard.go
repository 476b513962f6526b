// Package shard splits a fleet of named targets between collectors: each
// target has one owner among COUNT shards, by rendezvous hashing of its
// name. Every collector computes the same owner without talking to the
// others, a target stays with its collector across restarts, and going
// from n to n+1 collectors moves only the targets the new collector wins
// (about 1/(n+1) of them).
package shard

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Shard is one collector's part of a fleet: INDEX/COUNT.
type Shard struct{ Index, Count int }

// Parse reads INDEX/COUNT; "" is the whole fleet (0/1).
func Parse(v string) (Shard, error) {
	if v == "" {
		return Shard{0, 1}, nil
	}
	i, n, ok := strings.Cut(v, "/")
	index, err1 := strconv.Atoi(i)
	count, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || count < 1 || index < 0 || index >= count {
		return Shard{}, fmt.Errorf("--shard %q: want INDEX/COUNT with 0 <= INDEX < COUNT, such as 0/2 and 1/2 for two collectors", v)
	}
	return Shard{index, count}, nil
}

// Owns reports whether the target called name belongs to s.
func (s Shard) Owns(name string) bool {
	return s.Count <= 1 || Owner(name, s.Count) == s.Index
}

// Owner is the shard, of count, that owns the target called name.
func Owner(name string, count int) int {
	h := fnv.New64a()
	h.Write([]byte(name))
	key := h.Sum64()
	best, owner := uint64(0), 0
	for i := 0; i < count; i++ {
		// FNV alone mixes similar names poorly (px1, px2 … would share an
		// owner); splitmix64's finaliser spreads them.
		if score := mix64(key ^ uint64(i+1)*0x9E3779B97F4A7C15); i == 0 || score > best {
			best, owner = score, i
		}
	}
	return owner
}

func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	return z ^ (z >> 31)
}
