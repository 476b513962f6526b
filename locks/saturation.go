package locks

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Where Saturation.Queued comes from.
const (
	// QueueThreadPool: MariaDB's thread pool (thread_handling =
	// pool-of-threads), information_schema.THREAD_POOL_GROUPS.
	QueueThreadPool = "thread_pool"
	// QueueInnoDB: MySQL's innodb_thread_concurrency > 0, SHOW ENGINE
	// INNODB STATUS ROW OPERATIONS' "queries in queue".
	QueueInnoDB = "innodb_thread_concurrency"
	// QueueNone: one thread per connection and no concurrency limit: no
	// statement ever waits for a thread (Threads_running is the load).
	QueueNone = "none"
)

// Saturation is how busy the server's threads are, and how many statements
// wait for one.
type Saturation struct {
	ThreadsRunning   int64  `json:"threads_running"`
	ThreadsConnected int64  `json:"threads_connected"`
	MaxConnections   int64  `json:"max_connections"`
	ThreadHandling   string `json:"thread_handling"`
	// Queued is the number of statements waiting for a thread to run them
	// now, from QueueSource. QueueKnown is false when the server queues
	// but this reader cannot see the queue (another thread pool
	// implementation, or its tables unreadable).
	Queued      int64  `json:"queued"`
	QueueKnown  bool   `json:"queue_known"`
	QueueSource string `json:"queue_source"`
	// ThreadPool is MariaDB's pool, when thread_handling=pool-of-threads.
	ThreadPool *ThreadPool `json:"thread_pool,omitempty"`
	// InnoDB is MySQL's innodb_thread_concurrency queue, when the variable
	// exists.
	InnoDB *InnoDBConcurrency `json:"innodb,omitempty"`
}

// ThreadPool is MariaDB's thread pool, summed over its groups.
type ThreadPool struct {
	Size           int64 `json:"size"`        // thread_pool_size: groups
	MaxThreads     int64 `json:"max_threads"` // thread_pool_max_threads
	Groups         int64 `json:"groups"`
	Connections    int64 `json:"connections"`
	Threads        int64 `json:"threads"`
	ActiveThreads  int64 `json:"active_threads"`
	StandbyThreads int64 `json:"standby_threads"`
	// Queued sums the groups' QUEUE_LENGTH: requests waiting for a worker.
	Queued int64 `json:"queued"`
	// OldestQueuedSeconds is the longest wait in THREAD_POOL_QUEUES now.
	OldestQueuedSeconds float64 `json:"oldest_queued_seconds"`
	StalledGroups       int64   `json:"stalled_groups"`
}

// InnoDBConcurrency is MySQL's limit on threads inside InnoDB.
type InnoDBConcurrency struct {
	// Limit is innodb_thread_concurrency; 0 means no limit and no queue.
	Limit  int64 `json:"limit"`
	Inside int64 `json:"inside"` // queries inside InnoDB
	Queued int64 `json:"queued"` // queries in queue
	Known  bool  `json:"known"`  // the status text said
}

// ReadSaturation reads only the thread figures: two SHOW statements, plus
// the thread pool's two tables on MariaDB with pool-of-threads, or SHOW
// ENGINE INNODB STATUS on MySQL with innodb_thread_concurrency > 0.
func (r *Reader) ReadSaturation(ctx context.Context) (Saturation, error) {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return Saturation{}, fmt.Errorf("locks: connect: %w", err)
	}
	defer conn.Close()
	srv, err := r.serverOf(ctx, conn)
	if err != nil {
		return Saturation{}, err
	}
	vars, status, err := readVars(ctx, conn, srv.Flavor)
	if err != nil {
		return Saturation{}, err
	}
	var st *Status
	if parseInt(vars["innodb_thread_concurrency"]) > 0 {
		var text string
		if err := conn.QueryRowContext(ctx, queryInnoDBStatus).Scan(new(string), new(string), &text); err != nil {
			return Saturation{}, fmt.Errorf("locks: SHOW ENGINE INNODB STATUS: %w%s", err, privilegeHint(err, srv.Flavor))
		}
		st = ParseStatus(text)
	}
	return readSaturation(ctx, conn, srv.Flavor, vars, status, st)
}

// readSaturation builds Saturation from the variables and status already
// read, reading the thread pool's tables when there is one.
func readSaturation(ctx context.Context, conn *sql.Conn, f Flavor, vars, status map[string]string, st *Status) (Saturation, error) {
	s := Saturation{
		ThreadsRunning:   parseInt(status["Threads_running"]),
		ThreadsConnected: parseInt(status["Threads_connected"]),
		MaxConnections:   parseInt(vars["max_connections"]),
		ThreadHandling:   vars["thread_handling"],
		QueueSource:      QueueNone,
		QueueKnown:       true,
	}
	if v, ok := vars["innodb_thread_concurrency"]; ok {
		c := &InnoDBConcurrency{Limit: parseInt(v)}
		if st != nil && st.HaveQueue {
			c.Inside, c.Queued, c.Known = st.QueriesInside, st.QueriesInQueue, true
		}
		s.InnoDB = c
		if c.Limit > 0 {
			s.QueueSource, s.Queued, s.QueueKnown = QueueInnoDB, c.Queued, c.Known
		}
	}
	switch {
	case strings.EqualFold(s.ThreadHandling, "pool-of-threads") && f == MariaDB:
		p := &ThreadPool{Size: parseInt(vars["thread_pool_size"]), MaxThreads: parseInt(vars["thread_pool_max_threads"])}
		err := conn.QueryRowContext(ctx, queryThreadPoolGroups).Scan(&p.Groups, &p.Connections, &p.Threads,
			&p.ActiveThreads, &p.StandbyThreads, &p.Queued, &p.StalledGroups)
		if err != nil {
			if ctx.Err() != nil {
				return s, ctx.Err()
			}
			s.QueueSource, s.QueueKnown = QueueThreadPool, false
			return s, nil
		}
		var n, oldestMicros int64
		if err := conn.QueryRowContext(ctx, queryThreadPoolQueues).Scan(&n, &oldestMicros); err == nil {
			p.OldestQueuedSeconds = float64(oldestMicros) / 1e6
		}
		s.ThreadPool = p
		s.QueueSource, s.Queued, s.QueueKnown = QueueThreadPool, p.Queued, true
	case s.ThreadHandling != "" && s.ThreadHandling != "one-thread-per-connection" && s.ThreadHandling != "no-threads":
		// Percona's or MySQL Enterprise's thread pool: it queues, and its
		// queue is in tables this reader does not know.
		s.QueueSource, s.QueueKnown = s.ThreadHandling, false
	}
	return s, nil
}
