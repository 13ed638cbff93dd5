package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
)

// bgProc is the coagent binary running in the background: its stdout and
// stderr come a line at a time.
type bgProc struct {
	cmd            *exec.Cmd
	stdout, stderr chan string
	done           chan error
}

// startBin starts the binary with args; it is killed when the test ends
// if it still runs.
func startBin(t *testing.T, args ...string) *bgProc {
	t.Helper()
	cmd := exec.Command(coagentBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &bgProc{cmd: cmd, stdout: make(chan string, 1024), stderr: make(chan string, 1024), done: make(chan error, 1)}
	var read sync.WaitGroup
	lines := func(r io.Reader, ch chan string) {
		defer read.Done()
		s := bufio.NewScanner(r)
		for s.Scan() {
			ch <- s.Text()
		}
		close(ch)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read.Add(2)
	go lines(out, p.stdout)
	go lines(errOut, p.stderr)
	// Wait closes the pipes once the process is gone, and with them what
	// the readers have not read yet: the process's last lines.
	go func() { read.Wait(); p.done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return p
}

// line is the next line of ch; the test fails after 30 s without one.
func line(t *testing.T, ch chan string, what string) string {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the stream ended", what)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: nothing in 30 s", what)
	}
	return ""
}

// lineMatching reads lines of ch until one matches re, and returns it.
func lineMatching(t *testing.T, ch chan string, re string) string {
	t.Helper()
	for {
		if l := line(t, ch, "waiting for "+re); regexp.MustCompile(re).MatchString(l) {
			return l
		}
	}
}

// interrupt sends SIGINT and returns the exit status and what stdout said
// after what was read.
func (p *bgProc) interrupt(t *testing.T) (int, []string) {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for l := range p.stdout {
		rest = append(rest, l)
	}
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), rest
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, rest
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30 s after SIGINT")
	}
	return -1, nil
}

// freeAddr is a loopback address nothing listens on (as far as the
// kernel's choice of a free port goes).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func set(id, agent, path string, value any) string {
	v, _ := json.Marshal(value)
	return fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":%q,"op":"set","value":%s}]}`, id, agent, path, v)
}

// submitOK submits an intent through the binary and fails the test
// unless it is applied or granted.
func submitOK(t *testing.T, url, intent string) {
	t.Helper()
	if p := runBin(t, nil, intent, "submit", "-", "--nats", url); p.status != 0 {
		t.Fatalf("submit %s: %+v", intent, p)
	}
}

