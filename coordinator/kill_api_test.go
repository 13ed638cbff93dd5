package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// killAPIClient plays one agent on the main path: it submits killPer incr
// intents by request/reply on coagent.api.submit.<agent>, one at a time.
// A request that finds no coordinator, times out or is answered
// unavailable is sent again with the same intent, until a decision comes;
// that decision must be applied (a duplicate repeating the recorded
// applied one counts).
func killAPIClient(ctx context.Context, nc *nats.Conn, i int, tokens <-chan struct{}, tr *killTracker) error {
	agent := "k" + strconv.Itoa(i)
	subject := intents.Subjects{}.Submit(agent)
	for sent := 0; sent < killPer; sent++ {
		select {
		case <-tokens:
		case <-ctx.Done():
			return fmt.Errorf("agent %s: %d sent: %w", agent, sent, ctx.Err())
		}
		id := ulid.Make().String()
		raw := fmt.Appendf(nil, `{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":"ctr.n","op":"incr"}]}`, id, agent)
		tr.published(id)
		for tries := 0; ; tries++ {
			if tries > 0 {
				tr.republished.Add(1)
			}
			rctx, cancel := context.WithTimeout(ctx, killRetry)
			m, err := nc.RequestWithContext(rctx, subject, raw)
			cancel()
			if ctx.Err() != nil {
				return fmt.Errorf("agent %s: %s undecided: %w", agent, id, ctx.Err())
			}
			if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
				continue // no coordinator, a lost reply, or unavailable: the same intent again
			}
			var d intents.Decision
			if err := json.Unmarshal(m.Data, &d); err != nil {
				return fmt.Errorf("agent %s: decision %s: %w", agent, m.Data, err)
			}
			if d.Intent != id || d.Agent != agent || d.Outcome != intents.OutcomeApplied {
				return fmt.Errorf("agent %s: intent %s answered %s", agent, id, m.Data)
			}
			if d.Duplicate {
				tr.duplicates.Add(1)
			}
			tr.decided(id, time.Now())
			break
		}
	}
	return nil
}

// The coordinator runs in a child process, killed with SIGKILL three times
// at random moments while 8 agents submit 1,000 incr intents on one path by
// request/reply, and restarted each time on the same data directory. An
// agent whose request timed out sends the same intent again. Afterwards
// the counter is exactly 1,000, the log holds exactly one change and one
// final decision per intent, Verify passes, and replaying the log gives
// the state the child had.
func TestServiceKillAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process 3 times")
	}
	ns := natstest.Run(t)
	url := ns.ClientURL()
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 11))
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	child, _ := startKillChild(t, url, dir)
	const total = killClients * killPer
	tr := &killTracker{undecided: map[string]bool{}, all: map[string]bool{}, progress: make(chan killProgress, total)}
	tokens := make(chan struct{}, total)
	for range total {
		tokens <- struct{}{}
	}
	clientErrs := make(chan error, killClients)
	var wg sync.WaitGroup
	for i := range killClients {
		nc := natstest.Connect(t, ns)
		wg.Go(func() {
			if err := killAPIClient(ctx, nc, i, tokens, tr); err != nil {
				clientErrs <- err
			}
		})
	}
	count := 0
	next := func() {
		t.Helper()
		select {
		case <-tr.progress:
			count++
		case err := <-clientErrs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("%d of %d intents decided: %v", count, total, ctx.Err())
		}
	}
	cut := 80 + rng.IntN(150)
	for k := range 3 {
		for count < cut {
			next()
		}
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // a random moment, not a synchronisation
		child.kill(t)
		child, _ = startKillChild(t, url, dir)
		t.Logf("kill %d after %d decisions; restarted", k+1, cut)
		cut += 150 + rng.IntN(100)
	}
	for count < total {
		next()
	}
	wg.Wait()
	close(clientErrs)
	for err := range clientErrs {
		t.Fatal(err)
	}
	t.Logf("%d intents decided; %d sent again with the same id, %d answered as duplicates", total, tr.republished.Load(), tr.duplicates.Load())
	liveHash, liveRev := child.stop(t)
	checkKillLog(t, dir, tr, total, liveHash, liveRev)
}
