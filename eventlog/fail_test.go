package eventlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/coagent/coagent/intents"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

var errDisk = errors.New("injected disk failure")

// walFails fails every write and sync of the WAL (*.log) once it is on,
// as a full or failing disk would.
func walFails() *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".log") {
				return errDisk
			}
		}
		return nil
	})}
}

// envFailDir makes TestWriteFailureChild run: the log it writes to.
const envFailDir = "COAGENT_FAIL_DIR"

// TestWriteFailureChild appends 30 batches, saying "ack <last>" for each,
// then breaks the disk, says "broken", and appends on. The log must end
// the process before it acknowledges anything more; if it does not, the
// child says what happened and exits cleanly, which the parent refuses.
func TestWriteFailureChild(t *testing.T) {
	dir := os.Getenv(envFailDir)
	if dir == "" {
		t.Skip("run by TestWriteFailure")
	}
	broken := walFails()
	l, err := Open(dir, &Options{IndexEvery: 10, Pebble: &pebble.Options{FS: errorfs.Wrap(vfs.Default, broken)}})
	if err != nil {
		t.Fatal(err)
	}
	g := &gen{rng: rand.New(rand.NewPCG(9, 9))}
	for range 30 {
		b := g.batch(3)
		if err := l.Append(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("ack %d\n", b.Events[len(b.Events)-1].Seq)
	}
	broken.On()
	fmt.Println("broken")
	for range 1000 {
		b := g.batch(3)
		if err := l.Append(context.Background(), b); err != nil {
			fmt.Printf("append failed and the process lives: %v\n", err)
			break
		}
		fmt.Printf("ack %d\n", b.Events[len(b.Events)-1].Seq)
	}
	fmt.Printf("close: %v\n", l.Close())
}

// TestWriteFailure: once the disk fails, the log ends the process without
// acknowledging another batch, and the log reopened on a working disk
// ends at the last batch it acknowledged, its queries matching a scan.
// The end is a panic in the committer, naming the log and the failure:
// Pebble cannot write after a failed write, and after a failed fsync the
// file's contents are unknown, so only a restart can go on (walFailed).
func TestWriteFailure(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriteFailureChild$", "-test.v", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), envFailDir+"="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child ended with %v, want a failure\nstdout:\n%s", err, out)
	}
	if !strings.Contains(stderr.String(), errDisk.Error()) || !strings.Contains(stderr.String(), "eventlog "+dir) {
		t.Fatalf("child's end does not name the log and the disk failure:\n%s", stderr.String())
	}
	var acked uint64
	broken := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case line == "broken":
			broken = true
		case strings.HasPrefix(line, "ack "):
			if broken {
				t.Fatalf("acknowledged after the disk failed: %q", line)
			}
			acked, _ = strconv.ParseUint(strings.TrimPrefix(line, "ack "), 10, 64)
		case strings.HasPrefix(line, "append failed"), strings.HasPrefix(line, "close:"):
			t.Fatalf("the log went on after the disk failed: %q", line)
		}
	}
	if !broken || acked == 0 {
		t.Fatalf("the child did not get to break the disk:\n%s", out)
	}

	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.LastSeq() != acked {
		t.Fatalf("the log ends at %d, the last acknowledged batch at %d", l.LastSeq(), acked)
	}
	var all []*intents.Event
	if err := l.Scan(1, 0, func(ev *intents.Event) error { all = append(all, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, l, all, 0)
}
