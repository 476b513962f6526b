// Package collector reads what ProxySQL records and attributes backend
// connection hold time to tags: the business processes that conntag writes
// into every statement as /* conn_tag:NAME */.
//
// One implementation serves two front ends: `holdtime analyze` reads files
// after the fact, and the collector daemon feeds the same types live.
//
//   - ParseTag and AppendTag extract a tag from statement text (conntag's
//     leading comment, or sqlcommenter's trailing conn_tag='NAME').
//   - EventsReader streams ProxySQL's JSON events log
//     (mysql-eventslog_format=2), plain or gzip, in bounded memory, counting
//     and skipping malformed lines.
//   - Attributor turns events into Holds: a transaction holds its backend
//     from the start of BEGIN (or of the first statement under
//     autocommit=0) to the end of COMMIT/ROLLBACK, and takes the tag of the
//     statements inside it, since drivers send BEGIN and COMMIT untagged; an
//     autocommit statement holds for its own duration; a sticky pin (user
//     variable, GET_LOCK, temporary table...) keeps the backend attached
//     between statements. Hold time whose tag cannot be known goes to
//     UnknownTag with a reason, never dropped.
//   - ProcesslistReader and ProcesslistWriter read and write recorded
//     stats_mysql_processlist samples (RECORDING.md), and SampleAttributor
//     turns them into sampled holds, taking the tag of a session idle in a
//     transaction from the events log when both are given.
//   - Aggregator and Report sum holds per tag in bounded memory (percentiles
//     from fixed-size histograms, the longest holds kept as a short list)
//     and render them as a table, Markdown or JSON.
//
// Times are Unix microseconds, as in the events log.
package collector
