package testenv

import (
	"context"
	"testing"
)

// A restart comes back with what the persistence mode keeps: the last
// snapshot, nothing, or every write.
func TestRedisRestartPersistence(t *testing.T) {
	for _, tc := range []struct {
		p    Persistence
		want string // the value of k after the restart
	}{
		{PersistenceSnapshot, ":1"}, // the SAVE kept 1, the later INCR is lost
		{PersistenceNone, "$-1"},    // empty: GET of a missing key
		{PersistenceAOF, ":2"},      // every write kept
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			ctx := context.Background()
			r := NewRedis(t, RedisOptions{Persistence: tc.p})
			if _, err := r.Do(ctx, "INCR", "k"); err != nil {
				t.Fatal(err)
			}
			if err := r.Save(ctx); err != nil {
				t.Fatal(err)
			}
			if got, err := r.Do(ctx, "INCR", "k"); err != nil || got != ":2" {
				t.Fatalf("INCR = %q, %v; want :2", got, err)
			}
			if err := r.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			// INCRBY 0 reads an integer without changing it (but would
			// create a missing key: GET tells an empty server).
			cmd := []string{"INCRBY", "k", "0"}
			if tc.p == PersistenceNone {
				cmd = []string{"GET", "k"}
			}
			got, err := r.Do(ctx, cmd...)
			if err != nil || got != tc.want {
				t.Fatalf("after restart: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestRedisCloseRemovesDir(t *testing.T) {
	RequireRedis(t)
	r, err := StartRedis(context.Background(), RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Ping(context.Background()); err == nil {
		t.Fatal("redis still answers after Close")
	}
	if _, err := StartRedis(context.Background(), RedisOptions{Persistence: "fsync"}); err == nil {
		t.Fatal("unknown persistence accepted")
	}
}
