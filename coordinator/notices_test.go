package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/notify"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/oklog/ulid/v2"
)

// What needs a person reaches the webhook once it is durable, each kind
// once, signed: a reclaim, a dead task, a case waiting for the arbiters,
// its dead letter when no arbiter came, and an operator's override.
func TestNotifyPeople(t *testing.T) {
	secret := []byte("a secret of some length")
	var (
		mu  sync.Mutex
		got []notify.Notice
		bad []error
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := notify.Verify(secret, r.Header, body, time.Now(), time.Minute); err != nil {
			bad = append(bad, err)
		}
		var n notify.Notice
		if err := json.Unmarshal(body, &n); err != nil {
			bad = append(bad, err)
		}
		got = append(got, n)
	}))
	defer srv.Close()
	wh, err := notify.New(notify.Config{URL: srv.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close(context.Background())

	ns := natstest.Run(t)
	opts := Options{Notify: wh}
	opts.Core.Engine.ArbiterTimeout = 300 * time.Millisecond
	svc := startService(t, ns, t.TempDir(), opts)
	if _, err := svc.SetRules(t.Context(), []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"200ms","reclaim_to":"PENDING","max_retries":1,"operators":["lead"]}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, ns)
	subj := intents.Subjects{}
	submit := func(agent, body string) intents.Decision {
		t.Helper()
		return *natstest.Request[intents.Decision](t, nc, subj.Submit(agent), body)
	}
	claim := func(agent, task string) intents.Decision {
		t.Helper()
		d := submit(agent, fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":"%s","op":"merge","value":{"owner":%q,"status":"RUNNING"}}]}`,
			ulid.Make().String(), agent, task, agent))
		if d.Outcome != intents.OutcomeApplied {
			t.Fatalf("claim of %s: %+v", task, d)
		}
		return d
	}
	kinds := func() []notify.Kind {
		mu.Lock()
		defer mu.Unlock()
		var ks []notify.Kind
		for _, n := range got {
			ks = append(ks, n.Kind)
		}
		slices.Sort(ks)
		return ks
	}
	awaitKinds := func(want ...notify.Kind) {
		t.Helper()
		slices.Sort(want)
		natstest.CheckFor(t, 10*time.Second, fmt.Sprintf("notices %v", want), func() error {
			if k := kinds(); !slices.Equal(k, want) {
				return fmt.Errorf("notices %v", k)
			}
			return nil
		})
	}

	// Two tries of tasks.t1 whose leases run out: the second is past
	// max_retries 1.
	claim("w1", "tasks.t1")
	awaitKinds(notify.KindReclaim)
	claim("w1", "tasks.t1")
	awaitKinds(notify.KindReclaim, notify.KindReclaim, notify.KindDeadTask)

	// w1 holds doc.x; w2's write escalates, and no arbiter comes.
	submit("w1", `{"id":"`+ulid.Make().String()+`","agent":"w1","kind":"propose","lease_ms":600000,"writes":[{"path":"doc.x","op":"set"}]}`)
	nc.Publish(subj.Intents("w2"), []byte(`{"id":"`+ulid.Make().String()+`","agent":"w2","kind":"apply","on_conflict":"escalate","writes":[{"path":"doc.x","op":"set","value":1}]}`))
	awaitKinds(notify.KindReclaim, notify.KindReclaim, notify.KindDeadTask, notify.KindCase, notify.KindDeadLetter)

	// The operator takes tasks.t2 from w1.
	claim("w1", "tasks.t2")
	submit("lead", `{"id":"`+ulid.Make().String()+`","agent":"lead","kind":"apply","action":"cancel","writes":[{"path":"tasks.t2.owner","op":"delete"},{"path":"tasks.t2.status","op":"set","value":"CANCELLED"}]}`)
	awaitKinds(notify.KindReclaim, notify.KindReclaim, notify.KindDeadTask, notify.KindCase, notify.KindDeadLetter, notify.KindOverride)

	mu.Lock()
	defer mu.Unlock()
	ids := map[string]bool{}
	for _, n := range got {
		if ids[n.ID] || n.ID == "" || n.Summary == "" || n.Subject == "" {
			t.Errorf("notice %+v: empty, or its id seen before", n)
		}
		ids[n.ID] = true
		if n.Kind == notify.KindDeadTask && n.Subject != "tasks.t1" {
			t.Errorf("dead task %+v", n)
		}
	}
	if len(bad) > 0 {
		t.Errorf("bad POSTs: %v", bad)
	}
	// The receiver has a notice before the sender has its answer.
	n := uint64(len(got))
	natstest.CheckFor(t, 10*time.Second, "the notices counted as sent", func() error {
		if st := wh.Stats(); st.Sent != n || st.Failed != 0 || st.Dropped != 0 {
			return fmt.Errorf("stats %+v after %d notices", st, n)
		}
		return nil
	})
	f := scrape(t, svc.Registry())["coagent_webhook_notices_total"]
	if f == nil || len(f.Metric) != 3 {
		t.Fatalf("coagent_webhook_notices_total: %v", f)
	}
}
