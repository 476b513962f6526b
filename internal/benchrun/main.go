// Command benchrun is `make bench`: it runs holdtime's side-by-side
// benchmarks in interleaved rounds and writes BENCHMARKS.md, every figure a
// ratio (or a difference) against its baseline measured in the same run,
// with its spread over the rounds, the machine and the command.
//
//	go run ./internal/benchrun              # 3 rounds, writes BENCHMARKS.md
//	go run ./internal/benchrun -rounds 1 -quick -out /tmp/b.md
//
// Each round runs every suite once, the suites' order rotating from round
// to round, so that a burst of load from a neighbour on a shared machine
// falls on different suites each round instead of on one variant. Inside
// the reservation suites the variants are interleaved once more, slice by
// slice (see reservation's interleave). The test binaries are built once,
// before the first round.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
}

// suite is one benchmark invocation of one test binary.
type suite struct {
	name      string
	module    string // the module's directory, relative to the repository root
	pkg       string // the package, relative to the module
	bench     string // -test.bench
	benchtime string // -test.benchtime
	quick     string // -test.benchtime with -quick
	oneCPU    bool   // run pinned to one CPU (taskset -c 0), the client and its server alike
	// count repeats the benchmarks within a round (-test.count): a
	// microbenchmark's least disturbed run of a round is its figure there
	// (see results.get).
	count int
}

var suites = []suite{
	{name: "conntag, stub driver", module: ".", pkg: "./conntag", bench: "^BenchmarkStatementInterleaved$", benchtime: "30x", quick: "10x"},
	{name: "conntag vs otelsql, stub driver", module: "internal/benchcmp", pkg: ".", bench: "^BenchmarkOverhead$", benchtime: "100000x", quick: "30000x", count: 5},
	{name: "conntag, hold spans", module: ".", pkg: "./conntag", bench: "^BenchmarkHoldSpans$", benchtime: "20x", quick: "5x"},
	{name: "conntag, loopback", module: ".", pkg: "./conntag", bench: "^BenchmarkLoopback$", benchtime: "20000x", quick: "4000x", oneCPU: true},
	{name: "reservation: engine vs baselines", module: ".", pkg: "./reservation", bench: "^BenchmarkEngineVsMinimal$", benchtime: "1200x", quick: "300x"},
	{name: "reservation: refill convoy", module: ".", pkg: "./reservation", bench: "^BenchmarkRefillConvoy$", benchtime: "2000x", quick: "600x"},
	{name: "reservation: claims and releases", module: ".", pkg: "./reservation", bench: "^(BenchmarkClaim|BenchmarkReleaseGroup)$", benchtime: "3000x", quick: "600x"},
	{name: "collector: 10,000-session snapshot", module: ".", pkg: "./collector", bench: "^BenchmarkProcesslistSnapshot$", benchtime: "100x", quick: "50x", count: 3},
	{name: "collector: processlist sample with extended_info", module: ".", pkg: "./collector", bench: "^BenchmarkProcesslistExtended$", benchtime: "3x", quick: "1x"},
	{name: "analyze: events log", module: ".", pkg: "./collector", bench: "^BenchmarkEventsLog$", benchtime: "10x", quick: "5x", count: 3},
	{name: "collector, fleet: app figures from counters", module: ".", pkg: "./collector/internal/otlp", bench: "^BenchmarkAppFigures$", benchtime: "200x", quick: "40x", count: 3},
	{name: "collector, fleet: 100 light targets", module: ".", pkg: "./deploy", bench: "^BenchmarkFleetPolling$", benchtime: "20x", quick: "5x"},
	{name: "collector, fleet: span rate by targets", module: ".", pkg: "./collector/internal/otlp", bench: "^BenchmarkSpanRoute$", benchtime: "200x", quick: "40x", count: 3},
}

