package console_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/oklog/ulid/v2"
)

// TestStoryOfAnIntent: an intent's story is its own events, the notice
// sent to the holder it waits on among them, and those of the transaction
// it opened, its commit's too; not the events of the transaction it waited
// on, which the notice names.
func TestStoryOfAnIntent(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	txn, err := w.w1.Propose(ctx, intents.Propose("hold").Write("report.intro", intents.OpSet).Lease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	txn.StopRenewing()
	in, err := intents.Apply("wait").Set("report.intro", "w3's").Wait(time.Minute).Build()
	if err != nil {
		t.Fatal(err)
	}
	in.ID = ulid.Make().String()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.w3.Submit(ctx, in)
	}()
	log := w.svc.Core().Log()
	natstest.CheckFor(t, 10*time.Second, "the waiter parked", func() error {
		if evs, _, err := log.Query(eventlog.Query{Type: intents.EventWait, Agent: "w3"}); err != nil || len(evs) == 0 {
			return fmt.Errorf("no wait event of w3 (%v)", err)
		}
		return nil
	})
	if _, err := txn.Commit(ctx, intents.Apply("hold").Set("report.intro", "w1's")); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	grants, _, err := log.Query(eventlog.Query{Type: intents.EventGrant, Txn: txn.ID()})
	if err != nil || len(grants) != 1 {
		t.Fatalf("the grant of %s: %v, %v", txn.ID(), grants, err)
	}
	propose := grants[0].Intent

	type story struct {
		Events   []*intents.Event `json:"events"`
		Complete bool             `json:"complete"`
	}
	read := func(id string) (types []intents.EventType, evs []*intents.Event) {
		t.Helper()
		var s story
		if code := w.get("/api/story?q="+id, &s); code != 200 || !s.Complete {
			t.Fatalf("the story of %s: %d, complete %v", id, code, s.Complete)
		}
		for i, ev := range s.Events {
			if i > 0 && ev.Seq <= s.Events[i-1].Seq {
				t.Fatalf("the story of %s: event %d after %d", id, ev.Seq, s.Events[i-1].Seq)
			}
			types = append(types, ev.Type)
		}
		return types, s.Events
	}

	types, evs := read(in.ID)
	for _, ev := range evs {
		if ev.Intent != in.ID {
			t.Errorf("the waiter's story holds an event of %q: %+v", ev.Intent, ev)
		}
	}
	for _, want := range []intents.EventType{intents.EventIntent, intents.EventWait, intents.EventNotice, intents.EventChange, intents.EventDecision} {
		if !slices.Contains(types, want) {
			t.Errorf("the waiter's story %v has no %s event", types, want)
		}
	}
	if slices.Contains(types, intents.EventGrant) || slices.Contains(types, intents.EventRelease) {
		t.Errorf("the waiter's story %v holds the events of the transaction it waited on", types)
	}

	types, evs = read(propose)
	var commit string
	for _, ev := range evs {
		switch {
		case ev.Intent == propose:
		case ev.Txn == txn.ID() && ev.Type == intents.EventNotice: // the waiter's, to w1
		case ev.Txn == txn.ID() && (commit == "" || ev.Intent == commit):
			commit = ev.Intent
		default:
			t.Errorf("the propose's story holds an event of neither it nor its transaction: %+v", ev)
		}
	}
	for _, want := range []intents.EventType{intents.EventIntent, intents.EventGrant, intents.EventChange, intents.EventRelease} {
		if !slices.Contains(types, want) {
			t.Errorf("the propose's story %v has no %s event", types, want)
		}
	}
	if commit == "" || commit == propose {
		t.Error("the propose's story has no event of its commit")
	}
}
