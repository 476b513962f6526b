package collector

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client reads a running collector's /api/v1/top: what `holdtime top
// --collector` shows. It is safe for concurrent use.
type Client struct {
	base  string // the URL as given: its userinfo, if any, is the collector's basic auth
	shown string // base without its password, for messages
	hc    *http.Client
}

// NewClient returns a Client of the collector at baseURL (for example
// http://127.0.0.1:9479; user:password@ in it is sent as basic auth and
// never appears in errors). hc nil means an http.Client with a 5 s timeout.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("collector URL must be http(s)://host:port, the address `holdtime collect --listen` serves")
	}
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	return &Client{base: u.String(), shown: u.Redacted(), hc: hc}, nil
}

// Top asks the collector for q's report. A collector that cannot be
// reached, answers an error or something that is not the report gets an
// error naming the collector's address and the cause.
func (c *Client) Top(ctx context.Context, q TopQuery) (TopResponse, error) {
	var doc TopResponse
	params := url.Values{"window": {windowParam(q.Window)}}
	for k, v := range map[string]string{"layer": q.Layer, "sort": q.Sort, "filter": q.Filter, "source": string(q.Source)} {
		if v != "" {
			params.Set(k, v)
		}
	}
	if q.Limit > 0 {
		params.Set("limit", strconv.Itoa(q.Limit))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/top?"+params.Encode(), nil)
	if err != nil {
		return doc, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return doc, ctx.Err()
		}
		return doc, fmt.Errorf("cannot reach the collector at %s: is `holdtime collect` running there? (%v)", c.shown, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		msg := strings.TrimSpace(string(body))
		var apiErr apiError
		if json.Unmarshal(body, &apiErr) == nil && apiErr.Error != "" {
			msg = apiErr.Error
		}
		return doc, fmt.Errorf("collector at %s answered %s: %s", c.shown, resp.Status, msg)
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return doc, fmt.Errorf("collector at %s sent something that is not holdtime's /api/v1/top JSON: %v", c.shown, err)
	}
	return doc, nil
}

// windowParam names a window as /api/v1/top?window= takes it: the nearest
// of 10s, 1m and 5m, as TopReport rounds.
func windowParam(w time.Duration) string {
	switch roundWindow(cmp.Or(w, time.Minute)) {
	case 10 * time.Second:
		return "10s"
	case 5 * time.Minute:
		return "5m"
	}
	return "1m"
}

// unwrapURLError drops net/url's "Get "URL": " prefix, which would repeat
// the URL (password included) in front of the cause.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
