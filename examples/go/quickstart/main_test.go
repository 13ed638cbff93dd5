package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/internal/natstest"
)

// TestQuickstart runs the program against an embedded server and a fresh
// coordinator and checks what it prints against testdata/output.txt, the
// output the README shows (docs_test.go in examples/go checks the quote).
// A second run finds the intro claimed.
func TestQuickstart(t *testing.T) {
	ns := natstest.Run(t)
	svc, err := coordinator.Start(context.Background(), natstest.Connect(t, ns), filepath.Join(t.TempDir(), "log"), coordinator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var out bytes.Buffer
	if err := run(ctx, ns.ClientURL(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.Bytes())
	}
	want, err := os.ReadFile(filepath.Join("testdata", "output.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("quickstart printed\n%s\nwant (testdata/output.txt)\n%s", out.Bytes(), want)
	}

	out.Reset()
	if err := run(ctx, ns.ClientURL(), &out); err != nil {
		t.Fatalf("second run: %v\n%s", err, out.Bytes())
	}
	const again = "someone else writes the intro: pre[0] `state.report.sections.intro.owner == nil` is false; it saw report.sections.intro.owner = \"writer-1\"\n"
	if out.String() != again {
		t.Errorf("second run printed %q, want %q", out.String(), again)
	}
}

// TestQuickstartNoServer: with nothing listening, the program reports the
// connection error instead of going on with a nil connection.
func TestQuickstartNoServer(t *testing.T) {
	ns := natstest.Run(t)
	url := ns.ClientURL()
	ns.Shutdown()
	var out bytes.Buffer
	err := run(context.Background(), url, &out)
	if err == nil {
		t.Fatalf("run against a stopped server: no error; printed %q", out.String())
	}
	t.Log(err)
}
