package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
)

// Rebuild returns an engine folded from the log up to event until (0: all
// of it), starting from the latest usable snapshot at or before it, and the
// seq of that snapshot (0 if none). It fails with eventlog.ErrCompacted if
// the events it needs are gone.
func Rebuild(log *eventlog.Log, cfg engine.Config, until uint64) (*engine.Engine, uint64, error) {
	return rebuild(log, cfg, until, nil)
}

// rebuild is Rebuild telling progress (if not nil) of each event folded.
func rebuild(log *eventlog.Log, cfg engine.Config, until uint64, progress eventlog.Progress) (*engine.Engine, uint64, error) {
	if until == 0 || until > log.LastSeq() {
		until = log.LastSeq()
	}
	if until == 0 { // an empty log
		eng, err := engine.New(cfg)
		return eng, 0, err
	}
	eng, at, err := restoreLatest(log, cfg, until)
	if err != nil {
		return nil, 0, err
	}
	from := at + 1
	if from < log.FirstSeq() {
		return nil, 0, fmt.Errorf("rebuild at %d: %w (the log starts at %d and no snapshot covers the gap)", until, eventlog.ErrCompacted, log.FirstSeq())
	}
	if from <= until {
		if err := log.Fold(from, until, folding(eng, until, progress)); err != nil {
			return nil, 0, fmt.Errorf("rebuild: %w", err)
		}
	}
	return eng, at, nil
}

// folding is what a fold to event last calls with each event: eng.Apply,
// and progress after it when progress is not nil. Without progress the
// fold pays nothing for it.
func folding(eng *engine.Engine, last uint64, progress eventlog.Progress) func(*intents.Event) error {
	if progress == nil {
		return eng.Apply
	}
	return func(ev *intents.Event) error {
		if err := eng.Apply(ev); err != nil {
			return err
		}
		progress(ev.Seq, last)
		return nil
	}
}

// restoreLatest returns an engine restored from the latest snapshot at or
// before until that restores, and its seq; a new engine and 0 when there
// is none. A snapshot that does not restore (written by a build whose
// checks differ, say) is passed over for the one before it; when none
// restores, the log is folded from its first event, if compaction kept it.
func restoreLatest(log *eventlog.Log, cfg engine.Config, until uint64) (*engine.Engine, uint64, error) {
	var refused []error
	none := func() (*engine.Engine, uint64, error) {
		if len(refused) > 0 && log.FirstSeq() > 1 {
			return nil, 0, fmt.Errorf("rebuild at %d: no snapshot restores and the log starts at %d: %w", until, log.FirstSeq(), errors.Join(refused...))
		}
		eng, err := engine.New(cfg)
		return eng, 0, err
	}
	for at := until; at > 0; {
		snapAt, data, err := log.Snapshot(at)
		if errors.Is(err, eventlog.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		var snap engine.Snapshot
		err = json.Unmarshal(data, &snap)
		var eng *engine.Engine
		if err == nil {
			eng, err = engine.Restore(cfg, &snap)
		}
		if err == nil {
			return eng, snapAt, nil
		}
		refused = append(refused, fmt.Errorf("snapshot at %d: %w", snapAt, err))
		at = snapAt - 1 // 0 ends the search: Snapshot(0) would be the latest again
	}
	return none()
}

// Options says where Run stops and whom it tells as it goes. The zero
// value folds the whole log with the engine's defaults.
type Options struct {
	// Engine configures the engine the replay rebuilds.
	Engine engine.Config
	// Seq is the last event folded: the state is as it was right after
	// it. With Seq 0, At, if not zero, stops it at the last event at or
	// before that time; with neither, the whole log is folded.
	Seq uint64
	At  time.Time
	// Progress, if set, is told of each event folded (from the snapshot
	// the replay starts from, if any): coagent replay's progress line on a
	// large log.
	Progress eventlog.Progress
}

// Run rebuilds the state as opts says: after an event, at a time, or at
// the log's end. It fails with eventlog.ErrCompacted if that point is
// older than what compaction kept.
func Run(log *eventlog.Log, opts Options) (*engine.Engine, error) {
	cfg, seq, at, progress := opts.Engine, opts.Seq, opts.At, opts.Progress
	if seq == 0 && !at.IsZero() {
		var err error
		if seq, err = seqAt(log, at); err != nil {
			return nil, err
		}
		if seq == 0 {
			return engine.New(cfg)
		}
	}
	if seq != 0 && seq < log.FirstSeq()-1 {
		return nil, fmt.Errorf("replay until %d: %w (the log starts at %d)", seq, eventlog.ErrCompacted, log.FirstSeq())
	}
	eng, _, err := rebuild(log, cfg, seq, progress)
	return eng, err
}

// seqAt finds the last event at or before t by binary search over sequence
// numbers (event times never go back: the engine's clock only moves on).
func seqAt(log *eventlog.Log, t time.Time) (uint64, error) {
	lo, hi := log.FirstSeq(), log.LastSeq()
	if hi < lo {
		return 0, nil
	}
	first, err := log.Event(lo)
	if err != nil {
		return 0, err
	}
	if first.Time.After(t) {
		if lo > 1 {
			return 0, fmt.Errorf("replay until %s: %w (the first event kept is at %s)", t.Format(time.RFC3339Nano), eventlog.ErrCompacted, first.Time.Format(time.RFC3339Nano))
		}
		return 0, nil
	}
	for lo < hi { // invariant: event lo is at or before t
		mid := lo + (hi-lo+1)/2
		ev, err := log.Event(mid)
		if err != nil {
			return 0, err
		}
		if ev.Time.After(t) {
			hi = mid - 1
		} else {
			lo = mid
		}
	}
	return lo, nil
}
