package testenv

import (
	"errors"
	"os"
	"path/filepath"
)

// ProxySQL makes a CA, a certificate and a key in its datadir on first
// start when none are there: 2 to 4 seconds of RSA key generation on a
// loaded 2-core machine, most of a start. testenv keeps the first set it
// sees in a cache next to the MySQL templates and copies it into every new
// datadir; the files are throwaway test credentials for loopback only.
var proxysqlTLSFiles = []string{"proxysql-ca.pem", "proxysql-cert.pem", "proxysql-key.pem"}

func proxysqlTLSCache() (string, bool) {
	if os.Getenv("HOLDTIME_TESTENV_NOCACHE") != "" {
		return "", false
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "holdtime", "testenv", "proxysql-tls-v1"), true
}

// proxysqlTLSCached reports whether the cache has a set to copy.
func proxysqlTLSCached() bool {
	cache, ok := proxysqlTLSCache()
	if !ok {
		return false
	}
	_, err := os.Stat(filepath.Join(cache, "ready"))
	return err == nil
}

// seedProxySQLTLS copies the cached certificates into a new datadir, if
// there are any. Without them ProxySQL makes its own.
func seedProxySQLTLS(dir string) {
	if !proxysqlTLSCached() {
		return
	}
	cache, _ := proxysqlTLSCache()
	for _, f := range proxysqlTLSFiles {
		if err := copyFile(filepath.Join(cache, f), filepath.Join(dir, f)); err != nil {
			for _, f := range proxysqlTLSFiles {
				_ = os.Remove(filepath.Join(dir, f)) // a partial set: let ProxySQL make its own
			}
			return
		}
	}
}

// keepProxySQLTLS fills the cache from the datadir of a ProxySQL that is up
// (so its files are complete), when the cache is empty. Concurrent callers
// each build a private folder and rename it into place; the first wins.
func keepProxySQLTLS(dir string) {
	cache, ok := proxysqlTLSCache()
	if !ok {
		return
	}
	if _, err := os.Stat(filepath.Join(cache, "ready")); err == nil {
		return
	}
	root := filepath.Dir(cache)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return
	}
	tmp, err := os.MkdirTemp(root, "building-tls-")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	for _, f := range proxysqlTLSFiles {
		if err := copyFile(filepath.Join(dir, f), filepath.Join(tmp, f)); err != nil {
			return
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "ready"), nil, 0o644); err != nil {
		return
	}
	if err := os.Rename(tmp, cache); err != nil && !errors.Is(err, os.ErrExist) {
		// Lost the race, or a half-built folder without "ready" is in the way.
		if _, statErr := os.Stat(filepath.Join(cache, "ready")); statErr != nil {
			_ = os.RemoveAll(cache)
			_ = os.Rename(tmp, cache)
		}
	}
}
