package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// killswitchCmd flips a migration's kill switch through the app's metrics
// server (migration.Router.Handler, mounted at /killswitch).
type killswitchCmd struct {
	out     io.Writer
	url     string
	timeout time.Duration
	shop    uint64
	force   bool
}

func newKillswitchCmd() *cobra.Command {
	k := &killswitchCmd{}
	cmd := &cobra.Command{
		Use:   "killswitch on|off|status",
		Short: "Send a migrating app's new reservations back to Redis at once (or let them go to MySQL again)",
		Long: `killswitch flips the kill switch of an app migrating from the Redis reservation design to
the engine (package migration): on, every new reservation of a shop switched to MySQL goes
back to Redis as the source of truth at once (MySQL still shadowed); off, they go to MySQL
again (through the promotion gate). Reservations in flight stay with the system that made
them. status prints it. --shop flips one shop's own switch instead of the global one.

Turning it on hands the source of truth back to Redis only where Redis has not drifted from
MySQL (the app reconciles each shop first); a drifted shop stays on MySQL and the command
fails naming it. --force repairs Redis from MySQL and hands it back anyway.

--url is the app's metrics server, which serves the switch at /killswitch next to
/metrics (holdtime flashsale --migrate --metrics-listen does); the app also exports it
as the gauge holdtime_migration_kill_switch.`,
		Example: `  holdtime killswitch on --url http://127.0.0.1:9480
  holdtime killswitch on --shop 42 --force
  holdtime killswitch status --url http://127.0.0.1:9480`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || (args[0] != "on" && args[0] != "off" && args[0] != "status") {
				return errors.New("say on, off or status")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			k.out = cmd.OutOrStdout()
			ctx, cancel := context.WithTimeout(cmd.Context(), k.timeout)
			defer cancel()
			return k.run(ctx, args[0])
		},
	}
	cmd.Flags().StringVar(&k.url, "url", "http://127.0.0.1:9480", "the app's metrics server (its /killswitch)")
	cmd.Flags().DurationVar(&k.timeout, "timeout", 30*time.Second, "give up after this long (turning it on reconciles every shop on MySQL first)")
	cmd.Flags().Uint64Var(&k.shop, "shop", 0, "flip this shop's own kill switch (0: the global one)")
	cmd.Flags().BoolVar(&k.force, "force", false, "hand the truth back to a Redis that drifted from MySQL (repairing it first)")
	return cmd
}

func (k *killswitchCmd) run(ctx context.Context, action string) error {
	u, err := url.Parse(k.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("--url wants the app's metrics server, such as http://127.0.0.1:9480")
	}
	u.User = nil // never sent or echoed
	u.Path = strings.TrimSuffix(u.Path, "/") + "/killswitch"
	method := http.MethodGet
	if action != "status" {
		method = http.MethodPost
		q := url.Values{"on": {fmt.Sprint(action == "on")}}
		if k.shop != 0 {
			q.Set("shop", fmt.Sprint(k.shop))
		}
		if k.force {
			q.Set("force", "true")
		}
		u.RawQuery = q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("kill switch at %s: %v (is the app running with its metrics server there?)", u.Redacted(), unwrapURLError(err))
	}
	defer resp.Body.Close()
	var state struct {
		On     *bool             `json:"kill_switch"`
		Killed []uint64          `json:"killed_shops"`
		Gated  map[string]string `json:"gated"`
		Error  string            `json:"error"`
	}
	ok := resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusConflict
	if !ok || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&state) != nil || state.On == nil {
		return fmt.Errorf("kill switch at %s: %s (the app serves no kill switch there: is it migrating?)", u.Redacted(), resp.Status)
	}
	word := "off: new reservations go to each shop's stage"
	if *state.On {
		word = "on: new reservations go to Redis"
	}
	fmt.Fprintf(k.out, "kill switch %s\n", word)
	if len(state.Killed) > 0 {
		fmt.Fprintf(k.out, "shops with their own kill switch on: %v\n", state.Killed)
	}
	if state.Error != "" {
		return fmt.Errorf("kill switch: %s (add --force to repair Redis and hand it back anyway)", state.Error)
	}
	return nil
}
