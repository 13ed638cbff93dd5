package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coagent/coagent/conflict"
	"github.com/oklog/ulid/v2"
)

// Conflicts on one document show at the top of the dashboard, by document
// and by pair of agents; the counts survive a restart (rebuilt from the log).
func TestConflictsTop(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	url, stop := serve(t, data)
	holder := `{"id":"` + ulid.Make().String() + `","agent":"w1","kind":"propose","writes":[{"path":"report.intro","op":"set"}]}`
	if out, _, err := runCmd(t, holder, "submit", "--nats", url, "-"); err != nil {
		t.Fatalf("propose: %s %v", out, err)
	}
	for range 3 {
		clash := `{"id":"` + ulid.Make().String() + `","agent":"w2","kind":"apply","writes":[{"path":"report.intro","op":"set","value":1}]}`
		runCmd(t, clash, "submit", "--nats", url, "-") // rejected: conflict
	}
	check := func() {
		t.Helper()
		out, _, err := runCmd(t, "", "conflicts", "--nats", url, "--json", "top")
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Spots []conflict.Spot }
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, s := range got.Spots {
			seen[s.Kind+":"+s.Name] = s.Total
		}
		if seen["prefix:report.intro"] != 3 || seen["prefix:report"] != 3 || seen["pair:w2/w1"] != 3 {
			t.Fatalf("conflicts top: %s", out)
		}
	}
	check()
	out, _, err := runCmd(t, "", "conflicts", "--nats", url, "top")
	if err != nil || !strings.Contains(out, "report.intro") || !strings.Contains(out, "write-write 3") {
		t.Fatalf("conflicts top: %q %v", out, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	url, stop = serve(t, data)
	defer stop()
	check()
}
