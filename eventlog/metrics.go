package eventlog

import (
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Fsyncs are the write-ahead log's fsyncs since the store opened, as
// Pebble times them: the system call alone, without the wait for the sync
// before it or the write.
type Fsyncs struct {
	Count uint64
	Sum   time.Duration
	// Buckets are cumulative counts by upper bound, in increasing order.
	Buckets []FsyncBucket
}

// FsyncBucket counts the fsyncs that took at most UpperBound.
type FsyncBucket struct {
	UpperBound time.Duration
	Count      uint64
}

// Fsyncs returns the write-ahead log's fsyncs so far; ok is false once
// the log is closed. Like DiskSize it is for a metrics scrape.
func (l *Log) Fsyncs() (f Fsyncs, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closing {
		return f, false
	}
	h := l.db.Metrics().LogWriter.FsyncLatency
	if h == nil {
		return f, false
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.Histogram == nil {
		return f, false
	}
	// Pebble observes nanoseconds.
	f.Count, f.Sum = m.Histogram.GetSampleCount(), time.Duration(m.Histogram.GetSampleSum())
	for _, b := range m.Histogram.Bucket {
		f.Buckets = append(f.Buckets, FsyncBucket{UpperBound: time.Duration(b.GetUpperBound()), Count: b.GetCumulativeCount()})
	}
	return f, true
}

// DiskSize returns the disk space the store uses: its tables, write-ahead
// log and manifests, as Pebble counts them; 0 once the log is closed. It
// is for a metrics scrape: it takes the lock appends take, briefly, so
// that the store cannot close under it.
func (l *Log) DiskSize() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closing {
		return 0
	}
	return l.db.Metrics().DiskSpaceUsage()
}

// synced reports a group commit to Options.OnSync: events is how many
// events it made durable, began when its write began.
func (l *Log) synced(events uint64, began time.Time) {
	if f := l.onSync.Load(); f != nil && *f != nil {
		(*f)(int(events), time.Since(began))
	}
}

// SetOnSync puts fn in the place of Options.OnSync from the next group
// commit on (nil: none), while the log runs: a standby's log, opened
// before its coordinator took over, reports to the active service's
// metrics once it becomes the service's.
func (l *Log) SetOnSync(fn func(events int, took time.Duration)) {
	l.onSync.Store(&fn)
}
