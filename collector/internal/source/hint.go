package source

import "time"

// Hint is what an app hold span says of a session, evidence the OTLP
// receiver gives the one target the span went through (a ProxySQL session
// id, or a MySQL connection id when the app connects directly): the
// session held a connection for Tag from Start to End. Received is when
// the span arrived; Slack is how far outside Start..End a sampled run may
// lie and still be named by it (the target sets it).
type Hint struct {
	Tag        string
	Start, End time.Time
	Received   time.Time
	Slack      time.Duration
}
