package coordinator

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// The crash test runs this test binary again as a child that decides and
// commits batches of intents on a real, synced event log, and kills it with
// SIGKILL at random moments. The child says on stdout what it is about to
// commit and what was acknowledged:
//
//	intent <json>           an intent it is about to decide
//	enq <first> <last>      the batch it is about to commit
//	ack <last>              the batch is durable
const (
	envCrashDir    = "COAGENT_CRASH_DIR"
	envCrashRound  = "COAGENT_CRASH_ROUND"
	envCrashResend = "COAGENT_CRASH_RESEND"
)

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(envCrashDir)
	if dir == "" {
		t.Skip("run by TestCrashRecovery")
	}
	round, _ := strconv.Atoi(os.Getenv(envCrashRound))
	c, err := OpenCore(dir, CoreOptions{SnapshotEvery: 300})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	rng := rand.New(rand.NewPCG(uint64(round), 99))
	now := t0.Add(time.Duration(round) * time.Hour)
	var n uint64
	newIntent := func() *intents.Intent {
		n++
		var u ulid.ULID
		_ = u.SetTime(ulid.Timestamp(t0))
		u[10], u[14], u[15] = byte(round), byte(n>>8), byte(n)
		agent := "a" + strconv.Itoa(rng.IntN(3))
		in := &intents.Intent{ID: u.String(), Agent: agent, Kind: intents.KindApply}
		switch rng.IntN(3) {
		case 0:
			in.Writes = []intents.Write{{Path: "cnt.n", Op: intents.OpIncr}}
		case 1:
			in.Writes = []intents.Write{{Path: "doc.f" + strconv.Itoa(rng.IntN(20)), Op: intents.OpSet, Value: json.RawMessage(strconv.Itoa(rng.IntN(1000)))}}
		default:
			in.Kind, in.LeaseMS = intents.KindPropose, 50
			in.Writes = []intents.Write{{Path: "doc.f" + strconv.Itoa(rng.IntN(20)), Op: intents.OpSet}}
		}
		return in
	}
	// What the parent saw sent but not acknowledged last time is sent
	// again first, with the same ids, as an agent would.
	var resend []*intents.Intent
	if raw := os.Getenv(envCrashResend); raw != "" {
		if err := json.Unmarshal([]byte(raw), &resend); err != nil {
			fmt.Println("resend:", err)
			os.Exit(3)
		}
	}
	for {
		k := 1 + rng.IntN(8)
		for range k {
			var in *intents.Intent
			if len(resend) > 0 {
				in, resend = resend[0], resend[1:]
			} else {
				in = newIntent()
			}
			raw, _ := json.Marshal(in)
			fmt.Fprintf(out, "intent %s\n", raw)
			now = now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
			c.Decide(now, engine.Input{Agent: in.Agent, Raw: raw}, ViaStream)
		}
		c.Tick(now)
		first, last := c.eng.Seq()-uint64(len(c.out))+1, c.eng.Seq()
		fmt.Fprintf(out, "enq %d %d\n", first, last)
		out.Flush()
		p, err := c.Commit()
		if err != nil {
			fmt.Println("commit:", err)
			os.Exit(3)
		}
		if p == nil {
			continue
		}
		if err := p.Wait(t.Context()); err != nil {
			fmt.Println("wait:", err)
			os.Exit(3)
		}
		fmt.Fprintf(out, "ack %d\n", last)
		out.Flush()
	}
}

