package eventlog_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/coagent/coagent/eventlog"
)

const envLockDir = "COAGENT_TEST_LOCK_DIR"

// TestLockChild holds the log in the directory of envLockDir open until
// its stdin closes, as a coordinator running on it does.
func TestLockChild(t *testing.T) {
	dir := os.Getenv(envLockDir)
	if dir == "" {
		t.Skip("the child of TestOpenLocked")
	}
	l, err := eventlog.Open(dir, &eventlog.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Stdout.WriteString("open\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// A log another process has open is refused with a *LockedError naming
// the directory, not Pebble's "resource temporarily unavailable".
func TestOpenLocked(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), envLockDir+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "open\n" {
		t.Fatalf("the child did not open the log: %q %v", line, err)
	}

	l, err := eventlog.Open(dir, nil)
	if err == nil {
		l.Close()
		t.Fatal("a log open in another process opened again")
	}
	var le *eventlog.LockedError
	if !errors.As(err, &le) || !errors.Is(err, eventlog.ErrLocked) || le.Dir != dir {
		t.Fatalf("err = %v (%T), want a *LockedError for %s matching ErrLocked", err, err, dir)
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("err = %q: does not name the directory and the other process", err)
	}

	// Once the other process lets go, the log opens.
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	l, err = eventlog.Open(dir, nil)
	if err != nil {
		t.Fatalf("after the other process closed it: %v", err)
	}
	l.Close()
}
