package attrib

import (
	"bufio"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// StatsFormatVersion is the version of the stats table recording layout
// (RECORDING.md, "stats tables").
const StatsFormatVersion = 1

const statsMagic = "# holdtime stats v"

// TableRecorder appends polls of one admin table to a file: a version line
// naming the table, a header (sample_ts then the table's columns), and one
// line per row per poll, escaped like the processlist recording. When the
// table's columns change (a ProxySQL upgrade under a running collector), a
// new header line is written.
type TableRecorder struct {
	f    *os.File
	w    *bufio.Writer
	cols []string
	buf  []byte
}

func NewTableRecorder(path, table string) (*TableRecorder, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("record %s: %w: check the --record directory", table, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("record %s: %w: check the --record directory", table, err)
	}
	r := &TableRecorder{f: f, w: bufio.NewWriter(f)}
	fmt.Fprintf(r.w, "%s%d %s\n", statsMagic, StatsFormatVersion, table)
	return r, nil
}

func (r *TableRecorder) Write(at time.Time, cols []string, rows [][]sql.NullString) error {
	if !slices.Equal(cols, r.cols) {
		r.cols = slices.Clone(cols)
		r.w.WriteString("sample_ts\t" + strings.Join(cols, "\t") + "\n")
	}
	ts := at.UTC().AppendFormat(nil, sampleTimeLayout)
	for _, row := range rows {
		r.buf = append(r.buf[:0], ts...)
		for _, v := range row {
			r.buf = appendTSVString(append(r.buf, '\t'), v)
		}
		r.buf = append(r.buf, '\n')
		if _, err := r.w.Write(r.buf); err != nil {
			return fmt.Errorf("write stats recording: %w: check free disk space", err)
		}
	}
	if err := r.w.Flush(); err != nil {
		return fmt.Errorf("write stats recording: %w: check free disk space", err)
	}
	return nil
}

func (r *TableRecorder) Close() error {
	if err := r.w.Flush(); err != nil {
		r.f.Close()
		return err
	}
	return r.f.Close()
}

// StatsRecording is a stats table recording read back whole (tests, tools).
type StatsRecording struct {
	Table   string
	Columns []string // without sample_ts; the last header in the file
	Rows    []StatsRecordingRow
}

// StatsRecordingRow is one recorded row.
type StatsRecordingRow struct {
	SampleTime time.Time
	Values     []sql.NullString
}

// ReadStatsRecording reads a stats table recording written by `holdtime
// collect --record`. It refuses versions it does not know.
func ReadStatsRecording(path string) (*StatsRecording, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open stats recording: %w: check the path", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	rec := &StatsRecording{}
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			rest, ok := strings.CutPrefix(text, statsMagic)
			v, table, _ := strings.Cut(rest, " ")
			if !ok || v != fmt.Sprint(StatsFormatVersion) {
				return nil, fmt.Errorf("%s: not a version %d stats recording (first line %q): use the holdtime that recorded it", path, StatsFormatVersion, Truncate(text, 40))
			}
			rec.Table = table
			continue
		}
		fields := strings.Split(text, "\t")
		if fields[0] == "sample_ts" {
			rec.Columns = fields[1:]
			continue
		}
		if len(fields) != len(rec.Columns)+1 {
			return nil, fmt.Errorf("%s:%d: %d fields, header has %d", path, line, len(fields), len(rec.Columns)+1)
		}
		ts, err := parseSampleTime(fields[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		row := StatsRecordingRow{SampleTime: ts}
		for _, f := range fields[1:] {
			row.Values = append(row.Values, UnescapeTSV(f))
		}
		rec.Rows = append(rec.Rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return rec, nil
}
