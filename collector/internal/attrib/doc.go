// Package attrib attributes ProxySQL backend hold time to tags: it reads
// ProxySQL's JSON events log and processlist recordings, and turns events
// and samples into holds. The collector daemon and `holdtime analyze`
// (package analyze) share it; package collector re-exports its public
// names.
//
//   - Tags are read from statement text by conntag.ParseTag and
//     conntag.AppendTag, the one parser of the tag grammar (conntag's
//     comment at the end of the statement, the leading form older conntag
//     versions wrote, or sqlcommenter's trailing conn_tag='NAME');
//     ParseTag and AppendTag here are the same functions. A tag that
//     arrives as a value (an OTLP span attribute) must pass
//     conntag.ValidTag.
//   - EventsReader streams ProxySQL's JSON events log
//     (mysql-eventslog_format=2), plain or gzip, in bounded memory, counting
//     and skipping malformed lines. A line's times must be between 1970 and
//     2200, end after they start, span at most 7 days and agree with its
//     duration_us; and its end must fit the log's own clock (the latest
//     end accepted): more than 10 minutes before it or 24 hours after it,
//     the event is kept aside until the next event says whether the log
//     moved on (both kept) or the line is corrupt (counted as malformed,
//     with the reason). A jump nothing follows is rejected. So one line
//     can move no counter backwards and no window to the year 294247.
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
//   - LineChecker applies EventsReader's checks to lines a caller reads
//     itself (the daemon's tail of a live log); TableRecorder writes the
//     stats tables' recordings (RECORDING.md) that ReadStatsRecording reads.
//
// Times are Unix microseconds, as in the events log.
package attrib
