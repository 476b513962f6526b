package collector

// Source names where a figure came from. It is the `source` label of the
// per-tag metrics and the key of TopRow.Sources.
type Source string

// The sources of per-tag figures.
const (
	SourceProxySQLProcesslist Source = "proxysql_processlist" // sampled stats_mysql_processlist
	SourceProxySQLEvents      Source = "proxysql_events"      // the JSON events log, exact
	SourceProxySQLDigest      Source = "proxysql_digest"      // stats_mysql_query_digest deltas
	SourceMySQL               Source = "mysql"                // the MySQL/MariaDB server itself
	SourceOTLP                Source = "otlp"                 // conntag's spans
	// SourceProxySQLPool labels only holdtime_source_up and
	// holdtime_source_last_success_timestamp_seconds: the poll of
	// stats_mysql_connection_pool and stats_mysql_global has no per-tag figures.
	SourceProxySQLPool Source = "proxysql_pool"
)

// sourceKind is what the store, the health report and /api/v1/top know of
// a source, declared once per source in sourceKinds, so that none of them
// branches on which source it is. A new source is its constant, its line
// in sourceKinds and its entry in its target's polled().
type sourceKind struct {
	Source
	// layer is the layer whose per-tag figures the source writes; "" for
	// none.
	layer Layer
	// push: the figures arrive on their own (OTLP), not by polling.
	push bool
	// waits: the source writes per-tag time waited for a connection.
	waits bool
	// now: its sessions and pins are its layer's current state, whatever
	// the layer's headline (the events log sees statements as they end, not
	// who holds a backend now).
	now bool
	// reads names what a polled source reads, for the fix when it is down.
	reads string
	// privilege is the fix when its account lacks a privilege.
	privilege string
	// fix, when set, is the fix when it is down, whatever the failure.
	fix string
}

const (
	readsAdmin = "ProxySQL's admin DSN (port 6032)"
	readsMySQL = "the MySQL server's DSN"

	adminPrivilege = "use an admin or stats account in " + readsAdmin
	mysqlPrivilege = "GRANT PROCESS ON *.* and SELECT ON performance_schema.* to the account of " + readsMySQL
)

// sourceKinds lists every source, those with per-tag figures first, in the
// order the API names them.
var sourceKinds = [...]sourceKind{
	{Source: SourceOTLP, layer: LayerApp, push: true},
	{Source: SourceProxySQLEvents, layer: LayerProxy, waits: true,
		fix: "check mysql-eventslog_filename (the path given must be the file or its prefix) and that this user can read the directory"},
	{Source: SourceProxySQLProcesslist, layer: LayerProxy, waits: true, now: true, reads: readsAdmin, privilege: adminPrivilege},
	{Source: SourceProxySQLDigest, layer: LayerProxy, reads: readsAdmin, privilege: adminPrivilege},
	{Source: SourceMySQL, layer: LayerServer, now: true, reads: readsMySQL, privilege: mysqlPrivilege},
	{Source: SourceProxySQLPool, reads: readsAdmin, privilege: adminPrivilege},
	{Source: SourceMySQLLocks, reads: readsMySQL, privilege: mysqlPrivilege},
}

// kind returns what is known of s; the zero kind (no layer, polled, no
// reads) for a source not listed.
func (s Source) kind() sourceKind {
	for _, k := range sourceKinds {
		if k.Source == s {
			return k
		}
	}
	return sourceKind{Source: s}
}

// Layer returns the layer a source's per-tag figures describe; "" for
// proxysql_pool and mysql_locks, which have none.
func (s Source) Layer() Layer { return s.kind().layer }

// gaugeSource is the source whose current-state gauges (sessions holding a
// connection, pins) a layer shows, whatever its headline.
func gaugeSource(l Layer) Source {
	for _, k := range sourceKinds {
		if k.now && k.layer == l {
			return k.Source
		}
	}
	return ""
}

// push reports whether figures of source arrive on their own rather than
// by polling.
func push(s Source) bool { return s.kind().push }

// tagSources are the sources with per-tag figures, by name.
func tagSources() []string {
	var out []string
	for _, k := range sourceKinds {
		if k.layer != "" {
			out = append(out, string(k.Source))
		}
	}
	return out
}