// results are one round's figures: benchmark name (without the -N
// GOMAXPROCS suffix) to unit to the values of its runs in the round.
type results map[string]map[string][]float64

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("benchrun", flag.ContinueOnError)
	rounds := fs.Int("rounds", 3, "interleaved rounds of every suite")
	quick := fs.Bool("quick", false, "fewer iterations per benchmark (a smoke run: wider spread)")
	out := fs.String("out", "BENCHMARKS.md", "the report to write")
	only := fs.String("only", "", "run only the suites whose name contains this")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: need at least 1", *rounds)
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	todo := slices.DeleteFunc(slices.Clone(suites), func(s suite) bool { return !strings.Contains(s.name, *only) })
	if len(todo) == 0 {
		return fmt.Errorf("-only %q matches no suite", *only)
	}
	tmp, err := os.MkdirTemp("", "holdtime-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	m := machineOf(ctx)
	started := time.Now()
	bins := map[string]string{}
	var failures []string
	for _, s := range todo {
		key := s.module + "|" + s.pkg
		if bins[key] != "" {
			continue
		}
		bin := filepath.Join(tmp, strings.NewReplacer("/", "_", ".", "_", "|", "_").Replace(key)+".test")
		fmt.Fprintf(stdout, "build %s %s\n", s.module, s.pkg)
		cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, s.pkg)
		cmd.Dir = filepath.Join(root, s.module)
		cmd.Stdout = stdout
		var errs bytes.Buffer
		cmd.Stderr = io.MultiWriter(os.Stderr, &errs)
		if err := cmd.Run(); err != nil {
			// The other suites still run; the report says what was not measured and why.
			failures = append(failures, fmt.Sprintf("build %s (module %s): %v\n%s", s.pkg, s.module, err, tail(errs.String(), 2000)))
			bins[key] = "-"
			continue
		}
		bins[key] = bin
	}
	todo = slices.DeleteFunc(todo, func(s suite) bool { return bins[s.module+"|"+s.pkg] == "-" })
	all := make([]results, *rounds)
	for r := range *rounds {
		all[r] = results{}
		for k := range todo {
			s := todo[(r+k)%len(todo)]
			fmt.Fprintf(stdout, "round %d/%d: %s\n", r+1, *rounds, s.name)
			bt := s.benchtime
			if *quick {
				bt = s.quick
			}
			argv := []string{bins[s.module+"|"+s.pkg], "-test.run", "^$", "-test.bench", s.bench,
				"-test.benchtime", bt, "-test.benchmem", "-test.count", strconv.Itoa(max(s.count, 1))}
			if s.oneCPU {
				if tp, err := exec.LookPath("taskset"); err == nil {
					argv = append([]string{tp, "-c", "0"}, argv...)
				}
			}
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Dir = filepath.Join(root, s.module, s.pkg)
			// Two buffers: exec copies stdout and stderr in two goroutines,
			// and a bytes.Buffer is not safe for concurrent writes.
			var buf, errs bytes.Buffer
			progress, flushed := lineFilter(stdout)
			cmd.Stdout = io.MultiWriter(&buf, progress)
			cmd.Stderr = &errs
			err := cmd.Run()
			progress.Close()
			<-flushed
			parse(&buf, all[r])
			if err != nil {
				failures = append(failures, fmt.Sprintf("round %d, %s: %v\n%s", r+1, s.name, err, tail(buf.String()+errs.String(), 2000)))
				fmt.Fprintf(stdout, "  failed: %v\n", err)
			}
		}
	}
	m.loadEnd = loadavg()
	m.took = time.Since(started).Round(time.Second)
	cmdline := "make bench"
	if len(args) > 0 {
		cmdline = "go run ./internal/benchrun " + strings.Join(args, " ")
	}
	report := render(m, cmdline, *rounds, *quick, all, failures)
	path := *out
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s)\n", path, m.took)
	if len(failures) > 0 {
		return fmt.Errorf("%d benchmark runs failed (see %s)", len(failures), path)
	}
	return nil
}

// lineFilter returns a writer that passes only benchmark result lines to
// w (the progress a user sees while a round runs), and a channel closed
// once everything written before Close has been passed on.
func lineFilter(w io.Writer) (io.WriteCloser, <-chan struct{}) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "Benchmark") {
				fmt.Fprintln(w, "  "+shorten(sc.Text(), 160))
			}
		}
		io.Copy(io.Discard, pr)
	}()
	return pw, done
}

func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + " …"
	}
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// benchLine is a result line of go test -bench: the name, its -N suffix,
// the iterations, then value-unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

// parse adds the result lines in r to res.
func parse(r io.Reader, res results) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		units := res[m[1]]
		if units == nil {
			units = map[string][]float64{}
			res[m[1]] = units
		}
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			units[f[i+1]] = append(units[f[i+1]], v)
		}
	}
}

// repoRoot is the directory of the holdtime module.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run benchrun inside the holdtime repository (make bench)")
	}
	return filepath.Dir(mod), nil
}

// machine is what the report says about where it ran.
type machine struct {
	cpu, cores, memory, kernel, goVersion, server, loadStart, loadEnd string
	took                                                              time.Duration
	date                                                              time.Time
}

func machineOf(ctx context.Context) machine {
	m := machine{cores: strconv.Itoa(runtime.NumCPU()), date: time.Now().UTC(), loadStart: loadavg(), goVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]); len(f) >= 2 {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				m.memory = fmt.Sprintf("%.0f GiB", kb/(1<<20))
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "uname", "-sr").Output(); err == nil {
		m.kernel = strings.TrimSpace(string(out))
	}
	for _, bin := range []string{"mariadbd", "mysqld"} {
		if p, err := exec.LookPath(bin); err == nil {
			if out, err := exec.CommandContext(ctx, p, "--version").Output(); err == nil {
				m.server = strings.TrimSpace(string(out))
				break
			}
		}
	}
	if dsn := os.Getenv("HOLDTIME_MYSQL_DSN"); dsn != "" {
		m.server = "the server of HOLDTIME_MYSQL_DSN"
	}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
