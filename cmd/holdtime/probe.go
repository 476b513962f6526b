package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"

	"github.com/holdtime/holdtime/internal/termtext"
)

// probeDSNEnv holds the DSN of `probe mysql` when --dsn is not given, to
// keep the password off the command line.
const probeDSNEnv = "HOLDTIME_PROBE_DSN"

// probeCmd is a health check for images without a shell or a client (the
// distroless holdtime image): one request, one line of output, exit 0 when
// healthy and 1 otherwise.
type probeCmd struct {
	out io.Writer

	dsn     string
	query   string
	timeout time.Duration
}

func newProbeCmd() *cobra.Command {
	p := &probeCmd{}
	cmd := &cobra.Command{
		Use:   "probe URL|mysql",
		Short: "Health check: GET an http(s) URL, or run a query on a MySQL-protocol server; exit 0 when healthy",
		Long: `probe checks one thing once and exits 0 when it is healthy, 1 when it is not, with one
line saying why. It is the health check of the holdtime image, which has no shell and no
client, and works as well for any container it is copied into.

  probe URL     GET the http:// or https:// URL: healthy on a 2xx answer. The first line of
                any other answer is printed (the collector's /readyz names the sources down).
  probe mysql   connect with --dsn (or $` + probeDSNEnv + `) and run --query: healthy when the
                first column of the first row is neither NULL, empty nor 0.

Nothing takes longer than --timeout. No password is ever printed: a DSN is shown as
user@tcp(host:port), a URL with its password masked.`,
		Example: `  holdtime probe http://127.0.0.1:9479/readyz
  holdtime probe mysql --dsn 'monitor:secret@tcp(127.0.0.1:3306)/'
  ` + probeDSNEnv + `='stats:stats@tcp(127.0.0.1:6032)/' holdtime probe mysql \
      --query "SELECT COUNT(*) FROM stats_mysql_connection_pool WHERE status = 'ONLINE'"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p.out = cmd.OutOrStdout()
			ctx, cancel := context.WithTimeout(cmd.Context(), p.timeout)
			defer cancel()
			return p.run(ctx, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.dsn, "dsn", "", "probe mysql: the server, as a go-sql-driver/mysql DSN (default $"+probeDSNEnv+")")
	f.StringVar(&p.query, "query", "SELECT 1", "probe mysql: the query whose first column says healthy (not NULL, empty or 0)")
	f.DurationVar(&p.timeout, "timeout", 3*time.Second, "give up after this long, connecting included")
	return cmd
}

func (p *probeCmd) run(ctx context.Context, target string) error {
	if p.timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	if target == "mysql" {
		return p.mysql(ctx)
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Not echoed: a DSN given in the wrong place carries a password.
		return errors.New("probe wants an http:// or https:// URL, or the word mysql (with --dsn)")
	}
	return p.http(ctx, u)
}

func (p *probeCmd) http(ctx context.Context, u *url.URL) error {
	shown := u.Redacted()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", shown, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %s", shown, p.why(ctx, err))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if line := firstLine(string(body)); line != "" {
			return fmt.Errorf("probe %s: %s: %s", shown, resp.Status, line)
		}
		return fmt.Errorf("probe %s: %s", shown, resp.Status)
	}
	_, err = fmt.Fprintf(p.out, "ok %s: %s\n", shown, termtext.Line(resp.Status))
	return err
}

func (p *probeCmd) mysql(ctx context.Context) error {
	dsn := p.dsn
	if dsn == "" {
		dsn = os.Getenv(probeDSNEnv)
	}
	if dsn == "" {
		return errors.New("probe mysql needs --dsn user:pass@tcp(host:port)/ (or $" + probeDSNEnv + ")")
	}
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		// The parse error can quote the DSN, password included.
		return errors.New("probe mysql: --dsn is not a go-sql-driver/mysql DSN: use user:pass@tcp(host:port)/")
	}
	// The context (--timeout) bounds the probe and says "no answer within";
	// the read and write deadlines are a backstop set later, or their
	// "invalid connection" would race it and name the wrong failure.
	mc.Timeout, mc.ReadTimeout, mc.WriteTimeout = p.timeout, 2*p.timeout, 2*p.timeout
	// The driver logs some failures (a connection closed mid-handshake) on
	// its own: the probe says everything in its one line.
	mc.Logger = &mysql.NopLogger{}
	shown := fmt.Sprintf("%s@%s(%s)", mc.User, mc.Net, mc.Addr)
	scrub := func(err error) string {
		msg := p.why(ctx, err)
		if mc.Passwd != "" {
			msg = strings.ReplaceAll(msg, mc.Passwd, "xxx")
		}
		return msg
	}
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		return fmt.Errorf("probe mysql %s: %s", shown, scrub(err))
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	var v sql.NullString
	if err := db.QueryRowContext(ctx, p.query).Scan(&v); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("probe mysql %s: the query returned no row", shown)
		}
		return fmt.Errorf("probe mysql %s: %s", shown, scrub(err))
	}
	if !v.Valid || v.String == "" || v.String == "0" {
		got := "NULL"
		if v.Valid {
			got = fmt.Sprintf("%q", v.String)
		}
		return fmt.Errorf("probe mysql %s: the query returned %s, not healthy", shown, got)
	}
	_, err = fmt.Fprintf(p.out, "ok mysql %s: %s\n", shown, termtext.Line(firstLine(v.String)))
	return err
}

// why words a failed request: the timeout by name, otherwise the innermost
// error (net/http wraps it in a url.Error that repeats the URL).
func (p *probeCmd) why(ctx context.Context, err error) string {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %v (--timeout)", p.timeout)
	}
	if errors.Is(err, mysql.ErrInvalidConn) {
		return "the connection closed before the server answered: is this a MySQL-protocol port?"
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return firstLine(err.Error())
}

// firstLine keeps a message to one printable line of at most 200 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "..."
	}
	return strings.TrimSpace(s)
}
