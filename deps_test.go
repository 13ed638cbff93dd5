package coagent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/coagent/coagent"

// The pure core: no IO, no clock, no randomness. Time and ids come in as
// arguments, so every decision is a function of its inputs and the log.
var pure = []string{"intents", "conflict", "coordinator/cond", "coordinator/state", "coordinator/rules", "coordinator/engine", "arbiter"}

// Imports the pure core must not make itself (fmt and others reach os
// inside the standard library; what matters is what our code calls).
var impure = []string{"os", "os/exec", "os/signal", "net", "net/http", "io/fs", "io/ioutil", "syscall",
	"math/rand", "math/rand/v2", "crypto/rand", "unsafe", "log", "log/slog", "runtime"}

// Modules that are IO and belong to the edges.
var ioModules = []string{"github.com/nats-io/", "github.com/cockroachdb/pebble"}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// mustExist fails the test unless dir holds a Go package: a package this
// file names and that was renamed or moved must be renamed here too, or
// its arrows would no longer be checked.
func mustExist(t *testing.T, dir string) bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	if len(files) == 0 {
		t.Errorf("%s holds no Go package: name it here as it is now", dir)
		return false
	}
	return true
}

func TestPureCoreDependencies(t *testing.T) {
	for _, pkg := range pure {
		if !mustExist(t, pkg) {
			continue
		}
		for _, imp := range goList(t, "-f", `{{join .Imports " "}}`, "./"+pkg) {
			if slices.Contains(impure, imp) {
				t.Errorf("%s imports %s: the pure core does no IO and reads no clock or randomness", pkg, imp)
			}
		}
		for _, dep := range goList(t, "-deps", "./"+pkg) {
			for _, m := range ioModules {
				if strings.HasPrefix(dep, m) {
					t.Errorf("%s depends on %s: NATS and Pebble live at the edges", pkg, dep)
				}
			}
			if dep == module+"/coordinator" || strings.HasPrefix(dep, module+"/eventlog") ||
				strings.HasPrefix(dep, module+"/agents") || strings.HasPrefix(dep, module+"/cmd") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}

// Reading the clock or a random source by a path the import list does not
// show (time.Now, time.Since, a ticker) is just as impure.
func TestPureCoreReadsNoClock(t *testing.T) {
	clock := regexp.MustCompile(`\btime\.(Now|Since|Until|Sleep|After|AfterFunc|Tick|NewTicker|NewTimer)\(`)
	for _, pkg := range pure {
		if !mustExist(t, pkg) {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(pkg, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if m := clock.Find(src); m != nil {
				t.Errorf("%s calls %s: time is passed in, never read", f, m)
			}
		}
	}
}

// The offline tools (coagent replay, verify, compact) fold a log on disk
// with package coordinator/replay: it must link no transport, which is why
// it is not part of package coordinator.
func TestReplayLinksNoNATS(t *testing.T) {
	const pkg = "coordinator/replay"
	if !mustExist(t, pkg) {
		return
	}
	for _, dep := range goList(t, "-deps", "./"+pkg) {
		if strings.HasPrefix(dep, "github.com/nats-io/") {
			t.Errorf("%s depends on %s: the offline tools fold the log without NATS", pkg, dep)
		}
	}
}

// A coordinator alone is the Service and the Core; the cluster member
// builds on them (coordinator.StartActive, Replicator, Standby), never the
// reverse, so that the member's jobs stay out of the Service's.
func TestCoordinatorLinksNoCluster(t *testing.T) {
	const pkg, member = "coordinator", "coordinator/cluster"
	if !mustExist(t, pkg) || !mustExist(t, member) {
		return
	}
	for _, dep := range goList(t, "-deps", "./"+pkg) {
		if dep == module+"/"+member {
			t.Errorf("%s depends on %s: the member builds on the coordinator, not the reverse", pkg, member)
		}
	}
}

// The SDK agents build on must stand alone: it speaks the wire contract and
// never reaches into the coordinator or the log.
// Nor does it reach the command's internal packages: what agents import
// is all public.
func TestAgentsStandAlone(t *testing.T) {
	if !mustExist(t, "agents") {
		return
	}
	for _, dep := range goList(t, "-deps", "./agents/...") {
		if strings.HasPrefix(dep, module+"/coordinator") || strings.HasPrefix(dep, module+"/eventlog") ||
			strings.HasPrefix(dep, module+"/internal/") {
			t.Errorf("agents depends on %s", dep)
		}
	}
}

// Conditions travel as text: the expression engine that compiles and
// meters them is the coordinator's (coordinator/cond), so neither the wire
// contract nor the SDK built on it links expr. Nor does the state tree,
// pure data that conditions read through an interface.
var exprFree = []string{"intents", "agents", "coordinator/state"}

const exprModule = "github.com/expr-lang/expr"

func TestWireLinksNoExpr(t *testing.T) {
	for _, pkg := range exprFree {
		if !mustExist(t, pkg) {
			continue
		}
		for _, dep := range goList(t, "-deps", "./"+pkg+"/...") {
			if dep == exprModule || strings.HasPrefix(dep, exprModule+"/") {
				t.Errorf("%s depends on %s: conditions are compiled in coordinator/cond", pkg, dep)
			}
		}
	}
}

// The load generator measures the coordinator, not the SDK: it speaks the
// wire itself, which is why it is internal/loadgen and not under agents.
func TestLoadgenSpeaksTheWire(t *testing.T) {
	if !mustExist(t, "internal/loadgen") {
		return
	}
	for _, dep := range goList(t, "-deps", "./internal/loadgen") {
		if strings.HasPrefix(dep, module+"/agents") {
			t.Errorf("internal/loadgen depends on %s", dep)
		}
	}
}

// schemas is a leaf: the wire contract depends on nothing of ours.
func TestSchemasIsALeaf(t *testing.T) {
	if !mustExist(t, "schemas") {
		return
	}
	for _, imp := range goList(t, "-f", `{{join .Imports " "}}`, "./schemas") {
		if strings.HasPrefix(imp, module) {
			t.Errorf("schemas imports %s", imp)
		}
	}
}
