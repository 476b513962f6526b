package main

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// shard is one collector's part of a fleet: --shard INDEX/COUNT.
type shard struct{ index, count int }

// parseShard reads INDEX/COUNT; "" is the whole fleet (0/1).
func parseShard(v string) (shard, error) {
	if v == "" {
		return shard{0, 1}, nil
	}
	i, n, ok := strings.Cut(v, "/")
	index, err1 := strconv.Atoi(i)
	count, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || count < 1 || index < 0 || index >= count {
		return shard{}, fmt.Errorf("--shard %q: want INDEX/COUNT with 0 <= INDEX < COUNT, such as 0/2 and 1/2 for two collectors", v)
	}
	return shard{index, count}, nil
}

// owns reports whether target name belongs to this shard. Ownership is
// rendezvous hashing of the name: every collector of the fleet computes
// the same owner without talking to the others, a target stays with its
// collector across restarts, and going from n to n+1 collectors moves only
// the targets the new collector wins (about 1/(n+1) of them), not most.
func (s shard) owns(name string) bool {
	return s.count <= 1 || shardOwner(name, s.count) == s.index
}

func shardOwner(name string, count int) int {
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