// A child appends batches on a synced log and is killed with SIGKILL at
// random moments, 20 times over. After each kill: no acknowledged batch is
// missing, the log ends on a batch boundary (no batch is half there),
// Verify passes, and the next child carries on from there — resending what
// was not acknowledged, which must be applied at most once.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process 20 times")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(2026, 11))
	var lastDurable uint64
	var resend []*intents.Intent
	sent := map[string]bool{}
	stale := 0 // rounds whose kill left the state behind the log
	for round := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.timeout=5m")
		resendJSON, _ := json.Marshal(resend)
		cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashRound+"="+strconv.Itoa(round+1),
			envCrashResend+"="+string(resendJSON))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after a random number of acknowledgements, at a random
		// moment after the last of them.
		killAfter := 5 + rng.IntN(60)
		ends := []uint64{lastDurable}
		var acked uint64
		var pending []*intents.Intent // sent since the last ack
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		acks := 0
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch f[0] {
			case "intent":
				var in intents.Intent
				if err := json.Unmarshal([]byte(strings.TrimPrefix(sc.Text(), "intent ")), &in); err != nil {
					t.Fatalf("round %d: child said %q: %v", round, sc.Text(), err)
				}
				pending = append(pending, &in)
				sent[in.ID] = true
			case "enq":
				last, _ := strconv.ParseUint(f[2], 10, 64)
				ends = append(ends, last)
			case "ack":
				acked, _ = strconv.ParseUint(f[1], 10, 64)
				pending = pending[:0]
				if acks++; acks == killAfter {
					time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
					cmd.Process.Signal(syscall.SIGKILL)
				}
			default:
				t.Fatalf("round %d: child said %q", round, sc.Text())
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended %v (%v), not by SIGKILL", round, cmd.ProcessState, err)
		}
		log, err := eventlog.Open(dir, nil)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		last := log.LastSeq()
		if last < acked {
			t.Fatalf("round %d: acknowledged up to %d, but the log ends at %d", round, acked, last)
		}
		if !slices.Contains(ends, last) {
			t.Fatalf("round %d: the log ends at %d, inside a batch (batch ends %v)", round, last, ends[max(0, len(ends)-3):])
		}
		// The state entries trail the events: the kill lost those of the
		// last stretch, and Verify compares the ones kept with the fold to
		// where they end.
		if log.StateSeq() < last {
			stale++
		}
		if _, err := replay.Verify(log, engine.Config{}, nil); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		checkIndex(t, round, log)
		log.Close()
		// A coordinator opening the log puts the whole state back.
		c, err := OpenCore(dir, CoreOptions{})
		if err != nil {
			t.Fatalf("round %d: open the core: %v", round, err)
		}
		if c.Log().StateSeq() != last {
			t.Fatalf("round %d: opened by a coordinator, the state is complete to %d, the log to %d", round, c.Log().StateSeq(), last)
		}
		if _, err := replay.Verify(c.Log(), engine.Config{}, nil); err != nil {
			t.Fatalf("round %d: opened by a coordinator: %v", round, err)
		}
		c.Close()
		lastDurable = last
		resend = slices.Clone(pending)
	}
	// Exactly once: every intent sent has at most one change and exactly
	// one final decision that is not a duplicate, unless it was lost
	// unacknowledged in the last round.
	log, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	changes, finals := appliedAndDecided(t, log)
	lost := map[string]bool{}
	for _, in := range resend {
		lost[in.ID] = true
	}
	for id := range sent {
		if changes[id] > 1 {
			t.Fatalf("intent %s applied %d times", id, changes[id])
		}
		if finals[id] != 1 && !(lost[id] && finals[id] == 0) {
			t.Fatalf("intent %s has %d final decisions", id, finals[id])
		}
	}
	if stale == 0 {
		t.Fatal("no kill left the state behind the log: the test did not try its recovery")
	}
	t.Logf("%d intents over 20 kills; the log ends at %d; %d kills left the state behind it", len(sent), log.LastSeq(), stale)
}

// checkIndex asks log for the events of each agent, type and transaction
// and compares the answers with a scan: the index a kill left behind the
// log, and Open completed, must miss nothing and invent nothing.
func checkIndex(t *testing.T, round int, log *eventlog.Log) {
	t.Helper()
	var all []*intents.Event
	if err := log.Scan(1, 0, func(ev *intents.Event) error { all = append(all, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	queries := map[eventlog.Query]bool{}
	for _, ev := range all {
		queries[eventlog.Query{Agent: ev.Agent}] = true
		queries[eventlog.Query{Type: ev.Type}] = true
		queries[eventlog.Query{Txn: ev.Txn}] = true
	}
	for q := range queries {
		var want, got []uint64
		for _, ev := range all {
			if (q.Agent == "" || ev.Agent == q.Agent) && (q.Type == "" || ev.Type == q.Type) && (q.Txn == "" || ev.Txn == q.Txn) {
				want = append(want, ev.Seq)
			}
		}
		for q.From = 1; q.From != 0; {
			q.Limit = 500
			evs, next, err := log.Query(q)
			if err != nil {
				t.Fatalf("round %d: query %+v: %v", round, q, err)
			}
			for _, ev := range evs {
				got = append(got, ev.Seq)
			}
			q.From = next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: query %+v: %d events, a scan finds %d", round, q, len(got), len(want))
		}
	}
}

// appliedAndDecided counts, per intent id in the log, its changes and its
// final decisions that are not duplicates: exactly once means one of each.
func appliedAndDecided(t *testing.T, log *eventlog.Log) (changes, finals map[string]int) {
	t.Helper()
	changes, finals = map[string]int{}, map[string]int{}
	err := log.Scan(1, 0, func(ev *intents.Event) error {
		switch {
		case ev.Change != nil:
			changes[ev.Intent]++
		case ev.Decision != nil && !ev.Decision.Duplicate && ev.Decision.Outcome.Final():
			finals[ev.Decision.Intent]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return changes, finals
}
