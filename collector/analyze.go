package collector

// The offline analysis and the attribution of holds to tags live in
// internal/attrib (ProxySQL's events log and processlist formats, the
// Attributor and SampleAttributor, statement classes, recordings) and
// internal/analyze (Analyze, the Aggregator and its Report), which the
// collector daemon and `holdtime analyze` share. Their public names stay
// here, as aliases, so users import one package.

import (
	"context"
	"io"

	"github.com/holdtime/holdtime/collector/internal/analyze"
	"github.com/holdtime/holdtime/collector/internal/attrib"
)

// Types of attrib.
type (
	Attributor        = attrib.Attributor
	AttributorConfig  = attrib.AttributorConfig
	Event             = attrib.Event
	EventType         = attrib.EventType
	EventsLogConfig   = attrib.EventsLogConfig
	EventsReader      = attrib.EventsReader
	Hold              = attrib.Hold
	HoldKind          = attrib.HoldKind
	LineRef           = attrib.LineRef
	Pin               = attrib.Pin
	ProcesslistConfig = attrib.ProcesslistConfig
	ProcesslistReader = attrib.ProcesslistReader
	ProcesslistRow    = attrib.ProcesslistRow
	ProcesslistStats  = attrib.ProcesslistStats
	ProcesslistWriter = attrib.ProcesslistWriter
	ReadStats         = attrib.ReadStats
	SampleAttributor  = attrib.SampleAttributor
	SampledHold       = attrib.SampledHold
	StatsRecording    = attrib.StatsRecording
	StatsRecordingRow = attrib.StatsRecordingRow
	TagFrom           = attrib.TagFrom
)

// Constants of attrib.
const (
	EventOther               = attrib.EventOther
	EventQuery               = attrib.EventQuery
	EventStmtExecute         = attrib.EventStmtExecute
	EventStmtPrepare         = attrib.EventStmtPrepare
	HoldLocal                = attrib.HoldLocal
	HoldStatement            = attrib.HoldStatement
	HoldTransaction          = attrib.HoldTransaction
	MaxTagLen                = attrib.MaxTagLen
	OverflowTag              = attrib.OverflowTag
	PinAutocommitOff         = attrib.PinAutocommitOff
	PinLock                  = attrib.PinLock
	PinSessionState          = attrib.PinSessionState
	PinTempTable             = attrib.PinTempTable
	PinTransaction           = attrib.PinTransaction
	PinUserVariable          = attrib.PinUserVariable
	ProcesslistFormatVersion = attrib.ProcesslistFormatVersion
	ReasonBeganBeforeLog     = attrib.ReasonBeganBeforeLog
	ReasonEmptyTxn           = attrib.ReasonEmptyTxn
	ReasonIdleUnseen         = attrib.ReasonIdleUnseen
	ReasonOpenNoStmt         = attrib.ReasonOpenNoStmt
	ReasonWaitUnseen         = attrib.ReasonWaitUnseen
	StatsFormatVersion       = attrib.StatsFormatVersion
	TagFromCarried           = attrib.TagFromCarried
	TagFromEventsLog         = attrib.TagFromEventsLog
	TagFromInfo              = attrib.TagFromInfo
	TagFromUnknown           = attrib.TagFromUnknown
	UnknownTag               = attrib.UnknownTag
	UntaggedTag              = attrib.UntaggedTag
)

// Errors of attrib: the same values, so errors.Is matches either name.
var (
	ErrTruncated = attrib.ErrTruncated
)

// AppendTag is attrib.AppendTag.
func AppendTag(dst, query []byte) ([]byte, bool) { return attrib.AppendTag(dst, query) }

// NewAttributor is attrib.NewAttributor.
func NewAttributor(cfg AttributorConfig, emit func(*Hold)) *Attributor {
	return attrib.NewAttributor(cfg, emit)
}

// NewEventsReader is attrib.NewEventsReader.
func NewEventsReader(ctx context.Context, r io.Reader, name string, cfg EventsLogConfig) *EventsReader {
	return attrib.NewEventsReader(ctx, r, name, cfg)
}

// NewProcesslistWriter is attrib.NewProcesslistWriter.
func NewProcesslistWriter(w io.Writer) *ProcesslistWriter { return attrib.NewProcesslistWriter(w) }

// NewSampleAttributor is attrib.NewSampleAttributor.
func NewSampleAttributor(cfg ProcesslistConfig, tagOf func(uint64) (string, bool), emit func(*SampledHold)) *SampleAttributor {
	return attrib.NewSampleAttributor(cfg, tagOf, emit)
}

// OpenEventsLog is attrib.OpenEventsLog.
func OpenEventsLog(ctx context.Context, paths []string, cfg EventsLogConfig) *EventsReader {
	return attrib.OpenEventsLog(ctx, paths, cfg)
}

// OpenProcesslist is attrib.OpenProcesslist.
func OpenProcesslist(paths []string) (*ProcesslistReader, error) {
	return attrib.OpenProcesslist(paths)
}

// ParseTag is attrib.ParseTag.
func ParseTag(query string) (string, bool) { return attrib.ParseTag(query) }

// Types of analyze.
type (
	Aggregator    = analyze.Aggregator
	AnalyzeConfig = analyze.AnalyzeConfig
	Filter        = analyze.Filter
	HoldReport    = analyze.HoldReport
	ReasonSeconds = analyze.ReasonSeconds
	Report        = analyze.Report
	SampledReport = analyze.SampledReport
	TagReport     = analyze.TagReport
)

// Constants of analyze.
const (
	ReportVersion = analyze.ReportVersion
)

// Errors of analyze: the same values, so errors.Is matches either name.
var (
	ErrNoInput         = analyze.ErrNoInput
	ErrNothingToReport = analyze.ErrNothingToReport
)

// Analyze is analyze.Analyze.
func Analyze(ctx context.Context, cfg AnalyzeConfig) (*Report, error) {
	return analyze.Analyze(ctx, cfg)
}

// NewAggregator is analyze.NewAggregator.
func NewAggregator(cfg AnalyzeConfig) *Aggregator { return analyze.NewAggregator(cfg) }

// ReadStatsRecording is attrib.ReadStatsRecording.
func ReadStatsRecording(path string) (*StatsRecording, error) { return attrib.ReadStatsRecording(path) }
