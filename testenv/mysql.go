package testenv

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdtime/holdtime/internal/doctor"
)

// ErrNotInstalled is returned when the binary a function needs is not
// installed. The error wrapping it names the binary and the install command.
var ErrNotInstalled = errors.New("not installed")

// Flavor is the kind of MySQL-compatible server.
type Flavor string

const (
	MariaDB Flavor = "mariadb"
	MySQL   Flavor = "mysql"
)

// dirPrefix names every directory StartMySQL creates, so that a later run can
// find and reap what a killed run left behind.
const dirPrefix = "holdtime-mysql-"

// MySQLOptions configures StartMySQL. The zero value is ready to use.
type MySQLOptions struct {
	// Binary is the server binary (mariadbd or mysqld). Default: the first
	// one found on PATH or in the usual sbin folders.
	Binary string
	// ExtraArgs are appended to the server's command line, for example
	// "--innodb-lock-wait-timeout=2".
	ExtraArgs []string
	// NoCache initialises a fresh data directory instead of copying the
	// cached template. Default: the HOLDTIME_TESTENV_NOCACHE variable.
	NoCache bool
	// Timeout bounds the start. Default 60 s.
	Timeout time.Duration
}

// MySQLServer is a running throwaway server.
type MySQLServer struct {
	Flavor  Flavor
	Version string // as the binary reports it, e.g. "10.11.19-MariaDB"
	Addr    string // 127.0.0.1:port
	Socket  string // unix socket path

	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	once sync.Once
}

// binaryInfo is what we learn from running the binary with --version.
type binaryInfo struct {
	path    string
	flavor  Flavor
	version string
	major   int
	minor   int
}

var searchDirs = []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin", "/usr/libexec", "/opt/mysql/bin"}

const installHint = "install one with `sudo apt-get install -y mariadb-server` (Debian/Ubuntu), " +
	"or set HOLDTIME_MYSQL_DSN=user:pass@tcp(host:3306)/ to use an existing server"

// findMySQL locates a supported server binary.
func findMySQL(explicit string) (binaryInfo, error) {
	var candidates []string
	if explicit != "" {
		candidates = []string{explicit}
	} else {
		for _, name := range []string{"mariadbd", "mysqld"} {
			if p, err := exec.LookPath(name); err == nil {
				candidates = append(candidates, p)
			}
			for _, d := range searchDirs {
				candidates = append(candidates, filepath.Join(d, name))
			}
		}
	}
	var tried []string
	for _, c := range candidates {
		if st, err := os.Stat(c); err != nil || st.IsDir() {
			continue
		}
		info, err := inspectBinary(c)
		if err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return info, nil
	}
	if len(tried) > 0 {
		return binaryInfo{}, fmt.Errorf("testenv: no supported MySQL-compatible server (%s): %w; %s",
			strings.Join(tried, "; "), ErrNotInstalled, installHint)
	}
	return binaryInfo{}, fmt.Errorf("testenv: no mariadbd or mysqld on PATH or in %s: %w; %s",
		strings.Join(searchDirs, ", "), ErrNotInstalled, installHint)
}

var versionRe = regexp.MustCompile(`Ver\s+(\d+)\.(\d+)\.(\d+)(\S*)`)

func inspectBinary(path string) (binaryInfo, error) {
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return binaryInfo{}, fmt.Errorf("%s --version: %v", path, err)
	}
	m := versionRe.FindSubmatch(out)
	if m == nil {
		return binaryInfo{}, fmt.Errorf("%s --version: unrecognised output %q", path, bytes.TrimSpace(out))
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	info := binaryInfo{path: path, flavor: MySQL, major: major, minor: minor,
		version: string(m[1]) + "." + string(m[2]) + "." + string(m[3]) + string(m[4])}
	if bytes.Contains(out, []byte("MariaDB")) {
		info.flavor = MariaDB
	}
	switch {
	case info.flavor == MariaDB && (major < 10 || major == 10 && minor < 6):
		return binaryInfo{}, fmt.Errorf("%s is MariaDB %s, need >= 10.6", path, info.version)
	case info.flavor == MySQL && major < 8:
		return binaryInfo{}, fmt.Errorf("%s is MySQL %s, need >= 8.0", path, info.version)
	}
	return info, nil
}

// StartMySQL starts a throwaway server and waits until it answers. The
// caller must Close it.
func StartMySQL(ctx context.Context, opts MySQLOptions) (*MySQLServer, error) {
	info, err := findMySQL(opts.Binary)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(opts.Timeout, 60*time.Second))
	defer cancel()
	reapLeftovers()

	noCache := opts.NoCache || os.Getenv("HOLDTIME_TESTENV_NOCACHE") != ""
	// A port picked by listening on :0 can be taken by someone else before
	// the server binds it; a start that loses that race is retried.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := startOnce(ctx, info, opts, noCache)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

var errPortTaken = errors.New("port taken")

