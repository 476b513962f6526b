package collector

import (
	"strings"
	"testing"
)

// TestDownFixNamesTheSourcesOwnEndpoint: what to do about a source that is
// down names the endpoint that source reads. The locks source reads the
// MySQL server; its fix talked about ProxySQL's admin DSN (issue 25).
func TestDownFixNamesTheSourcesOwnEndpoint(t *testing.T) {
	failures := []Failure{FailureRefused, FailureUnknownHost, FailureNoSocket, FailureTimeout, FailureNotMySQL,
		FailureClosed, FailureAccessDenied, FailureUnknownDB, FailurePrivilege, FailureOther}
	for _, s := range []Source{SourceMySQL, SourceMySQLLocks} {
		for _, f := range failures {
			fix := downFix(s, f)
			if strings.Contains(fix, "ProxySQL") || !strings.Contains(fix, "MySQL server") {
				t.Errorf("%s %s: %q, want the MySQL server's DSN named", s, f, fix)
			}
		}
		if fix := downFix(s, FailurePrivilege); !strings.Contains(fix, "GRANT PROCESS") {
			t.Errorf("%s missing privilege: %q, want the grant", s, fix)
		}
	}
	for _, s := range []Source{SourceProxySQLProcesslist, SourceProxySQLDigest, SourceProxySQLPool} {
		for _, f := range failures {
			if fix := downFix(s, f); strings.Contains(fix, "MySQL server") || !strings.Contains(fix, "ProxySQL's admin DSN") {
				t.Errorf("%s %s: %q, want ProxySQL's admin DSN named", s, f, fix)
			}
		}
	}
}
