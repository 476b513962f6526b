package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/holdtime/holdtime/collector"
	"github.com/holdtime/holdtime/conntag"
)

// TestServeHoldProfile: the endpoint the demo and flashsale --metrics-listen
// mount answers with a pprof profile, and the closing lesson says so
// plainly when no hold of the tag was sampled instead of naming a frame.
func TestServeHoldProfile(t *testing.T) {
	mux := http.NewServeMux()
	var out bytes.Buffer
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	hp := serveHoldProfile(mux, 0, &out, srv.URL)
	if !strings.Contains(out.String(), "go tool pprof -http=: "+srv.URL+holdProfilePath) {
		t.Errorf("printed %q", out.String())
	}
	resp, err := http.Get(srv.URL + holdProfilePath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	prof, err := profile.ParseData(body)
	if err != nil {
		t.Fatalf("GET %s: %v (status %d)", holdProfilePath, err, resp.StatusCode)
	}
	if len(prof.SampleType) != 5 || prof.SampleType[0].Type != "held" { // held, idle_held, holds, dial, held_open
		t.Errorf("sample types %v", prof.SampleType)
	}
	var lesson bytes.Buffer
	writeHoldProfileLesson(&lesson, hp, "checkout_tax_quote", srv.URL)
	if !strings.Contains(lesson.String(), "sampled none of checkout_tax_quote's holds") {
		t.Errorf("lesson without samples: %q", lesson.String())
	}
}

// serveTestHoldProfile serves hp as an app does, at holdProfilePath, until
// the test ends, and returns its URL.
func serveTestHoldProfile(t *testing.T, hp *conntag.HoldProfile) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(holdProfilePath, hp)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + holdProfilePath
}

// runTestCollector runs a collector of cfg until the test ends (stopped
// and waited for in its cleanup).
func runTestCollector(t *testing.T, cfg collector.Config) *collector.Collector {
	t.Helper()
	c, err := collector.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return c
}