func startOnce(ctx context.Context, info binaryInfo, opts MySQLOptions, noCache bool) (_ *MySQLServer, err error) {
	dir, err := newRunDir(socketSafeTempDir(), dirPrefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	data := filepath.Join(dir, "data")
	if noCache {
		err = initDataDir(ctx, info, data)
	} else {
		var tmpl string
		if tmpl, err = templateDir(ctx, info); err == nil {
			err = copyDir(tmpl, data)
		}
	}
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("testenv: free port: %w", err)
	}
	s := &MySQLServer{
		Flavor:  info.flavor,
		Version: info.version,
		Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Socket:  filepath.Join(dir, "mysql.sock"),
		dir:     dir,
		done:    make(chan struct{}),
	}
	args := append(serverArgs(info, dir, port), opts.ExtraArgs...)
	s.cmd = exec.Command(info.path, args...)
	setDeathSignal(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("testenv: start %s: %w", info.path, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx); err != nil {
		s.kill()
		logTail := s.errorLogTail()
		if strings.Contains(logTail, "already in use") {
			return nil, fmt.Errorf("testenv: %w: %s", errPortTaken, s.Addr)
		}
		return nil, fmt.Errorf("testenv: %s %s did not come up: %w\n%s", info.flavor, info.version, err, logTail)
	}
	return s, nil
}

func serverArgs(info binaryInfo, dir string, port int) []string {
	args := []string{
		"--no-defaults",
		"--datadir=" + filepath.Join(dir, "data"),
		"--socket=" + filepath.Join(dir, "mysql.sock"),
		"--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(dir, "error.log"),
		"--tmpdir=" + dir,
		"--skip-name-resolve",
		"--max-connections=1000",
		// A burst of as many connects as max_connections is queued, not
		// dropped: with the default (250 here) a loaded machine overflowed
		// the listen queue, and connects stalled until TCP keepalive reset
		// them 15 s later (the driver suite's TestConcurrent).
		"--back-log=1000",
		"--character-set-server=utf8mb4",
		"--innodb-buffer-pool-size=256M",
		"--innodb-flush-log-at-trx-commit=2",
		"--innodb-doublewrite=0",
	}
	// What holdtime needs from a server, exactly the setup list users are
	// given (README, holdtime doctor), and nothing more of holdtime's: a
	// test that passes here passes on a server set up as documented.
	args = append(args, doctor.ServerArgs()...)
	if info.flavor == MySQL {
		args = append(args, "--disable-log-bin", "--mysqlx=OFF")
		if info.major > 8 || info.major == 8 && info.minor >= 4 {
			// ProxySQL 2.x logs in to backends with mysql_native_password,
			// off by default since MySQL 8.4.
			args = append(args, "--mysql-native-password=ON")
		}
	} else {
		args = append(args, "--innodb-log-file-size="+mariadbLogFileSize)
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	return args
}

// mariadbLogFileSize is used at initialisation and at start, so the server
// never resizes the redo log while a test waits.
const mariadbLogFileSize = "64M"

// socketSafeTempDir is os.TempDir unless that is too long for a unix socket
// path (108 bytes on Linux, with room for our folder and file names), then
// /tmp.
func socketSafeTempDir() string {
	if d := os.TempDir(); len(d) <= 60 {
		return d
	}
	return "/tmp"
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls the unix socket until the server answers, the process
// exits, or ctx ends. Root can log in over the socket without a password on
// a fresh data directory; the bootstrap also makes root@127.0.0.1 for TCP.
func (s *MySQLServer) waitReady(ctx context.Context) error {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "unix"
	cfg.Addr = s.Socket
	cfg.Timeout = time.Second
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		pingCtx, cancel := context.WithTimeout(ctx, time.Second)
		err := db.PingContext(pingCtx)
		cancel()
		if err == nil {
			return bootstrap(ctx, db)
		}
		select {
		case <-s.done:
			return fmt.Errorf("server exited during start (%v)", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("no answer on %s: %w (last error: %v)", s.Socket, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// bootstrap makes sure root can connect over TCP from 127.0.0.1 without a
// password. MariaDB's install creates that account; MySQL's does not.
func bootstrap(ctx context.Context, db *sql.DB) error {
	stmts := []string{
		"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''",
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("bootstrap %q: %w", q, err)
		}
	}
	return nil
}

// DSN returns a go-sql-driver/mysql DSN for root over TCP, using database
// dbName (may be empty).
func (s *MySQLServer) DSN(dbName string) string { return s.Config(dbName).FormatDSN() }

// Config returns a new driver config for root over TCP, using dbName.
func (s *MySQLServer) Config(dbName string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = s.Addr
	cfg.DBName = dbName
	cfg.ParseTime = true
	return cfg
}

// Dir is the server's private directory (data, socket, error log).
func (s *MySQLServer) Dir() string { return s.dir }

// Close stops the server and removes its directory. The data is thrown away,
// so the server is killed rather than shut down cleanly: that is faster and
// exercises nothing the tests care about.
func (s *MySQLServer) Close() error {
	var err error
	s.once.Do(func() {
		s.kill()
		err = os.RemoveAll(s.dir)
	})
	return err
}

func (s *MySQLServer) kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.done
}

func (s *MySQLServer) errorLogTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "error.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
