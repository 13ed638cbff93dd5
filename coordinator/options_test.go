package coordinator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
)

// TestOptionsDefaults: zero Options take the defaults their fields
// document, the Core's, the engine's and the log's included, and those
// defaults are valid.
func TestOptionsDefaults(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"Prefix", o.Prefix, intents.DefaultPrefix},
		{"MaxBatch", o.MaxBatch, 1024},
		{"MaxIntake", o.MaxIntake, 8192},
		{"MaxAckPending", o.MaxAckPending, 4096},
		{"AckWait", o.AckWait, 5 * time.Second},
		{"DecisionsMaxAge", o.DecisionsMaxAge, 24 * time.Hour},
		{"EventsMaxAge", o.EventsMaxAge, 24 * time.Hour},
		{"SubmitWait", o.SubmitWait, 10 * time.Second},
		{"MaxSubmits", o.MaxSubmits, 10000},
		{"Replicas", o.Replicas, 1},
		{"Auth", o.Auth, false},
		{"Core.SnapshotEvery", o.Core.SnapshotEvery, uint64(100000)},
		{"Core.Logger is Logger", o.Core.Logger == o.Logger, true},
		{"Core.Engine.DefaultLease", o.Core.Engine.DefaultLease, 30 * time.Second},
		{"Core.Engine.DedupWindow", o.Core.Engine.DedupWindow, 10000},
		{"Core.Log.IndexEvery", o.Core.Log.IndexEvery, 4096},
		{"Core.Log.NoSync", o.Core.Log.NoSync, false},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if o.Now == nil || o.Logger == nil || o.Core.Engine.NewID == nil {
		t.Errorf("Now, Logger or Core.Engine.NewID left nil: %+v", o)
	}
	if o.Interest != nil || o.Core.Engine.Recorded != nil {
		t.Error("Interest and Core.Engine.Recorded default to nil")
	}
	if err := o.Validate(); err != nil {
		t.Errorf("the defaults are not valid: %v", err)
	}
	// The Core's ids are random, not the engine's counter: two Cores
	// started at the same instant do not make the same id.
	now := time.Now()
	var a, b CoreOptions
	a.EnsureDefaults()
	b.EnsureDefaults()
	if a.Engine.NewID(now) == b.Engine.NewID(now) {
		t.Error("the default Core ids are not random")
	}
	// Set fields are kept.
	o = Options{MaxBatch: 7, Core: CoreOptions{SnapshotEvery: 9}}
	o.EnsureDefaults()
	if o.MaxBatch != 7 || o.Core.SnapshotEvery != 9 {
		t.Errorf("EnsureDefaults replaced set fields: MaxBatch %d, SnapshotEvery %d", o.MaxBatch, o.Core.SnapshotEvery)
	}
}

// TestStartRefusesBadOptions: Start refuses options Validate finds wrong
// before it touches anything, and the error names every bad field with its
// value, those of the Core, the engine and the log among them.
func TestStartRefusesBadOptions(t *testing.T) {
	ns := natstest.Run(t)
	nc := natstest.Connect(t, ns)
	for _, c := range []struct {
		name string
		opts Options
		want []string
	}{
		{"one", Options{MaxBatch: -1}, []string{"MaxBatch is negative (-1)"}},
		{"prefix", Options{Prefix: "team.*"}, []string{`Prefix "team.*": a wildcard`}},
		{"empty token", Options{Prefix: "team..x"}, []string{`Prefix "team..x": an empty token`}},
		{"space", Options{Prefix: "my team"}, []string{`Prefix "my team": white space`}},
		{"replicas", Options{Replicas: 6}, []string{"Replicas is 6, want 1 to 5"}},
		{"every one", Options{
			Prefix: "a.>", MaxIntake: -2, MaxAckPending: -3, MaxSubmits: -4,
			Replicas: -1, AckWait: -time.Second, DecisionsMaxAge: -time.Minute, EventsMaxAge: -time.Hour, SubmitWait: -time.Millisecond,
			Core: CoreOptions{Engine: engine.Config{MaxLease: -time.Second}, Log: eventlog.Options{IndexEvery: -5}},
		}, []string{
			`Prefix "a.>": a wildcard`, "MaxIntake is negative (-2)", "MaxAckPending is negative (-3)",
			"MaxSubmits is negative (-4)", "Replicas is -1, want 1 to 5", "AckWait is negative (-1s)", "DecisionsMaxAge is negative (-1m0s)",
			"EventsMaxAge is negative (-1h0m0s)", "SubmitWait is negative (-1ms)",
			"MaxLease is negative (-1s)", "IndexEvery is negative (-5)",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "log")
			svc, err := Start(context.Background(), nc, dir, c.opts)
			if err == nil {
				svc.Shutdown(context.Background())
				t.Fatal("Start took bad options")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(c.want) {
				t.Errorf("%d problems reported, want %d:\n%v", n, len(c.want), err)
			}
			if !strings.HasPrefix(err.Error(), "coordinator: start: ") {
				t.Errorf("the error does not say where: %v", err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("Start refused its options but made the log's directory: %v", err)
			}
		})
	}
}

// TestOpenCoreRefusesBadOptions: so does OpenCore, every problem at once,
// before it opens the log.
func TestOpenCoreRefusesBadOptions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	c, err := OpenCore(dir, CoreOptions{Engine: engine.Config{DedupWindow: -1, DefaultLease: 20 * time.Minute}, Log: eventlog.Options{IndexEvery: -1}})
	if err == nil {
		c.Close()
		t.Fatal("OpenCore took bad options")
	}
	for _, w := range []string{"DedupWindow is negative (-1)", "DefaultLease 20m0s is above MaxLease 10m0s", "IndexEvery is negative (-1)"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q:\n%v", w, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("OpenCore refused its options but made the log's directory: %v", err)
	}
}
