package collector

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdtime/holdtime/locks"
)

// ownMetrics are one source's figures without a tag, for one target:
// ProxySQL's connection pool and global status, the sessions waiting for a
// backend, the server's thread saturation. They never go through the store
// (it keeps what is per tag); the source publishes each good poll's set as
// a whole, and the runner drops it when the source fails, so that a dead
// source's gauges are absent (stale), never zero. The target is a constant
// label: every target registers its own, and none knows another's.
type ownMetrics struct {
	target string
	descs  []*prometheus.Desc

	mu   sync.Mutex
	last []prometheus.Metric // the last good poll's; nil while down
}

func newOwnMetrics(target string) *ownMetrics { return &ownMetrics{target: target} }

// desc declares one family of the source.
func (o *ownMetrics) desc(name, help string, labels ...string) *prometheus.Desc {
	d := prometheus.NewDesc(name, help, labels, prometheus.Labels{"target": o.target})
	o.descs = append(o.descs, d)
	return d
}

// Describe sends every family the source may publish.
func (o *ownMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range o.descs {
		ch <- d
	}
}

// Collect sends the last good poll's figures, nothing while down.
func (o *ownMetrics) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	last := o.last
	o.mu.Unlock()
	for _, m := range last {
		ch <- m
	}
}

// publish replaces the figures as a whole (ms is not kept by the caller).
func (o *ownMetrics) publish(ms []prometheus.Metric) {
	o.mu.Lock()
	o.last = ms
	o.mu.Unlock()
}

// drop forgets the figures: the source failed, they are unknown now.
func (o *ownMetrics) drop() { o.publish(nil) }

// poolMetrics are the ProxySQL pool source's own families: its connection
// pool per hostgroup and server (stats_mysql_connection_pool) and global
// status (stats_mysql_global).
type poolMetrics struct {
	*ownMetrics
	conns, errs, queries, latency    *prometheus.Desc
	clientConns, activeTrx, getFails *prometheus.Desc
}

func newPoolMetrics(target string) *poolMetrics {
	m := &poolMetrics{ownMetrics: newOwnMetrics(target)}
	m.conns = m.desc("holdtime_proxysql_pool_connections", "ProxySQL backend connections per hostgroup and server (state=used|free).", "hostgroup", "server", "state")
	m.errs = m.desc("holdtime_proxysql_pool_connection_errors_total", "ProxySQL backend connection errors (ConnERR).", "hostgroup", "server")
	m.queries = m.desc("holdtime_proxysql_pool_queries_total", "Queries ProxySQL sent to the backend server.", "hostgroup", "server")
	m.latency = m.desc("holdtime_proxysql_pool_latency_seconds", "ProxySQL's ping latency to the backend server (Latency_us).", "hostgroup", "server")
	m.clientConns = m.desc("holdtime_proxysql_client_connections", "Client connections to ProxySQL (Client_Connections_connected).")
	m.activeTrx = m.desc("holdtime_proxysql_active_transactions", "Transactions open through ProxySQL (Active_Transactions).")
	m.getFails = m.desc("holdtime_proxysql_connpool_get_failures_total", "Times ProxySQL could not get a backend connection from its pool (ConnPool_get_conn_failure).")
	return m
}

// set publishes one poll of the pool and global status (global nil when
// stats_mysql_global had none of its rows).
func (m *poolMetrics) set(pool []PoolServer, gl *proxysqlGlobal) {
	g, c := prometheus.GaugeValue, prometheus.CounterValue
	ms := make([]prometheus.Metric, 0, 5*len(pool)+3)
	for _, p := range pool {
		hg := strconv.FormatInt(p.Hostgroup, 10)
		ms = append(ms,
			prometheus.MustNewConstMetric(m.conns, g, float64(p.ConnUsed), hg, p.Server, "used"),
			prometheus.MustNewConstMetric(m.conns, g, float64(p.ConnFree), hg, p.Server, "free"),
			prometheus.MustNewConstMetric(m.errs, c, float64(p.ConnERR), hg, p.Server),
			prometheus.MustNewConstMetric(m.queries, c, float64(p.Queries), hg, p.Server),
			prometheus.MustNewConstMetric(m.latency, g, float64(p.LatencyUS)/1e6, hg, p.Server))
	}
	if gl != nil {
		ms = append(ms,
			prometheus.MustNewConstMetric(m.clientConns, g, gl.clientConnections),
			prometheus.MustNewConstMetric(m.activeTrx, g, gl.activeTransactions),
			prometheus.MustNewConstMetric(m.getFails, c, gl.getConnFailures))
	}
	m.publish(ms)
}

