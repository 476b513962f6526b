package driversuite

import (
	"bytes"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	// The rewritten suite imports conntag: its dependencies must be in
	// this module's go.sum.
	_ "github.com/holdtime/holdtime/conntag"
	"github.com/holdtime/holdtime/testenv"
)

// driverModule is the driver whose suite runs: the version holdtime's
// go.mod requires.
const driverModule = "github.com/go-sql-driver/mysql"

// exceptions are the driver's tests that cannot pass through any wrapper,
// with the reason: they take the connection (*sql.Conn).Raw hands them and
// assert it is the driver's own *mysqlConn, to read its unexported fields.
// conntag hands over its connection there (with the driver's interfaces;
// conntag.Unwrap reaches the driver's). A failed assertion panics and would
// end the whole test binary, so they are skipped in the conntag run.
var exceptions = map[string]string{
	"TestPing":                 "Raw: conn.(*mysqlConn), then reads c.result",
	"TestQueryMultipleResults": "Raw: conn.(*mysqlConn), then reads c.result",
}

// environment are the driver's tests skipped in both runs: they fail here
// as-is, for reasons of the machine, not of the driver or conntag.
var environment = map[string]string{
	"TestConnectorReturnsTimeout": "dials 1.1.1.1:1234 expecting a dial timeout; where that address answers, the driver logs through the test's nil Logger and the whole binary panics",
}

func TestMain(m *testing.M) { testenv.Main(m) }

// TestDriverSuiteThroughConntag runs the suite as-is and through conntag on
// one server, each run on its own database, with the general log on.
func TestDriverSuiteThroughConntag(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the driver's whole suite twice")
	}
	dir := moduleDir(t)
	modfile := rewriteSuite(t, dir)

	target := testenv.Shared(t)
	admin := target.Admin()
	for _, q := range []string{"SET GLOBAL log_output = 'TABLE'", "SET GLOBAL general_log = 'ON'"} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec("SET GLOBAL general_log = 'OFF'") })

	plain := runSuite(t, target, "", skipPattern(environment))
	wrapped := runSuite(t, target, modfile, skipPattern(environment, exceptions))

	// Every test that passes as-is passes through conntag. One that does
	// not is run again through conntag on its own, once: some of the
	// suite's tests (TestConcurrent opens hundreds of connections) fail now
	// and then on a loaded machine in either run.
	var passedBoth int
	var again []string
	for name, res := range plain.results {
		if res != "pass" || exceptions[topLevel(name)] != "" {
			continue
		}
		if wrapped.results[name] == "pass" {
			passedBoth++
		} else {
			again = append(again, name)
		}
	}
	if len(again) > 0 {
		sort.Strings(again)
		tops := map[string]string{}
		for _, name := range again {
			tops[topLevel(name)] = "again"
		}
		t.Logf("through conntag, %d tests that passed as-is did not: %v; running them again", len(again), again)
		retry := runSuite(t, target, modfile, skipPattern(environment, exceptions), "-run", skipPattern(tops))
		for _, name := range again {
			if got := retry.results[name]; got != "pass" {
				t.Errorf("%s passes as-is, through conntag: %q, and %q again", name, wrapped.results[name], got)
			} else {
				passedBoth++
			}
		}
	}
	for name := range exceptions {
		if plain.results[name] == "" {
			t.Errorf("exception %s is not a test of the suite (stale list?)", name)
		}
	}
	t.Logf("as-is: %d tests and subtests passed; through conntag %d of them passed too, the others are the %d exceptions' own",
		count(plain.results, "pass"), passedBoth, len(exceptions))

	// What was prepared through conntag was prepared as-is too, as often.
	prepPlain, prepWrapped := plain.log.prepared(), wrapped.log.prepared()
	for text, n := range prepWrapped {
		if n > prepPlain[text] {
			t.Errorf("prepared %d times through conntag, %d times as-is: %.200q", n, prepPlain[text], text)
		}
	}
	tagged, total := wrapped.log.tagged()
	if tagged == 0 {
		t.Error("no statement of the conntag run reached the server tagged")
	}
	t.Logf("general log: as-is %d statements (%d prepares), through conntag %d (%d prepares), %d of them tagged",
		len(plain.log), sum(prepPlain), total, sum(prepWrapped), tagged)
}

