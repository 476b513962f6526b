package collector

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestClientReadsTheReportTheHandlerServes: Client.Top returns what
// TopReport says, through the real handler, and passes the query on.
func TestClientReadsTheReportTheHandlerServes(t *testing.T) {
	c, err := New(Config{OTLP: OTLPConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	c.st.addOne("app", SourceOTLP, "checkout", &figures{Hold: 5, Active: 1, Idle: 4, Stmts: 3})
	c.st.addOne("app", SourceOTLP, "browse", &figures{Hold: 1, Active: 1, Stmts: 30})
	c.st.success("app", SourceOTLP)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	cl, err := NewClient(srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	q := TopQuery{Window: 10 * time.Second, Layer: string(LayerApp), Sort: "statements", Filter: "o"}
	got, err := cl.Top(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.TopReport(q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rows) != 2 || got.Rows[0].Tag != want.Rows[0].Tag || got.Rows[0].Tag != "browse" {
		t.Errorf("rows %+v, want %+v (browse first by statements)", got.Rows, want.Rows)
	}
	got, err = cl.Top(context.Background(), TopQuery{Filter: "check"})
	if err != nil || len(got.Rows) != 1 || got.Rows[0].Tag != "checkout" {
		t.Errorf("filtered: %+v, %v", got.Rows, err)
	}
}

// TestClientErrorsNameTheCollectorNotItsPassword: an unreachable
// collector, a bad answer and a bad URL get errors that say so, without the
// password of the URL.
func TestClientErrorsNameTheCollectorNotItsPassword(t *testing.T) {
	if _, err := NewClient("ftp://x", nil); err == nil {
		t.Error("NewClient took an ftp URL")
	}
	srv := httptest.NewServer(nil) // 404 for everything
	addr := strings.TrimPrefix(srv.URL, "http://")
	cl, err := NewClient("http://u:s3cret@"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Top(context.Background(), TopQuery{})
	if err == nil || !strings.Contains(err.Error(), "404") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("404: %v", err)
	}
	srv.Close()
	_, err = cl.Top(context.Background(), TopQuery{})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the collector at http://u:xxxxx@"+addr) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("unreachable: %v", err)
	}
}
