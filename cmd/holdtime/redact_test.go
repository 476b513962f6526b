package main

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	secrets := secretsIn([]string{
		"top", "--mysql", "db1=app:l0ng-secret@tcp(db:3306)/", "--collector=http://u:url%2Fpw@h:1",
		"short:ab@tcp(h)/",
	}, []string{"HOLDTIME_PROXYSQL=px=admin:env;secret@tcp(h:6032)/", "PATH=/bin", "OTHER=x:notours@tcp(h)/"})
	for _, want := range []string{"l0ng-secret", "url/pw", "url%2Fpw", "env;secret", "ab"} {
		found := false
		for _, s := range secrets {
			found = found || s == want
		}
		if !found {
			t.Errorf("secretsIn missed %q: %q", want, secrets)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{`unknown command "app:l0ng-secret@tcp(db:3306)/" for "holdtime"`, `unknown command "app:xxx@tcp(db:3306)/" for "holdtime"`},
		{`open x:an0ther@unix(/run/m.sock)/: no such file`, `open x:xxx@unix(/run/m.sock)/: no such file`},
		{`dial "u:p@ss@tcp(h:1)/db"`, `dial "u:xxx@tcp(h:1)/db"`},
		{`listen on :p@w@/: bad`, `listen on :xxx@/: bad`},
		{`at http://u:pw@host:1/x and https://tok@h/`, `at http://u:xxx@host:1/x and https://xxx@h/`},
		{`mkdir /dev/null/m:pw@tcp(h:1): no`, `mkdir /dev/null/m:xxx@tcp(h:1): no`},
		{`the secret is l0ng-secret, and env;secret too`, `the secret is xxx, and xxx too`},
		{`password ab alone is too short to look for`, `password ab alone is too short to look for`},
		{`Access denied for user 'app'@'10.0.0.1' (using password: YES)`, `Access denied for user 'app'@'10.0.0.1' (using password: YES)`},
		{`dial tcp 127.0.0.1:3306: connect: connection refused`, `dial tcp 127.0.0.1:3306: connect: connection refused`},
		{`e.g. px1=admin:pass@tcp(host:6032)/`, `e.g. px1=admin:pass@tcp(host:6032)/`},
	} {
		if got := redact(tc.in, secrets); got != tc.want {
			t.Errorf("redact(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
		if strings.Contains(redact(tc.in, secrets), "l0ng-secret") {
			t.Errorf("leak in %q", tc.in)
		}
	}
}