// moduleDir is the driver's source in the module cache.
func moduleDir(t *testing.T) string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", driverModule).Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Fatalf("go list -m %s: %v (run go mod download in internal/driversuite)", driverModule, err)
	}
	return dir
}

// rewriteSuite copies the driver's module with every sql.Open and
// sql.OpenDB call of its _test.go files turned into conntag's, and returns
// a go.mod for this module that replaces the driver by the copy (go test
// -modfile; the module cache itself is read-only to overlays).
func rewriteSuite(t *testing.T, dir string) string {
	tmp := t.TempDir()
	copyDir := filepath.Join(tmp, "mysql")
	if err := os.Mkdir(copyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var calls, files int
	for _, e := range entries {
		if e.IsDir() {
			continue // testdata of its own: none in v1.10.1
		}
		src, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), "_test.go") {
			out, n, err := rewriteFile(src)
			if err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
			if n > 0 {
				src, calls, files = out, calls+n, files+1
			}
		}
		if err := os.WriteFile(filepath.Join(copyDir, e.Name()), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if calls < 10 {
		t.Fatalf("rewrote only %d sql.Open/OpenDB calls; has the suite changed?", calls)
	}
	t.Logf("rewrote %d sql.Open/sql.OpenDB calls in %d files", calls, files)

	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(wd, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(wd, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	// Relative replacements (holdtime => ../..) stay relative to this
	// module's directory, where go test runs.
	modfile := filepath.Join(tmp, "suite.mod")
	mod = append(mod, "\nreplace "+driverModule+" => "+copyDir+"\n"...)
	if err := os.WriteFile(modfile, mod, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "suite.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	return modfile
}

// rewriteFile turns sql.Open( and sql.OpenDB( calls into conntag's and
// imports conntag. database/sql stays imported (and used, by a blank
// reference) for the rest of the file.
func rewriteFile(src []byte) ([]byte, int, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return nil, 0, err
	}
	full, err := parser.ParseFile(fset, "", src, 0)
	if err != nil {
		return nil, 0, err
	}
	var offs []int // offsets of the "sql" identifier in sql.Open/sql.OpenDB calls
	ast.Inspect(full, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == "sql" && (sel.Sel.Name == "Open" || sel.Sel.Name == "OpenDB") {
			offs = append(offs, fset.Position(id.Pos()).Offset)
		}
		return true
	})
	if len(offs) == 0 {
		return src, 0, nil
	}
	var out bytes.Buffer
	last := 0
	for _, o := range offs {
		out.Write(src[last:o])
		out.WriteString("conntag")
		last = o + len("sql")
	}
	out.Write(src[last:])
	res := out.Bytes()
	// The import goes in front of the first import declaration; the blank
	// reference keeps database/sql used.
	imp := fset.Position(f.Imports[0].Pos()).Offset
	lineStart := bytes.LastIndexByte(res[:imp], '\n') + 1
	res = append(res[:lineStart:lineStart], append([]byte("\t\"github.com/holdtime/holdtime/conntag\"\n"), res[lineStart:]...)...)
	res = append(res, "\nvar _ = sql.ErrNoRows\n"...)
	return res, len(offs), nil
}

// run is one run of the suite: each test's outcome, and what the server
// logged meanwhile.
type run struct {
	results map[string]string // test name -> pass, fail, skip
	log     generalLog
}

func runSuite(t *testing.T, target *testenv.Target, modfile, skip string, extra ...string) run {
	ctx := context.Background()
	hint := "plain"
	if modfile != "" {
		hint = "conntag"
	}
	db, err := target.CreateDatabase(ctx, hint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Drop(context.Background()) })
	cfg := db.Config()

	var from time.Time
	if err := target.Admin().QueryRow("SELECT NOW(6)").Scan(&from); err != nil {
		t.Fatal(err)
	}
	args := []string{"test", "-count=1", "-json", "-timeout", "10m"}
	if modfile != "" {
		args = append(args, "-modfile", modfile)
	}
	if skip != "" {
		args = append(args, "-skip", skip)
	}
	args = append(args, extra...)
	// The benchmarks' setup is not run: only tests.
	args = append(args, driverModule)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(),
		"MYSQL_TEST_USER="+cfg.User, "MYSQL_TEST_PASS="+cfg.Passwd,
		"MYSQL_TEST_PROT="+cfg.Net, "MYSQL_TEST_ADDR="+cfg.Addr,
		"MYSQL_TEST_DBNAME="+db.Name, "MYSQL_TEST_CONCURRENT=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	results := map[string]string{}
	output := map[string]*strings.Builder{}
	for _, line := range bytes.Split(out, []byte("\n")) {
		var ev struct{ Action, Test, Output string }
		if json.Unmarshal(line, &ev) != nil || ev.Test == "" {
			continue
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			results[ev.Test] = ev.Action
		case "output":
			if output[ev.Test] == nil {
				output[ev.Test] = new(strings.Builder)
			}
			output[ev.Test].WriteString(ev.Output)
		}
	}
	if len(results) == 0 {
		t.Fatalf("go %s: no test ran (%v): %s", strings.Join(args, " "), runErr, tail(stderr.String()+string(out), 3000))
	}
	if runErr != nil {
		t.Logf("%s run: go test exited with %v (compared per test below)", hint, runErr)
		for name, res := range results {
			if res == "fail" && output[name] != nil {
				t.Logf("%s failed in the %s run:\n%s", name, hint, tail(output[name].String(), 2000))
			}
		}
	}
	var to time.Time
	if err := target.Admin().QueryRow("SELECT NOW(6)").Scan(&to); err != nil {
		t.Fatal(err)
	}
	return run{results: results, log: readLog(t, target, from, to)}
}

// generalLog is what the server logged during a run: command and text.
type generalLog []struct{ command, text string }

func readLog(t *testing.T, target *testenv.Target, from, to time.Time) generalLog {
	var adminThread int64
	if err := target.Admin().QueryRow("SELECT CONNECTION_ID()").Scan(&adminThread); err != nil {
		t.Fatal(err)
	}
	rows, err := target.Admin().Query(`SELECT command_type, CONVERT(argument USING utf8mb4) FROM mysql.general_log
		WHERE event_time BETWEEN ? AND ? AND command_type IN ('Query', 'Prepare', 'Execute')`, from, to)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var l generalLog
	var seen int
	for rows.Next() {
		seen++
		var e struct{ command, text string }
		if err := rows.Scan(&e.command, &e.text); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(e.text, "mysql.general_log") || e.text == "SELECT NOW(6)" || e.text == "SELECT CONNECTION_ID()" {
			continue // this test's own look at the log
		}
		l = append(l, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		var all int
		target.Admin().QueryRow("SELECT COUNT(*) FROM mysql.general_log").Scan(&all)
		t.Fatalf("the general log has no statement between %v and %v (%d in all)", from, to, all)
	}
	return l
}

var (
	tagComment = regexp.MustCompile(` /\* conn_tag:[A-Za-z0-9_.:-]+ \*/`)
	// The suite names each test's table test_<16 hex digits>, anew each run.
	tableName = regexp.MustCompile(`\btest_[0-9a-f]{16}\b`)
)

// prepared counts the prepared texts, without conntag's comment.
func (l generalLog) prepared() map[string]int {
	m := map[string]int{}
	for _, e := range l {
		if e.command == "Prepare" {
			m[tableName.ReplaceAllString(tagComment.ReplaceAllString(e.text, ""), "test_…")]++
		}
	}
	return m
}

// tagged counts the queries and prepares that carry conntag's comment.
func (l generalLog) tagged() (tagged, total int) {
	for _, e := range l {
		if e.command == "Execute" {
			continue
		}
		total++
		if tagComment.MatchString(e.text) {
			tagged++
		}
	}
	return tagged, total
}

func skipPattern(sets ...map[string]string) string {
	var names []string
	for _, m := range sets {
		names = append(names, sortedKeys(m)...)
	}
	return "^(" + strings.Join(names, "|") + ")$"
}

func topLevel(name string) string { top, _, _ := strings.Cut(name, "/"); return top }

func sortedKeys(m map[string]string) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func count(m map[string]string, v string) (n int) {
	for _, x := range m {
		if x == v {
			n++
		}
	}
	return n
}

func sum(m map[string]int) (n int) {
	for _, x := range m {
		n += x
	}
	return n
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
