package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"
)

// minTokenLen is the shortest bearer token collect takes: anything shorter
// is guessable from the network.
const minTokenLen = 16

// checkToken says whether token can be a bearer token, without quoting it.
func checkToken(flag, token string) error {
	if len(token) < minTokenLen {
		return fmt.Errorf("--%s: give at least %d characters (`openssl rand -hex 16` makes one)", flag, minTokenLen)
	}
	if strings.IndexFunc(token, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsGraphic(r) || unicode.IsSpace(r) }) >= 0 {
		return fmt.Errorf("--%s: a token is one word of printable ASCII characters, without spaces", flag)
	}
	return nil
}

// openPaths answer without a token: orchestrators' liveness and readiness
// probes, which tell whether sources are up and nothing of the tags.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true}

// requireToken serves h only to requests that carry Authorization: Bearer
// token, but for openPaths; the others get 401 with a message saying what
// to send, and never the token. Tokens are compared in constant time (as
// SHA-256 sums, so that not even the length leaks through timing).
func requireToken(token string, h http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if ok && subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			h.ServeHTTP(w, r)
			return
		}
		msg := "this collector requires a bearer token: send Authorization: Bearer TOKEN " +
			"(holdtime top --token or HOLDTIME_TOKEN; OTLP exporters: OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20TOKEN)"
		if ok {
			msg = "the bearer token sent is not this collector's: check --token / HOLDTIME_TOKEN on both sides"
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="holdtime"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	})
}

// loadTLS reads a certificate and its key for collect's listeners. Errors
// name the files, never their contents.
func loadTLS(certFile, keyFile string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, nil
	case certFile == "" || keyFile == "":
		return nil, errors.New("--tls-cert and --tls-key go together: give the certificate (PEM, chain included) and its private key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w: give a PEM certificate and the PEM private key that matches it", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// bearerTransport adds the collector's bearer token to every request.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change the caller's request
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// collectorHTTPClient is the client top reads a collector with: its token
// on every request, and caFile's certificates trusted for https besides
// the system's (a collector with a self-signed or private-CA certificate).
func collectorHTTPClient(token, caFile string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-cert: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-cert %s holds no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var rt http.RoundTripper = tr
	if token != "" {
		rt = bearerTransport{token: token, base: tr}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: rt}, nil
}
