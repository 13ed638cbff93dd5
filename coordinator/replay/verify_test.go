package replay_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/cockroachdb/pebble/v2"
)

// A *MismatchError names the first path where the materialized state and
// the fold differ, each side's entry there, and the fold as Verify would
// have reported it had the two agreed: whether the store changed a path,
// lacks one (the first, so that the fold's path comes before the store's
// first) or has one the fold does not.
func TestVerifyMismatchReport(t *testing.T) {
	for _, c := range []struct {
		name        string
		tamper      func(*pebble.Batch) error
		path        string
		log, folded string // prefixes of each side's description
	}{
		{"changed", func(b *pebble.Batch) error {
			return b.Set(append([]byte{'s'}, "doc.b"...), []byte{1, 99, 99, '7'}, nil)
		},
			"doc.b", "leaf version=99 mod_rev=99 value=7", "leaf version="},
		{"missing", func(b *pebble.Batch) error { return b.Delete(append([]byte{'s'}, "cnt"...), nil) },
			"cnt", "nothing", "object version="},
		{"extra", func(b *pebble.Batch) error { return b.Set(append([]byte{'s'}, "zzz"...), []byte{1, 1, 1, '1'}, nil) },
			"zzz", "leaf version=1 mod_rev=1 value=1", "nothing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := newWriter(t, dir, 1<<40, 3)
			for range 200 {
				w.step()
			}
			w.close()
			hash, rev, last := verified(t, dir)

			db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
			if err != nil {
				t.Fatal(err)
			}
			b := db.NewBatch()
			if err := c.tamper(b); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(pebble.Sync); err != nil {
				t.Fatal(err)
			}
			db.Close()
			log, err := eventlog.Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer log.Close()
			_, err = replay.Verify(log, engine.Config{}, nil)
			var me *replay.MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("verify after tampering: %v, want a *replay.MismatchError", err)
			}
			if me.Path != c.path || !strings.HasPrefix(me.Log, c.log) || !strings.HasPrefix(me.Folded, c.folded) {
				t.Errorf("mismatch at %s: stored %q, folded %q; want at %s: stored %q…, folded %q…", me.Path, me.Log, me.Folded, c.path, c.log, c.folded)
			}
			if me.FoldedHash != hash || me.FoldedRev != rev || me.LogLastEvent != last {
				t.Errorf("the fold: hash %s rev %d last event %d, want %s %d %d (as before the tampering)",
					me.FoldedHash, me.FoldedRev, me.LogLastEvent, hash, rev, last)
			}
		})
	}
}

// verified is what Verify reports of the untouched store in dir: the fold's
// hash and rev, and the last event.
func verified(t *testing.T, dir string) (hash string, rev, last uint64) {
	t.Helper()
	log, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if hash, err = replay.Verify(log, engine.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	eng, _, err := replay.Rebuild(log, engine.Config{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if eng.State().Rev() == 0 || log.LastSeq() == 0 {
		t.Fatal("the driver wrote nothing")
	}
	return hash, eng.State().Rev(), log.LastSeq()
}
