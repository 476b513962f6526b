package migration

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// Handler serves the kill switches, to mount on the app's metrics server:
//
//	GET  /killswitch                   {"kill_switch": false, "killed_shops": [], "gated": {}}
//	POST /killswitch?on=true           the global switch on (on=false: off), answers like GET
//	POST /killswitch?on=true&shop=N    shop N's own switch
//	     &force=true                   hand the truth back to a drifted Redis (repaired first)
//
// A switch that would hand the truth to a drifted Redis answers 409
// Conflict with the reason (the shops that could move moved).
// Mount it behind whatever protects your metrics server's admin paths.
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, status int, problem string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		doc := map[string]any{"kill_switch": r.KillSwitch(), "killed_shops": r.KilledShops(), "gated": r.Gated()}
		if problem != "" {
			doc["error"] = problem
		}
		json.NewEncoder(w).Encode(doc)
	}
	mux.HandleFunc("GET /killswitch", func(w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, "") })
	mux.HandleFunc("POST /killswitch", func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		on, err := strconv.ParseBool(q.Get("on"))
		if err != nil {
			http.Error(w, "want ?on=true or ?on=false", http.StatusBadRequest)
			return
		}
		force := false
		if f := q.Get("force"); f != "" {
			if force, err = strconv.ParseBool(f); err != nil {
				http.Error(w, "want force=true or force=false", http.StatusBadRequest)
				return
			}
		}
		if sh := q.Get("shop"); sh != "" {
			id, perr := strconv.ParseUint(sh, 10, 64)
			if perr != nil {
				http.Error(w, "want shop=<shop id>", http.StatusBadRequest)
				return
			}
			err = r.SetShopKillSwitch(req.Context(), id, on, force)
		} else {
			err = r.SetKillSwitch(req.Context(), on, force)
		}
		switch {
		case errors.Is(err, ErrDrifted):
			answer(w, http.StatusConflict, err.Error())
		case err != nil:
			answer(w, http.StatusInternalServerError, err.Error())
		default:
			answer(w, http.StatusOK, "")
		}
	})
	return mux
}
