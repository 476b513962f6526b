package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

const testToken = "holdtime-test-token-7f3a9c2e"

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// and returns their paths.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "holdtime test collector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func get(t *testing.T, hc *http.Client, method, url, token string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-protobuf")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// runTop runs `top --once` against url and returns its exit code and
// everything it printed.
func runTop(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"top", "--once"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.CombinedOutput()
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestCollectBearerTokenAndTLS: with a token, /v1/traces, the API and
// /metrics answer 401 without it (saying what to send), 200 with it; the
// probes stay open; top sends it from HOLDTIME_TOKEN; over TLS with a
// self-signed certificate top trusts it with --ca-cert. The token appears
// in no output, error or log.
func TestCollectBearerTokenAndTLS(t *testing.T) {
	bin := buildHoldtime(t)
	for _, withTLS := range []bool{false, true} {
		name := map[bool]string{false: "http", true: "https"}[withTLS]
		t.Run(name, func(t *testing.T) {
			args := []string{"collect", "--otlp", "--listen", "127.0.0.1:0"}
			hc := &http.Client{Timeout: 5 * time.Second}
			var topArgs []string
			if withTLS {
				cert, key := selfSigned(t)
				args = append(args, "--tls-cert", cert, "--tls-key", key)
				pemBytes, _ := os.ReadFile(cert)
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(pemBytes)
				hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
				topArgs = append(topArgs, "--ca-cert", cert)
			}
			t.Setenv("HOLDTIME_TOKEN", testToken)
			col := startHoldtime(t, bin, "serving on", args...)
			base := regexp.MustCompile(`https?://[0-9.:]+`).FindString(col.output())
			if want := name + "://"; !strings.HasPrefix(base, want) {
				t.Fatalf("serving on %q, want %s", base, want)
			}

			for _, path := range []string{"/api/v1/top", "/metrics"} {
				if code, body := get(t, hc, "GET", base+path, "", nil); code != 401 || !strings.Contains(body, "requires a bearer token") {
					t.Errorf("GET %s without a token: %d %s", path, code, body)
				}
				if code, body := get(t, hc, "GET", base+path, "not-the-token-at-all", nil); code != 401 || !strings.Contains(body, "not this collector's") {
					t.Errorf("GET %s with a wrong token: %d %s", path, code, body)
				}
				if code, body := get(t, hc, "GET", base+path, testToken, nil); code != 200 {
					t.Errorf("GET %s with the token: %d %s", path, code, body)
				}
			}
			// An empty ExportTraceServiceRequest is an empty protobuf message.
			if code, body := get(t, hc, "POST", base+"/v1/traces", "", []byte{}); code != 401 {
				t.Errorf("POST /v1/traces without a token: %d %s", code, body)
			}
			if code, body := get(t, hc, "POST", base+"/v1/traces", testToken, []byte{}); code != 200 {
				t.Errorf("POST /v1/traces with the token: %d %s", code, body)
			}
			if code, body := get(t, hc, "GET", base+"/healthz", "", nil); code != 200 {
				t.Errorf("/healthz without a token: %d %s (probes stay open)", code, body)
			}

			code, out := runTop(t, bin, nil, append([]string{"--collector", base}, topArgs...)...)
			if code != 0 || !strings.Contains(out, "sources:") {
				t.Errorf("top with HOLDTIME_TOKEN: exit %d: %s", code, out)
			}
			code, out = runTop(t, bin, []string{"HOLDTIME_TOKEN="}, append([]string{"--collector", base}, topArgs...)...)
			if code != 1 || !strings.Contains(out, "401") || !strings.Contains(out, "requires a bearer token") {
				t.Errorf("top without a token: exit %d: %s", code, out)
			}
			code, out = runTop(t, bin, nil, "--collector", base, "--token", testToken+"-wrong")
			if code != 1 || strings.Contains(out, testToken) {
				t.Errorf("top with a wrong token on its command line: exit %d, and the token must not be echoed: %s", code, out)
			}
			if withTLS {
				code, out = runTop(t, bin, nil, "--collector", base)
				if code != 1 || !strings.Contains(out, "certificate") {
					t.Errorf("top without --ca-cert trusted a self-signed collector: exit %d: %s", code, out)
				}
			}

			if code, _ := col.signal(t, syscall.SIGINT, false); code != 130 {
				t.Errorf("collect exit %d", code)
			}
			if strings.Contains(col.output()+col.errOut.String(), testToken) {
				t.Errorf("the token is in collect's output or log:\n%s%s", col.output(), col.errOut.String())
			}
		})
	}
}

func TestCollectRefusesBadTokenAndTLSFlags(t *testing.T) {
	cert, _ := selfSigned(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", "short"}, "at least 16 characters"},
		{[]string{"--token", "has a space inside it"}, "without spaces"},
		{[]string{"--tls-cert", cert}, "go together"},
		{[]string{"--tls-cert", cert, "--tls-key", cert}, "private key that matches"},
	} {
		var out, errOut syncBuffer
		code := run(t.Context(), append([]string{"collect", "--otlp", "--listen", "127.0.0.1:0"}, tc.args...), &out, &errOut)
		if code != 1 || !strings.Contains(errOut.String(), tc.want) || strings.Contains(errOut.String(), "has a space") {
			t.Errorf("%v: exit %d: %q; want %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}
