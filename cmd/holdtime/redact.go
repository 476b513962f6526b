package main

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// minLiteralSecret is the shortest password redacted wherever it appears:
// a shorter one ("pw", "1") would garble every message that happens to
// contain it. Shorter passwords are still redacted where they sit in a DSN
// or URL, which is where a message can carry them.
const minLiteralSecret = 4

// dsnShaped matches a go-sql-driver/mysql DSN's user:password@ in running
// text: the password runs to the last @ that a network (tcp(, unix(...) or
// the database's / follows. A password starting with // is a URL's, which
// urlUserinfo handles.
var dsnShaped = regexp.MustCompile(`(^|[\s"'=(,\[{</])([^\s"'=(,\[{<:@/]*):(|[^/\s"'][^\s"']*|/[^/\s"'][^\s"']*|/)@([A-Za-z0-9_]*\(|/)`)

// placeholder is the password of the DSN examples in help and hints.
const placeholder = "pass"

// urlUserinfo matches the user:password@ of a URL.
var urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^\s/?#"'<>]*)@`)

// redact removes credentials from a message the CLI is about to print: the
// passwords given on the command line or in HOLDTIME_* variables wherever
// they appear, and any DSN-shaped or URL userinfo password.
func redact(msg string, secrets []string) string {
	for _, s := range secrets {
		if len(s) >= minLiteralSecret {
			msg = strings.ReplaceAll(msg, s, "xxx")
		}
	}
	msg = urlUserinfo.ReplaceAllStringFunc(msg, func(m string) string {
		sub := urlUserinfo.FindStringSubmatch(m)
		user, _, hasPass := strings.Cut(sub[2], ":")
		if !hasPass {
			return sub[1] + "xxx@" // a bare userinfo is a token
		}
		return sub[1] + user + ":xxx@"
	})
	return dsnShaped.ReplaceAllStringFunc(msg, func(m string) string {
		sub := dsnShaped.FindStringSubmatch(m)
		if sub[3] == placeholder {
			return m // an example of ours, not a secret
		}
		return sub[1] + sub[2] + ":xxx@" + sub[4]
	})
}

// secretsIn returns the passwords that args and the HOLDTIME_* environment
// carry: every value that parses as a DSN ([NAME=]DSN, --flag=DSN) or a URL
// with a password, longest first so that no shorter secret hides part of a
// longer one.
func secretsIn(args, environ []string) []string {
	var out []string
	add := func(v string) {
		for _, c := range candidates(v) {
			if mc, err := mysql.ParseDSN(c); err == nil && mc.Passwd != "" {
				out = append(out, mc.Passwd)
			}
			if u, err := url.Parse(c); err == nil && u.User != nil {
				if pw, ok := u.User.Password(); ok && pw != "" {
					out = append(out, pw, url.QueryEscape(pw))
				}
			}
		}
	}
	for i, a := range args {
		add(a)
		// A bearer token (collect --token, top --token) is a secret whole.
		if a == "--token" && i+1 < len(args) {
			out = append(out, args[i+1])
		} else if v, ok := strings.CutPrefix(a, "--token="); ok {
			out = append(out, v)
		}
	}
	for _, kv := range environ {
		name, v, _ := strings.Cut(kv, "=")
		if name == "HOLDTIME_TOKEN" {
			out = append(out, v)
		}
		if !strings.HasPrefix(name, "HOLDTIME_") {
			continue
		}
		add(v)
		for _, part := range strings.Split(v, ";") {
			add(strings.TrimSpace(part))
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// candidates are the ways v may hold a DSN or URL: whole, after a
// --flag=, after a NAME=.
func candidates(v string) []string {
	out := []string{v}
	if strings.HasPrefix(v, "-") {
		if _, rest, ok := strings.Cut(v, "="); ok {
			out = append(out, rest)
			v = rest
		}
	}
	if name, rest, ok := strings.Cut(v, "="); ok && !strings.ContainsAny(name, "@:/(") {
		out = append(out, rest)
	}
	return out
}

// processSecrets is secretsIn for this process's arguments and environment.
func processSecrets(args []string) []string { return secretsIn(args, os.Environ()) }
