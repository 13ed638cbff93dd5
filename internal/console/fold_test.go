package console

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/coagent/coagent/intents"
)

// TestFoldRedactedChange: a change whose values the readers rules keep
// from the console's reader (a value gone, an incr's or an append's too)
// folds without an error, keeping the log's versions, and its paths are
// listed as redacted until a later write of theirs is seen whole.
func TestFoldRedactedChange(t *testing.T) {
	change := func(seq uint64, redacted []string, writes ...intents.Applied) *intents.Event {
		return &intents.Event{Seq: seq, Type: intents.EventChange, Change: &intents.Change{Writes: writes, Redacted: redacted}}
	}
	w := func(path string, op intents.Op, value string, oldV, newV uint64) intents.Applied {
		return intents.Applied{Path: path, Op: op, Value: json.RawMessage(value), OldVersion: oldV, NewVersion: newV}
	}
	f := newFolder()
	for _, ev := range []*intents.Event{
		change(1, []string{"secrets.k"}, w("secrets.k", intents.OpSet, "", 0, 1)),
		change(2, []string{"secrets.n"}, w("secrets.n", intents.OpIncr, "", 0, 1)),
		change(3, []string{"secrets.n"}, w("secrets.n", intents.OpIncr, "", 1, 2)),
		change(4, []string{"secrets.log"}, w("secrets.log", intents.OpAppend, "", 0, 1)),
		change(5, []string{"doc.a.pin"}, w("doc.a", intents.OpSet, `{"title":"T"}`, 0, 1)),
		change(6, nil, w("secrets.k", intents.OpSet, `"open"`, 1, 2)),
	} {
		if err := f.apply(ev); err != nil {
			t.Fatalf("fold change %d: %v", ev.Seq, err)
		}
	}
	if got, want := f.redactedPaths(), []string{"doc.a.pin", "secrets.log", "secrets.n"}; !slices.Equal(got, want) {
		t.Errorf("redacted paths %v, want %v", got, want)
	}
	versions := map[string]uint64{}
	for _, n := range f.tree.Export() {
		versions[n.Path] = n.Version
	}
	for path, want := range map[string]uint64{"secrets.k": 2, "secrets.n": 2, "secrets.log": 1, "doc.a": 1, "secrets": 5} {
		if versions[path] != want {
			t.Errorf("%s at version %d, want %d", path, versions[path], want)
		}
	}
}
