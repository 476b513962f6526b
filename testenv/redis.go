package testenv

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const redisDirPrefix = "holdtime-redis-"

// redisInstallHint names the install of a redis-server, for skips and errors.
const redisInstallHint = "redis-server is not on PATH: install it with `sudo apt-get install -y redis-server` " +
	"(Debian/Ubuntu; .ci/install-deps does) or put a redis-server binary on PATH"

// Persistence is how a throwaway Redis keeps its data across a restart.
type Persistence string

const (
	// PersistenceSnapshot keeps RDB snapshots only, like Debian's
	// redis.conf (no AOF): a restart after a crash loads the last snapshot
	// and loses every write since. Snapshots are taken when Redis.Save is
	// called (the automatic `save` schedule is off, so a test decides
	// which snapshot is the last one).
	PersistenceSnapshot Persistence = "snapshot"
	// PersistenceNone keeps nothing: a restart starts empty.
	PersistenceNone Persistence = "none"
	// PersistenceAOF logs every write (appendonly yes, appendfsync always):
	// a restart loses nothing.
	PersistenceAOF Persistence = "aof"
)

// RedisOptions configures StartRedis.
type RedisOptions struct {
	// Persistence defaults to PersistenceSnapshot.
	Persistence Persistence
	// Binary is the redis-server binary. Default: "redis-server" on PATH
	// (or /usr/bin/redis-server).
	Binary string
	// Timeout bounds a start. Default 30 s.
	Timeout time.Duration
}

// Redis is a running throwaway redis-server on a free loopback port, with
// its data in a private directory removed by Close.
type Redis struct {
	Addr string // 127.0.0.1:port

	opts RedisOptions
	bin  string
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
}

func findRedis(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server", nil
	}
	return "", fmt.Errorf("testenv: %s: %w", redisInstallHint, ErrNotInstalled)
}

// RedisAvailable reports whether a redis-server binary can be found.
func RedisAvailable() bool { _, err := findRedis(""); return err == nil }

// RequireRedis skips the test when no redis-server is installed, naming the
// install, and fails it instead under CI=true.
func RequireRedis(tb testing.TB) {
	tb.Helper()
	if RedisAvailable() {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal(redisInstallHint + " (CI=true requires the Redis tests to run)")
	}
	tb.Skip(redisInstallHint)
}

// NewRedis starts a throwaway Redis for one test and stops it when the test
// ends. It skips (or fails under CI=true) when redis-server is missing.
func NewRedis(tb testing.TB, opts RedisOptions) *Redis {
	tb.Helper()
	RequireRedis(tb)
	r, err := StartRedis(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// StartRedis starts redis-server on a free loopback port and waits until it
// answers PING. Without a redis-server binary it returns an error wrapping
// ErrNotInstalled.
func StartRedis(ctx context.Context, opts RedisOptions) (_ *Redis, err error) {
	opts.Persistence = cmp.Or(opts.Persistence, PersistenceSnapshot)
	switch opts.Persistence {
	case PersistenceSnapshot, PersistenceNone, PersistenceAOF:
	default:
		return nil, fmt.Errorf("testenv: unknown Redis persistence %q (snapshot, none or aof)", opts.Persistence)
	}
	bin, err := findRedis(opts.Binary)
	if err != nil {
		return nil, err
	}
	reapLeftovers()
	dir, err := newRunDir("", redisDirPrefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("testenv: free port: %w", err)
	}
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), opts: opts, bin: bin, dir: dir}
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Redis) args() []string {
	_, port, _ := net.SplitHostPort(r.Addr)
	a := []string{"--port", port, "--bind", "127.0.0.1", "--dir", r.dir, "--daemonize", "no",
		"--save", "", "--dbfilename", "dump.rdb", "--logfile", filepath.Join(r.dir, "redis.log"),
		"--pidfile", filepath.Join(r.dir, "server.pid")}
	switch r.opts.Persistence {
	case PersistenceAOF:
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	default:
		a = append(a, "--appendonly", "no")
	}
	return a
}

func (r *Redis) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.opts.Timeout, 30*time.Second))
	defer cancel()
	if r.opts.Persistence == PersistenceNone {
		_ = os.Remove(filepath.Join(r.dir, "dump.rdb"))
	}
	cmd := exec.Command(r.bin, r.args()...)
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := r.Ping(ctx); err == nil {
			return nil
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			return fmt.Errorf("testenv: redis-server exited during start:\n%s", tail(log, 4000))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("testenv: redis-server not ready at %s: %w", r.Addr, ctx.Err())
		case <-tick.C:
		}
	}
}

// Do sends one command and returns its reply line (simple strings,
// integers and errors; a bulk reply's first line). It is for tests and
// health checks, not a client.
func (r *Redis) Do(ctx context.Context, args ...string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", r.Addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(line, "-") {
		return "", fmt.Errorf("testenv: redis %s: %s", args[0], line[1:])
	}
	return line, nil
}

// Ping checks that the server answers.
func (r *Redis) Ping(ctx context.Context) error {
	reply, err := r.Do(ctx, "PING")
	if err != nil {
		return err
	}
	if reply != "+PONG" {
		return fmt.Errorf("testenv: redis PING answered %q", reply)
	}
	return nil
}

// Save takes a snapshot now (SAVE): with PersistenceSnapshot it is what a
// restart after a crash comes back with.
func (r *Redis) Save(ctx context.Context) error {
	_, err := r.Do(ctx, "SAVE")
	return err
}

// Restart kills the server (SIGKILL, a crash: no final snapshot) and starts
// it again on the same port and directory. What it comes back with depends
// on the Persistence: the last Save, nothing, or every write.
func (r *Redis) Restart(ctx context.Context) error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	_ = cmd.Process.Kill()
	<-done
	return r.start(ctx)
}

// Dir is the server's data directory.
func (r *Redis) Dir() string { return r.dir }

// Close stops the server and removes its directory.
func (r *Redis) Close() error {
	var err error
	r.once.Do(func() {
		r.mu.Lock()
		cmd, done := r.cmd, r.done
		r.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Kill()
			<-done
		}
		err = os.RemoveAll(r.dir)
	})
	return err
}
