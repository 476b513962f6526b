package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestTopTokenGoesOnlyWhereItBelongs: HOLDTIME_TOKEN is the collector's
// secret. With it exported (as the README has users do), a replay and
// direct polling still run, and a --prometheus URL never receives it:
// Prometheus gets its own --prometheus-token or nothing.
func TestTopTokenGoesOnlyWhereItBelongs(t *testing.T) {
	const secret = "collector-s3cret"
	t.Setenv("HOLDTIME_TOKEN", secret)

	_, _, errOut := runCLI(t, "top", "--replay", t.TempDir(), "--once")
	if strings.Contains(errOut, "are for --collector") {
		t.Errorf("a replay with HOLDTIME_TOKEN exported is refused: %s", errOut)
	}

	var mu sync.Mutex
	var auths []string
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer prom.Close()
	seen := func() string {
		mu.Lock()
		defer mu.Unlock()
		s := strings.Join(auths, "|")
		auths = nil
		return s
	}

	runCLI(t, "top", "--prometheus", prom.URL, "--once")
	if got := seen(); strings.Contains(got, secret) {
		t.Errorf("Prometheus received the collector's token: %q", got)
	}
	runCLI(t, "top", "--prometheus", prom.URL, "--prometheus-token", "prom-tok", "--once")
	if got := seen(); !strings.Contains(got, "Bearer prom-tok") || strings.Contains(got, secret) {
		t.Errorf("Prometheus received %q; want its own token and never the collector's", got)
	}
	code, _, errOut := runCLI(t, "top", "--prometheus", prom.URL, "--token", "x", "--once")
	if code == 0 || !strings.Contains(errOut, "--prometheus-token") {
		t.Errorf("--token with --prometheus: exit %d, %q; want a refusal naming --prometheus-token", code, errOut)
	}
}
