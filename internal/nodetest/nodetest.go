// Package nodetest finds what the tests of the JavaScript clients need:
// the node binary and the packages npm ci installed. Where they are
// missing the test is skipped on a developer's machine, and fails in CI,
// which sets COAGENT_JS_REQUIRED=1 so that a client's test never passes by
// not running.
package nodetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Require returns the node binary, or skips the test (fails it under
// COAGENT_JS_REQUIRED=1) when node is not on PATH or the package pkg (an
// npm name, "@scope/name") is not in the test's node_modules. what names
// the client and dir the test's directory from the repository's root, for
// the messages.
func Require(t testing.TB, dir, pkg, what string) string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("COAGENT_JS_REQUIRED") == "1" {
			t.Fatalf(format+" (COAGENT_JS_REQUIRED=1)", args...)
		}
		t.Skipf(format+"; set COAGENT_JS_REQUIRED=1 to make this a failure", args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH: install Node.js (v18 or later) to run %s", what)
	}
	if _, err := os.Stat(filepath.Join("node_modules", filepath.FromSlash(pkg))); err != nil {
		missing("%s/node_modules is missing: run `npm ci --prefix %s`", dir, dir)
	}
	return node
}
