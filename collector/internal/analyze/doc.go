// Package analyze is `holdtime analyze`: it reads ProxySQL's events logs
// and processlist recordings after the fact, attributes their holds to
// tags with package attrib, and reports them.
//
//   - Aggregator and Report sum holds per tag in bounded memory (percentiles
//     from fixed-size histograms, capped at the longest hold; the longest
//     holds kept as a short list) and render them as a table, Markdown or
//     JSON. A hold whose sticky pin kept its backend until the session
//     ended (the log records no disconnect) has an unknown end: it is
//     listed apart and in no percentile. Analyze returns ErrNothingToReport
//     when the input has no valid event or nothing matches the filter.
//
// Times are Unix microseconds, as in the events log.
package analyze
