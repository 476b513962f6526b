package testenv

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

const prometheusDirPrefix = "holdtime-prometheus-"

// PrometheusOptions configures StartPrometheus.
type PrometheusOptions struct {
	// Targets are host:port addresses scraped at /metrics every second.
	Targets []string
	// RuleFiles are alerting/recording rule files to load (optional).
	RuleFiles []string
	// Binary is the prometheus binary. Default: "prometheus" on PATH.
	Binary string
	// Timeout bounds the start. Default 30 s.
	Timeout time.Duration
}

// Prometheus is a running throwaway Prometheus with temporary storage.
type Prometheus struct {
	URL string // http://127.0.0.1:port

	dir    string
	cmd    *exec.Cmd
	done   chan struct{}
	once   sync.Once
	client *http.Client
}

// PrometheusAvailable reports whether a prometheus binary is on PATH.
func PrometheusAvailable() bool { _, err := exec.LookPath("prometheus"); return err == nil }

// StartPrometheus starts Prometheus scraping opts.Targets every second and
// waits until it is ready. Without a prometheus binary it returns an error
// wrapping ErrNotInstalled.
func StartPrometheus(ctx context.Context, opts PrometheusOptions) (_ *Prometheus, err error) {
	bin := opts.Binary
	if bin == "" {
		if bin, err = exec.LookPath("prometheus"); err != nil {
			return nil, fmt.Errorf("testenv: prometheus is not on PATH: %w; install it with `sudo apt-get install -y prometheus`", ErrNotInstalled)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(opts.Timeout, 30*time.Second))
	defer cancel()
	reapLeftovers()
	dir, err := newRunDir("", prometheusDirPrefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("testenv: free port: %w", err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(prometheusConfig(opts)), 0o644); err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	p := &Prometheus{
		URL:    "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:    dir,
		done:   make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second},
	}
	p.cmd = exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--storage.tsdb.retention.time=1d",
	)
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	setDeathSignal(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("testenv: start prometheus: %w", err)
	}
	_ = os.WriteFile(filepath.Join(dir, "server.pid"), []byte(strconv.Itoa(p.cmd.Process.Pid)), 0o644)
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	if err := p.waitReady(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func prometheusConfig(opts PrometheusOptions) string {
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
	if len(opts.RuleFiles) > 0 {
		b.WriteString("rule_files:\n")
		for _, f := range opts.RuleFiles {
			fmt.Fprintf(&b, "  - %q\n", f)
		}
	}
	b.WriteString("scrape_configs:\n  - job_name: holdtime\n    static_configs:\n      - targets: [")
	for i, t := range opts.Targets {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", t)
	}
	b.WriteString("]\n")
	return b.String()
}

func (p *Prometheus) waitReady(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
		resp, err := p.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
			return fmt.Errorf("testenv: prometheus exited during start:\n%s", tail(log, 4000))
		case <-ctx.Done():
			return fmt.Errorf("testenv: prometheus not ready at %s: %w", p.URL, ctx.Err())
		case <-tick.C:
		}
	}
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query runs an instant PromQL query and returns its vector (a scalar comes
// back as one sample without labels).
func (p *Prometheus) Query(ctx context.Context, promql string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		p.URL+"/api/v1/query?query="+url.QueryEscape(promql), nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("testenv: query %q: %w", promql, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("testenv: query %q: %w", promql, err)
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("testenv: query %q: %w", promql, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("testenv: query %q: %s", promql, r.Error)
	}
	parse := func(pair [2]any) float64 {
		s, _ := pair[1].(string)
		v, _ := strconv.ParseFloat(s, 64)
		return v
	}
	switch r.Data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(r.Data.Result, &vec); err != nil {
			return nil, err
		}
		out := make([]Sample, len(vec))
		for i, v := range vec {
			out[i] = Sample{Metric: v.Metric, Value: parse(v.Value)}
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, err
		}
		return []Sample{{Value: parse(v)}}, nil
	}
	return nil, fmt.Errorf("testenv: query %q: unsupported result type %q", promql, r.Data.ResultType)
}

// WaitForSeries runs promql until it returns at least one series or ctx ends,
// for tests that need a scrape to have happened.
func (p *Prometheus) WaitForSeries(ctx context.Context, promql string) ([]Sample, error) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := p.Query(ctx, promql)
		if err == nil && len(s) > 0 {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testenv: no series for %q: %w (last error: %v)", promql, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// Close stops Prometheus and removes its storage.
func (p *Prometheus) Close() error {
	var err error
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		err = os.RemoveAll(p.dir)
	})
	return err
}
