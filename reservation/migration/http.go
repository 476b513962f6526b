package migration

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Handler serves the kill switch, to mount on the app's metrics server:
//
//	GET  /killswitch            {"kill_switch": false}
//	POST /killswitch?on=true    turns it on (on=false: off), answers like GET
//
// Mount it behind whatever protects your metrics server's admin paths.
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]bool{"kill_switch": r.KillSwitch()})
	}
	mux.HandleFunc("GET /killswitch", func(w http.ResponseWriter, _ *http.Request) { answer(w) })
	mux.HandleFunc("POST /killswitch", func(w http.ResponseWriter, req *http.Request) {
		on, err := strconv.ParseBool(req.URL.Query().Get("on"))
		if err != nil {
			http.Error(w, "want ?on=true or ?on=false", http.StatusBadRequest)
			return
		}
		r.SetKillSwitch(on)
		answer(w)
	})
	return mux
}