// waitingMetrics is the ProxySQL processlist source's own family: the
// sessions waiting for a backend now, which have no tag yet.
type waitingMetrics struct {
	*ownMetrics
	waiting *prometheus.Desc
}

func newWaitingMetrics(target string) *waitingMetrics {
	m := &waitingMetrics{ownMetrics: newOwnMetrics(target)}
	m.waiting = m.desc("holdtime_proxysql_waiting_sessions", "ProxySQL client sessions waiting for a backend connection now (sampled from stats_mysql_processlist).")
	return m
}

func (m *waitingMetrics) set(n int) {
	m.publish([]prometheus.Metric{prometheus.MustNewConstMetric(m.waiting, prometheus.GaugeValue, float64(n))})
}

// saturationMetrics are the MySQL locks source's families without a tag:
// whether the server lists locks, and its threads against their limits.
type saturationMetrics struct {
	*ownMetrics
	lockOutput, running, connected, maxConn, queue, queueOldest *prometheus.Desc
}

func newSaturationMetrics(target string) *saturationMetrics {
	m := &saturationMetrics{ownMetrics: newOwnMetrics(target)}
	m.lockOutput = m.desc("holdtime_mysql_lock_output_enabled", "1 when the server lists locks (MySQL 8 always; MariaDB with innodb_status_output_locks=ON), else 0: holdtime_mysql_locks is then absent. The collector never changes the setting.")
	m.running = m.desc("holdtime_mysql_threads_running", "Threads_running: statements the server is executing now.")
	m.connected = m.desc("holdtime_mysql_threads_connected", "Threads_connected: client connections.")
	m.maxConn = m.desc("holdtime_mysql_max_connections", "max_connections.")
	m.queue = m.desc("holdtime_mysql_thread_queue", "Statements waiting for a thread to run them, when the server queues them and the queue can be read: queue=thread_pool (MariaDB thread_handling=pool-of-threads, THREAD_POOL_GROUPS QUEUE_LENGTH), innodb_thread_concurrency (MySQL, ROW OPERATIONS' queries in queue), none (one thread per connection: never a queue). Absent when the queue cannot be read.", "queue")
	m.queueOldest = m.desc("holdtime_mysql_thread_queue_oldest_seconds", "How long the oldest statement queued in MariaDB's thread pool has waited (THREAD_POOL_QUEUES).")
	return m
}

// set publishes one lock read's saturation and lock-output setting.
func (m *saturationMetrics) set(sat locks.Saturation, lockOutputOn bool) {
	g := prometheus.GaugeValue
	ms := []prometheus.Metric{
		prometheus.MustNewConstMetric(m.lockOutput, g, b2f(lockOutputOn)),
		prometheus.MustNewConstMetric(m.running, g, float64(sat.ThreadsRunning)),
		prometheus.MustNewConstMetric(m.connected, g, float64(sat.ThreadsConnected)),
		prometheus.MustNewConstMetric(m.maxConn, g, float64(sat.MaxConnections)),
	}
	if sat.QueueKnown {
		ms = append(ms, prometheus.MustNewConstMetric(m.queue, g, float64(sat.Queued), sat.QueueSource))
	}
	if tp := sat.ThreadPool; tp != nil {
		ms = append(ms, prometheus.MustNewConstMetric(m.queueOldest, g, tp.OldestQueuedSeconds))
	}
	m.publish(ms)
}