// TestNoServer: every client command fails at once, on one line naming
// the URL and one saying what to do, exit 1.
func TestNoServer(t *testing.T) {
	url := "nats://" + freeAddr(t)
	hint := "start one with 'coagent serve', or point at one with --nats URL or $NATS_URL"
	for _, args := range [][]string{
		{"submit", "-"}, {"state", "x"}, {"state", "--prefix", "x"}, {"rules", "get"}, {"rules", "set", "/dev/null"},
		{"conflicts", "top"}, {"dlq", "list"}, {"dlq", "retry", "X"}, {"txn", "list"}, {"watch", "x"}, {"log"}, {"log", "--follow"},
	} {
		start := time.Now()
		p := runBin(t, nil, set(ulid.Make().String(), "w1", "a", 1), append(args, "--nats", url)...)
		want := "coagent: no NATS server at " + url + "\n" + hint + "\n"
		if args[0] == "log" {
			want = "coagent: no NATS server at " + url + "\n" + hint + "; or read a stopped server's log with --data DIR\n"
		}
		if p.status != 1 || p.stdout != "" || p.stderr != want {
			t.Errorf("coagent %s: exit %d, stdout %q, stderr %q, want %q", strings.Join(args, " "), p.status, p.stdout, p.stderr, want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("coagent %s took %s to say there is no server", strings.Join(args, " "), d)
		}
	}
	// Where $NATS_URL named the server, the message says so.
	p := runBin(t, []string{"NATS_URL=" + url}, "", "state", "x")
	if want := "coagent: no NATS server at " + url + " ($NATS_URL)\n" + hint + "\n"; p.status != 1 || p.stderr != want {
		t.Errorf("state with $NATS_URL: %+v, want stderr %q", p, want)
	}
}

// TestArbiterWaitsForServer: an arbiter started before the server waits
// for it, says so once, and serves the cases once the server is there.
func TestArbiterWaitsForServer(t *testing.T) {
	addr := freeAddr(t)
	url := "nats://" + addr
	arb := startBin(t, "arbiter", "--policy", "priority", "--name", "judge", "--nats", url)
	lineMatching(t, arb.stderr, `msg="waiting for a NATS server" arbiter=judge url=`+regexp.QuoteMeta(url)+` hint=`)

	_, stop := serve(t, filepath.Join(t.TempDir(), "data"), "--listen", addr)
	defer stop()
	lineMatching(t, arb.stderr, `msg=connected arbiter=judge url=`+regexp.QuoteMeta(url))
	if l := line(t, arb.stdout, "the arbiter's start"); l != "coagent: arbiter judge (policy priority) on "+url {
		t.Fatalf("arbiter stdout: %q", l)
	}

	sub, esc := escalate(t, url, 1, 9)
	if d := natstest.Next[intents.Decision](t, sub); d.Intent != esc || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("the arbiter's decision: %+v", d)
	}
	lineMatching(t, arb.stderr, `msg=resolved .*escalation=`+esc)
	if status, rest := arb.interrupt(t); status != 0 || len(rest) != 1 || rest[0] != "coagent: arbiter stopped" {
		t.Fatalf("arbiter after SIGINT: exit %d, stdout %q", status, rest)
	}
}

// TestArbiterWaitsForCoordinator: on a server without a coordinator yet,
// the arbiter waits for the coordinator's stream, and then serves.
func TestArbiterWaitsForCoordinator(t *testing.T) {
	url := natstest.Run(t).ClientURL()
	arb := startBin(t, "arbiter", "--policy", "reject", "--nats", url)
	lineMatching(t, arb.stderr, `msg="waiting for the coordinator" arbiter=reject stream=COAGENT_ARBITER`)
	_, stop := serve(t, filepath.Join(t.TempDir(), "data"), "--nats", url)
	defer stop()
	sub, esc := escalate(t, url, 0, 0)
	if d := natstest.Next[intents.Decision](t, sub); d.Intent != esc || d.Reason != intents.ReasonArbiterRejected || !strings.Contains(d.Detail, "arbiter reject") {
		t.Fatalf("the arbiter's decision: %+v", d)
	}
}

// escalate opens a case on the coordinator at url: w1 holds doc.title in a
// transaction of priority holder, and w2's apply of priority priority
// escalates against it through the intents stream. It returns the
// subscription to w2's decisions, past the escalated one, and the id of
// w2's intent.
func escalate(t *testing.T, url string, holder, priority int) (*nats.Subscription, string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	subj := intents.Subjects{}
	sub, err := nc.SubscribeSync(subj.Decisions("w2"))
	if err != nil {
		t.Fatal(err)
	}
	submitOK(t, url, fmt.Sprintf(`{"id":%q,"agent":"w1","kind":"propose","priority":%d,"lease_ms":600000,"writes":[{"path":"doc.title","op":"set"}]}`, ulid.Make().String(), holder))
	esc := ulid.Make().String()
	if err := nc.Publish(subj.Intents("w2"), fmt.Appendf(nil, `{"id":%q,"agent":"w2","kind":"apply","priority":%d,"on_conflict":"escalate","writes":[{"path":"doc.title","op":"set","value":"Q4"}]}`, esc, priority)); err != nil {
		t.Fatal(err)
	}
	if d := natstest.Next[intents.Decision](t, sub); d.Outcome != intents.OutcomeEscalated {
		t.Fatalf("escalate: %+v", d)
	}
	return sub, esc
}
