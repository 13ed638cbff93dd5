package eventlog

import "time"

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
	if l.onSync != nil {
		l.onSync(int(events), time.Since(began))
	}
}
