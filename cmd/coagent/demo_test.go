package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"github.com/coagent/coagent/agents/team"
	"github.com/coagent/coagent/coordinator/whatif"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// demoParts splits the demo's output at its headings.
type demoParts struct {
	live, report, stats, replay string
}

func splitDemo(t *testing.T, out string) demoParts {
	t.Helper()
	var p demoParts
	i, j, k := strings.Index(out, "\nfinal report"), strings.Index(out, "\nstatistics"), strings.Index(out, "\nreplay")
	if i < 0 || j < i || k < j {
		t.Fatalf("the output lacks its sections:\n%s", out)
	}
	p.live, p.report, p.stats, p.replay = out[:i], out[i:j], out[j:k], out[k:]
	// The report's heading names the rev it was read at; what follows is
	// the report.
	p.report = p.report[strings.Index(p.report[1:], "\n")+1:]
	return p
}

// outcomeLines are the statistics that the seed decides: all but the
// timings.
func outcomeLines(stats string) string {
	var keep []string
	for _, l := range strings.Split(stats, "\n") {
		if strings.HasPrefix(l, "  ") && !strings.Contains(l, "latency") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

var demoHashes = regexp.MustCompile(`(?m)^  live +seq (\d+) +rev (\d+) +sha256 ([0-9a-f]{64})\n  replayed +seq (\d+) +rev (\d+) +sha256 ([0-9a-f]{64})\n  equal`)

func TestDemo(t *testing.T) {
	out, errOut, err := runCmd(t, "", "demo", "--writers", "2", "--seed", "3")
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out, errOut)
	}
	p := splitDemo(t, out)
	for what, re := range map[string]string{
		"a claim lost":                   `writer-\d +lost the claim on s1 .*precondition_failed`,
		"the loser claiming another":     `writer-\d +claimed s2 "Approach" instead \(applied, rev \d+; leased, fence \d+\)`,
		"a merge":                        `disjoint edits? .*merged with writer-\d's txn on s\d`,
		"the editor queued":              `editor +queued: read-write conflict on materials\.m\d\.status with writer-\d's txn`,
		"the writer told of the wait":    `writer-\d +told: editor waits on my txn`,
		"the editor applied after":       `editor +demotion of m\d applied`,
		"the rewrite escalated":          `writer-2 +escalated to the arbiters: .*report\.intro with writer-1's txn on the intro`,
		"the arbiter settling it":        `arbiter-1 +settled case .*: writer-\d's (rewrite|transaction) wins`,
		"the escalating writer told":     `writer-2 +told: my rewrite of the intro was (applied|rejected)`,
		"the holding writer told":        `writer-1 +told: (my txn on the intro was aborted|the arbiter kept my txn; committed)`,
		"a wait counted":                 `(?m)^  waits +1 `,
		"an escalation counted":          `(?m)^  escalations +1 +resolved by the arbiter: 1`,
		"the claim counted as rejection": `precondition_failed 1`,
		"merges counted":                 `(?m)^  merges \(disjoint edits\) +3 `,
		"the latency":                    `decision latency +p50 \S+ +p99 \S+`,
		"the publication held":           `writer-1 +waits for the editor's approval to publish \(case \S+\)`,
		"the editor approving":           `editor +approves publishing the report \(case \S+\): the 2 sections are written and cited`,
		"the publication":                `writer-1 +published the report read at rev \d+, at rev \d+`,
		"an approval counted":            `(?m)^  approvals +1 +intents held for approval; votes: 1$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no %s (/%s/) in the output:\n%s", what, re, out)
		}
	}
	m := demoHashes.FindStringSubmatch(p.replay)
	if m == nil || m[1] != m[4] || m[2] != m[5] || m[3] != m[6] {
		t.Fatalf("replay:\n%s", p.replay)
	}

	// The same seed again, keeping the data: the same report and the same
	// outcomes; and `coagent replay` of the kept log finds the same hash.
	keep := filepath.Join(t.TempDir(), "kept")
	again, errOut, err := runCmd(t, "", "demo", "--writers", "2", "--seed", "3", "--keep", keep)
	if err != nil {
		t.Fatalf("demo again: %v\n%s", err, errOut)
	}
	q := splitDemo(t, again)
	if q.report != p.report {
		t.Errorf("the same seed wrote two reports:\n%s\n---\n%s", p.report, q.report)
	}
	if a, b := outcomeLines(p.stats), outcomeLines(q.stats); a != b {
		t.Errorf("the same seed decided differently:\n%s\n---\n%s", a, b)
	}
	m2 := demoHashes.FindStringSubmatch(q.replay)
	if m2 == nil {
		t.Fatalf("replay:\n%s", q.replay)
	}
	replay, _, err := runCmd(t, "", "replay", "--data", keep)
	if err != nil || !strings.Contains(replay, "sha256 "+m2[3]) {
		t.Errorf("coagent replay of the kept data: %v\n%.300s…", err, replay)
	}

	// A kept directory must start empty.
	if _, _, err := runCmd(t, "", "demo", "--writers", "2", "--keep", keep); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("demo into a used directory: %v", err)
	}
	if _, _, err := runCmd(t, "", "demo", "--writers", "1"); !errors.Is(err, errUsage) {
		t.Errorf("demo with one writer: %v", err)
	}
	if _, err := os.Stat(filepath.Join(keep, "eventlog")); err != nil {
		t.Errorf("the kept data has no event log: %v", err)
	}
}

// demo --approve leaves the publication's approval to a person: the demo
// says what to run, waits, and publishes once approved from the command
// line.
func TestDemoApprove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	var all strings.Builder
	go func() {
		done <- run(ctx, []string{"demo", "--writers", "2", "--approve"}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	turn := regexp.MustCompile(`coagent case approve (\S+) --agent editor --nats (\S+)`)
	sc := bufio.NewScanner(pr)
	var m []string
	for m == nil && sc.Scan() {
		all.WriteString(sc.Text() + "\n")
		m = turn.FindStringSubmatch(sc.Text())
	}
	if m == nil {
		t.Fatalf("demo --approve never said what to run (%v):\n%s", <-done, all.String())
	}
	go func() {
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
		}
	}()
	if p := runBin(t, nil, "", "case", "approve", m[1], "--agent", "editor", "--nats", m[2], "--rationale", "read it: good"); p.status != 0 ||
		!strings.Contains(p.stdout, "intent "+m[1]+": applied") {
		t.Fatalf("the person's approval: %+v", p)
	}
	if err := <-done; err != nil {
		t.Fatalf("demo --approve: %v", err)
	}
}

// coagent whatif over the demo's log: under the recorded rules no decision
// changes; a rule that lets only writer-2 publish changes the
// publication, names the rule and the intent's story, and fails the run
// with --fail-on-change; -o json is the report.
func TestWhatifDemoLog(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if out, errOut, err := runCmd(t, "", "demo", "--writers", "2", "--keep", data); err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, out, errOut)
	}
	p := runBin(t, nil, "", "whatif", "--data", data)
	if p.status != 0 || !strings.Contains(p.stdout, "no decision changes") || !strings.Contains(p.stdout, "under the rules the log recorded") {
		t.Fatalf("whatif under the recorded rules: %+v", p)
	}
	rules := filepath.Join(dir, "stricter.json")
	writeFile(t, rules, `{"rules":[{"pattern":"report.published","writers":["writer-2"]},`+
		`{"pattern":"report.sections.*","kind":"task","lease":"30s"},`+team.PublishRules+`]}`)
	p = runBin(t, nil, "", "whatif", "--data", data, "--rules", rules, "--cascade")
	for _, want := range []string{"1 of ", "applied", "rejected:unauthorized", "changed by rule: rules[0] (report.published) 1", "changed by agent: writer-1 1",
		"coagent log --intent ", "paths whose values differ: report.published", "replayed as they were sent"} {
		if !strings.Contains(p.stdout, want) {
			t.Errorf("whatif --rules --cascade: no %q in:\n%s", want, p.stdout)
		}
	}
	// Isolated, the default: the publication would have been refused when
	// it was received, instead of escalated for the editor.
	p = runBin(t, nil, "", "whatif", "--data", data, "--rules", rules, "--fail-on-change")
	for _, want := range []string{"1 of ", "isolated", "escalated", "rejected:unauthorized", "changed by rule: rules[0] (report.published) 1",
		"changed by agent: writer-1 1", "coagent log --intent "} {
		if !strings.Contains(p.stdout, want) {
			t.Errorf("whatif --rules: no %q in:\n%s", want, p.stdout)
		}
	}
	if p.status != 1 || !strings.Contains(p.stderr, "1 decisions change (--fail-on-change)") {
		t.Fatalf("whatif --fail-on-change: %+v", p)
	}
	p = runBin(t, nil, "", "whatif", "--data", data, "--rules", rules, "-o", "json")
	var rep whatif.Report
	if p.status != 0 || json.Unmarshal([]byte(p.stdout), &rep) != nil || rep.Changed != 1 || rep.Top[0].Agent != "writer-1" {
		t.Fatalf("whatif -o json: %+v", p)
	}
}
