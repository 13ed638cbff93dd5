package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// coagentBin is the coagent binary TestMain builds once for the tests that
// run it as a user would: as a process, its stdout, stderr and exit status
// seen from outside.
var coagentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "coagent-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	coagentBin = filepath.Join(dir, "coagent")
	// -buildvcs=false: the version is then the one the source declares,
	// whatever the checkout, which TestVersion expects.
	build := exec.Command("go", "build", "-buildvcs=false", "-o", coagentBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build coagent:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is what one run of the binary did.
type proc struct {
	stdout, stderr string
	status         int
}

// runBin runs the coagent binary with args, stdin and, on top of this
// process's environment without $NATS_URL, the variables of env.
func runBin(t *testing.T, env []string, stdin string, args ...string) proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, coagentBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	p := proc{stdout: out.String(), stderr: errOut.String()}
	switch {
	case errors.As(err, &exit):
		p.status = exit.ExitCode()
	case err != nil:
		t.Fatalf("coagent %s: %v", strings.Join(args, " "), err)
	}
	return p
}

// runMain runs the binary with args and no stdin.
func runMain(t *testing.T, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	p := runBin(t, nil, "", args...)
	return p.stdout, p.stderr, p.status
}

// TestHelp: --help, -h and `help CMD` print that command's help once, on
// stdout, and exit 0; so does coagent alone.
func TestHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // a line of that command's help
	}{
		{[]string{}, "  coagent [command]"},
		{[]string{"--help"}, "  coagent [command]"},
		{[]string{"-h"}, "  coagent [command]"},
		{[]string{"help"}, "  coagent [command]"},
		{[]string{"serve", "--help"}, "  coagent serve [flags]"},
		{[]string{"serve", "-h"}, "  coagent serve [flags]"},
		{[]string{"help", "serve"}, "  coagent serve [flags]"},
		{[]string{"demo", "--help"}, "  coagent demo [flags]"},
		{[]string{"agents", "add", "--help"}, "  coagent agents add NAME [--role ROLE]... [flags]"},
		{[]string{"help", "agents", "add"}, "  coagent agents add NAME [--role ROLE]... [flags]"},
		{[]string{"rules", "get", "-h"}, "  coagent rules get [flags]"},
		{[]string{"conflicts", "top", "--help"}, "  coagent conflicts top [flags]"},
		{[]string{"agents", "--help"}, "  coagent agents [command]"},
	} {
		p := runBin(t, nil, "", c.args...)
		if p.status != 0 || p.stderr != "" || strings.Count(p.stdout, "Usage:") != 1 || !strings.Contains(p.stdout, "\n"+c.want+"\n") {
			t.Errorf("coagent %s: exit %d, stderr %q, stdout:\n%s", strings.Join(c.args, " "), p.status, p.stderr, p.stdout)
		}
	}
	// A group's usage is its subcommands alone.
	if p := runBin(t, nil, "", "agents", "--help"); strings.Contains(p.stdout, "coagent agents [flags]") {
		t.Errorf("agents --help offers agents without a subcommand:\n%s", p.stdout)
	}
	// Each command's own flags, with their defaults.
	p := runBin(t, nil, "", "serve", "--help")
	for _, want := range []string{"--arbiter-fallback string", `(default "reject")`, "-v, --verbose", `--data string`, `(default "coagent-data")`} {
		if !strings.Contains(p.stdout, want) {
			t.Errorf("serve --help lacks %q:\n%s", want, p.stdout)
		}
	}
}

// TestHelpThroughAPipe: `coagent --help | head` shows the help.
func TestHelpThroughAPipe(t *testing.T) {
	out, err := exec.Command("sh", "-c", fmt.Sprintf("'%s' --help | head -n 2", coagentBin)).Output()
	if err != nil || !strings.HasPrefix(string(out), "CoAgent decides the intents") || strings.Count(string(out), "\n") != 2 {
		t.Fatalf("coagent --help | head -n 2: %q, %v", out, err)
	}
}

// TestUsageErrors: a command line that does not fit is one line naming
// what is wrong and one naming the help to read, on stderr, exit 2; never
// the usage.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args       []string
		line, help string
	}{
		{[]string{"serve", "--lisen", "x"}, "unknown flag: --lisen", "coagent serve"},
		{[]string{"demo", "--writers", "1"}, "--writers 1: want at least 2", "coagent demo"},
		{[]string{"sevre"}, `unknown command "sevre"; did you mean serve?`, "coagent"},
		{[]string{"help", "sevre"}, `unknown command "sevre"; did you mean serve?`, "coagent"},
		{[]string{"submit"}, "missing FILE (or - for stdin)", "coagent submit"},
		{[]string{"submit", "a.json", "b.json"}, `unexpected argument "b.json"`, "coagent submit"},
		{[]string{"watch"}, "missing PATH", "coagent watch"},
		{[]string{"watch", "a..b"}, `PATH "a..b": segment "" is not 1–128 letters, digits, '_' or '-'`, "coagent watch"},
		{[]string{"txn"}, "missing subcommand: abort, commit, list, renew", "coagent txn"},
		{[]string{"txn", "list", "--agent", "a.b"}, `--agent "a.b": not an agent name`, "coagent txn list"},
		{[]string{"log", "--data", dir, "--follow"}, "--data reads a stopped server's directory, --follow is for a running server: give one", "coagent log"},
		{[]string{"log", "--nats", "nats://x", "--data", dir}, "--data reads a stopped server's directory, --nats is for a running server: give one", "coagent log"},
		{[]string{"log", "--limit", "0"}, "--limit 0: want at least 1", "coagent log"},
		{[]string{"state", "-o", "yaml", "x"}, `invalid argument "yaml" for "-o, --output" flag: want table or json`, "coagent state"},
		{[]string{"agents"}, "missing subcommand: add, list, remove", "coagent agents"},
		{[]string{"agents", "remove"}, "missing NAME", "coagent agents remove"},
		{[]string{"agents", "ad", "x"}, `unknown command "ad" for "coagent agents"; did you mean add?`, "coagent agents"},
		{[]string{"agents", "add", "-x"}, "unknown shorthand flag: 'x' in -x", "coagent agents add"},
		{[]string{"rules", "set"}, "missing FILE", "coagent rules set"},
		{[]string{"verify", "extra"}, `unexpected argument "extra"`, "coagent verify"},
		{[]string{"log", "--type", "bogus"}, `--type "bogus": want one of ` + typeNames(), "coagent log"},
		{[]string{"compact"}, "missing --before SEQ", "coagent compact"},
		{[]string{"arbiter"}, "missing --policy (priority, first, reject)", "coagent arbiter"},
		{[]string{"submit", "--timeout", "soon", "-"}, `invalid argument "soon" for "--timeout" flag: time: invalid duration "soon"`, "coagent submit"},
		{[]string{"serve", "--data", filepath.Join(dir, "d"), "--arbiter-fallback", "bogus"}, `--arbiter-fallback: arbiter: unknown policy "bogus" (the policies are priority, first, reject)`, "coagent serve"},
		{[]string{"serve", "--data", filepath.Join(dir, "d"), "--sync", "sometimes"}, `--sync "sometimes": want always or a duration (10s, 1m)`, "coagent serve"},
		{[]string{"serve", "--data", filepath.Join(dir, "d"), "--sync", "-1s"}, `--sync "-1s": want always or a duration (10s, 1m)`, "coagent serve"},
		{[]string{"serve", "--data", filepath.Join(dir, "d"), "--sync", "always", "--nats", "nats://127.0.0.1:1"},
			"--sync configures the embedded server's JetStream; with --nats nats://127.0.0.1:1, set sync_interval in that server's configuration", "coagent serve"},
	} {
		p := runBin(t, nil, "", c.args...)
		want := "coagent: " + c.line + "\nrun '" + c.help + " --help' for usage\n"
		if p.status != 2 || p.stdout != "" || p.stderr != want {
			t.Errorf("coagent %s: exit %d, stdout %q, stderr\n%s\nwant exit 2 and\n%s", strings.Join(c.args, " "), p.status, p.stdout, p.stderr, want)
		}
	}
	// The bad fallback was refused before the data directory was made.
	if _, err := os.Stat(filepath.Join(dir, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve with a bad --arbiter-fallback made its data directory: %v", err)
	}
}

// TestAgentsAddRegistersNoFlag: `agents add --help` and `agents add -x`
// register nothing, nor does a name beginning with '-'; flags after the
// name are flags.
func TestAgentsAddRegistersNoFlag(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if p := runBin(t, nil, "", "agents", "add", "--help", "--data", data); p.status != 0 || !strings.Contains(p.stdout, "Usage:") {
		t.Fatalf("agents add --help: %+v", p)
	}
	if p := runBin(t, nil, "", "agents", "add", "-x", "--data", data); p.status != 2 {
		t.Fatalf("agents add -x: %+v", p)
	}
	p := runBin(t, nil, "", "agents", "add", "--data", data, "--", "-x")
	if p.status != 1 || p.stderr != "coagent: agent name \"-x\": want 1–128 letters, digits, '_' or '-', not beginning with '-'\n" {
		t.Fatalf("agents add -- -x: %+v", p)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the data directory exists after three refusals: %v", err)
	}

	p = runBin(t, nil, "", "agents", "add", "alice", "--role", "coder", "--data", data)
	if p.status != 0 || !strings.HasPrefix(p.stdout, "agent alice registered (roles: coder)") || !strings.Contains(p.stderr, "after SIGHUP") {
		t.Fatalf("agents add alice --role coder: %+v", p)
	}
	p = runBin(t, nil, "", "agents", "list", "--data", data)
	if p.status != 0 || !regexp.MustCompile(`^NAME +ROLES +NKEY\nalice +coder +U[A-Z0-9]{55}\n$`).MatchString(p.stdout) {
		t.Fatalf("agents list: %+v", p)
	}
	p = runBin(t, nil, "", "agents", "list", "--data", data, "-o", "json")
	var rows []struct {
		Name  string
		Roles []string
	}
	if p.status != 0 || json.Unmarshal([]byte(p.stdout), &rows) != nil || len(rows) != 1 || rows[0].Name != "alice" || len(rows[0].Roles) != 1 {
		t.Fatalf("agents list -o json: %+v", p)
	}
	empty := t.TempDir()
	if p := runBin(t, nil, "", "agents", "list", "--data", empty, "--json"); p.status != 0 || p.stdout != "[]\n" ||
		p.stderr != "no agents registered in "+filepath.Join(empty, "agents.json")+"\n" {
		t.Fatalf("agents list --json of no agents: %+v", p)
	}
	if p := runBin(t, nil, "", "agents", "list", "--data", empty); p.status != 0 || p.stdout != "" || !strings.HasPrefix(p.stderr, "no agents registered") {
		t.Fatalf("agents list of no agents: %+v", p)
	}
}

// TestVersion: `coagent version` and --version print the version and the
// Go that built it.
func TestVersion(t *testing.T) {
	want := fmt.Sprintf("coagent version %s\ngo version %s %s/%s\n", coordinator.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if p := runBin(t, nil, "", args...); p.status != 0 || p.stdout != want || p.stderr != "" {
			t.Errorf("coagent %s: %+v, want stdout %q", args[0], p, want)
		}
	}
}

// TestCompletion: the scripts of three shells, and the completions they
// ask the binary for.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_coagent", "zsh": "#compdef coagent", "fish": "complete -c coagent"} {
		if p := runBin(t, nil, "", "completion", shell); p.status != 0 || !strings.Contains(p.stdout, want) || p.stderr != "" {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes without %q", shell, p.status, p.stderr, len(p.stdout), want)
		}
	}
	if p := runBin(t, nil, "", "__complete", "se"); p.status != 0 || !strings.Contains(p.stdout, "serve\t") {
		t.Errorf("completion of se: %+v", p)
	}
	if p := runBin(t, nil, "", "__complete", "schema", ""); p.status != 0 || !strings.Contains(p.stdout, "intent.json\n") {
		t.Errorf("completion of schema: %+v", p)
	}
	if p := runBin(t, nil, "", "__complete", "serve", "--arb"); p.status != 0 || !strings.Contains(p.stdout, "--arbiter-fallback\t") {
		t.Errorf("completion of serve --arb: %+v", p)
	}
}

// TestCommandList: the command list names every command, its
// descriptions in one column.
func TestCommandList(t *testing.T) {
	p := runBin(t, nil, "", "--help")
	i, j := strings.Index(p.stdout, "\nRun a coordinator:\n"), strings.Index(p.stdout, "\nFlags:\n")
	if i < 0 || j < i {
		t.Fatalf("no command list:\n%s", p.stdout)
	}
	row := regexp.MustCompile(`(?m)^  ([a-z]+)( +)\S`)
	col, names := -1, map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(p.stdout[i:j], -1) {
		names[m[1]] = true
		if c := len(m[1]) + len(m[2]); col < 0 {
			col = c
		} else if c != col {
			t.Errorf("%s's description starts at column %d, the others at %d:\n%s", m[1], c+2, col+2, p.stdout)
		}
	}
	for _, want := range []string{"serve", "arbiter", "submit", "state", "watch", "txn", "check", "schema", "replay", "log", "verify", "compact",
		"dlq", "conflicts", "rules", "agents", "bench", "demo", "version", "completion", "help"} {
		if !names[want] {
			t.Errorf("the command list lacks %s:\n%s", want, p.stdout)
		}
	}
}

// TestClientCommands runs the client commands as processes against one
// server: flags after arguments, $NATS_URL, -o table|json, data on stdout
// and notes on stderr, submit's generated id and --agent.
func TestClientCommands(t *testing.T) {
	dir := t.TempDir()
	url, stop := serve(t, filepath.Join(dir, "data"))
	defer stop()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		writeFile(t, path, content)
		return path
	}
	nats := []string{"--nats", url}
	intent := func(id, agent, path string, value any) string {
		v, _ := json.Marshal(value)
		return fmt.Sprintf(`{"id":%q,"agent":%q,"kind":"apply","writes":[{"path":%q,"op":"set","value":%s}]}`, id, agent, path, v)
	}

	t.Run("submit", func(t *testing.T) {
		id := ulid.Make().String()
		file := write("title.json", intent(id, "w1", "report.title", "Q3"))
		// Flags after the file.
		p := runBin(t, nil, "", "submit", file, "--nats", url)
		if p.status != 0 || !regexp.MustCompile(`^applied `+id+` rev \d+ \(report\.title v1\)\n$`).MatchString(p.stdout) || p.stderr != "" {
			t.Fatalf("submit: %+v", p)
		}
		p = runBin(t, nil, "", "submit", file, "--nats", url, "-o", "json")
		var d intents.Decision
		if p.status != 0 || json.Unmarshal([]byte(p.stdout), &d) != nil || d.Intent != id || !d.Duplicate {
			t.Fatalf("submit -o json of the same intent again: %+v", p)
		}
		failing := `{"id":"` + ulid.Make().String() + `","agent":"w1","kind":"apply","pre":["state.report.title == \"Q4\""],"writes":[{"path":"report.title","op":"set","value":"Q5"}]}`
		p = runBin(t, nil, failing, append(nats, "submit", "-")...)
		if p.status != 1 || !regexp.MustCompile(`^rejected \S+ precondition_failed \(report\.title v1\): pre\[0\] .* is false; it saw report\.title = "Q3"\n$`).MatchString(p.stdout) {
			t.Fatalf("submit of a failing precondition: %+v", p)
		}
	})

	t.Run("submit without id", func(t *testing.T) {
		p := runBin(t, nil, `{"kind":"apply","writes":[{"path":"notes.n1","op":"set","value":1}]}`, "submit", "-", "--agent", "w9", "--nats", url, "--json")
		var d intents.Decision
		if p.status != 0 || json.Unmarshal([]byte(p.stdout), &d) != nil || d.Agent != "w9" || d.Outcome != intents.OutcomeApplied {
			t.Fatalf("submit --agent w9 of an intent without id: %+v", p)
		}
		if _, err := ulid.ParseStrict(d.Intent); err != nil || p.stderr != "coagent submit: intent id "+d.Intent+"\n" {
			t.Fatalf("the generated id %q: %v; stderr %q", d.Intent, err, p.stderr)
		}
		p = runBin(t, nil, intent(ulid.Make().String(), "w1", "notes.n2", 1), "submit", "-", "--agent", "w2", "--nats", url)
		if p.status != 1 || p.stdout != "" || p.stderr != "coagent: the intent's agent is w1, but --agent says w2\n" {
			t.Fatalf("submit --agent w2 of w1's intent: %+v", p)
		}
	})

	t.Run("state", func(t *testing.T) {
		p := runBin(t, nil, "", "state", "report.title", "report.none", "--nats", url)
		if p.status != 0 || !regexp.MustCompile(`^report\.title = "Q3" \(version 1, mod_rev \d+\)\nreport\.none absent \(version 0\)\nrev \d+\n$`).MatchString(p.stdout) {
			t.Fatalf("state: %+v", p)
		}
		for _, flag := range [][]string{{"--json"}, {"-o", "json"}} {
			p = runBin(t, nil, "", append([]string{"state", "report.title"}, append(flag, nats...)...)...)
			var out struct {
				Values map[string]struct{ Value string }
			}
			if p.status != 0 || json.Unmarshal([]byte(p.stdout), &out) != nil || out.Values["report.title"].Value != "Q3" {
				t.Fatalf("state report.title %v: %+v", flag, p)
			}
		}
	})

	t.Run("NATS_URL", func(t *testing.T) {
		if p := runBin(t, []string{"NATS_URL=" + url}, "", "state", "report.title"); p.status != 0 || !strings.HasPrefix(p.stdout, `report.title = "Q3"`) {
			t.Fatalf("state with $NATS_URL: %+v", p)
		}
		nowhere := "nats://127.0.0.1:1"
		if p := runBin(t, []string{"NATS_URL=" + nowhere}, "", "state", "report.title", "--nats", url); p.status != 0 {
			t.Fatalf("--nats does not win over $NATS_URL: %+v", p)
		}
		if p := runBin(t, []string{"NATS_URL=" + nowhere}, "", "state", "report.title"); p.status != 1 || !strings.HasPrefix(p.stderr, "coagent: no NATS server at "+nowhere+" ($NATS_URL)\n") {
			t.Fatalf("state with $NATS_URL naming no server: %+v", p)
		}
		if p := runBin(t, []string{"NATS_URL=" + nowhere}, "", "state", "--help"); !strings.Contains(p.stdout, `(default "`+nowhere+`")`) {
			t.Fatalf("state --help does not show $NATS_URL as the default: %s", p.stdout)
		}
	})

	t.Run("rules get", func(t *testing.T) {
		if p := runBin(t, nil, "", "rules", "get", "--nats", url, "-o", "json"); p.status != 0 || p.stdout != "{}\n" || p.stderr != "no rules in force\n" {
			t.Fatalf("rules get -o json with no rules: %+v", p)
		}
		file := write("board.json", `{"rules":[{"pattern":"tasks.*.status","writers":["role:coder"],"transitions":{"A":["B"]}}],"invariants":[{"name":"wip","expr":"count(values(state.tasks), .status == \"B\") <= 2"}]}`)
		if p := runBin(t, nil, "", "rules", "set", file, "--nats", url); p.status != 0 || !strings.HasSuffix(p.stdout, " in force\n") {
			t.Fatalf("rules set: %+v", p)
		}
		p := runBin(t, nil, "", "rules", "--nats", url, "get", "-o", "json")
		var got struct{ Rules []struct{ Pattern string } }
		if p.status != 0 || json.Unmarshal([]byte(p.stdout), &got) != nil || len(got.Rules) != 1 ||
			!regexp.MustCompile(`^rules [0-9a-f]{12} from `+regexp.QuoteMeta(file)+"\n$").MatchString(p.stderr) {
			t.Fatalf("rules get -o json: %+v", p)
		}
		p = runBin(t, nil, "", "rules", "get", "--nats", url)
		if p.status != 0 || !regexp.MustCompile(`^PATTERN +KIND +WRITERS +READERS +ON CONFLICT +PREEMPT +CHECKS\n`+
			`tasks\.\*\.status +- +role:coder +- +- +- +transitions A→B\n\nINVARIANT +EXPR\nwip +count\(values\(state\.tasks\), \.status == "B"\) <= 2\n$`).MatchString(p.stdout) {
			t.Fatalf("rules get: %+v", p)
		}
	})

	t.Run("rules set --shadow", func(t *testing.T) {
		file := write("shadow.json", `{"rules":[{"pattern":"tasks.**","writers":["lead"]}]}`)
		if p := runBin(t, nil, "", "rules", "set", "--mode", "warn", file, "--nats", url); p.status != 2 || !strings.Contains(p.stderr, "--mode is the shadow file's: it needs --shadow") {
			t.Fatalf("rules set --mode without --shadow: %+v", p)
		}
		if p := runBin(t, nil, "", "rules", "set", "--shadow", "--mode", "loud", file, "--nats", url); p.status != 2 || !strings.Contains(p.stderr, `--mode "loud": want audit or warn`) {
			t.Fatalf("rules set --shadow --mode loud: %+v", p)
		}
		p := runBin(t, nil, "", "rules", "set", "--shadow", "--mode", "warn", file, "--nats", url)
		if p.status != 0 || !regexp.MustCompile(`^shadow rules [0-9a-f]{12} from `+regexp.QuoteMeta(file)+` in force \(warn\)\n$`).MatchString(p.stdout) {
			t.Fatalf("rules set --shadow: %+v", p)
		}
		// The rules in force are as they were, the shadow file beside them.
		if p := runBin(t, nil, "", "rules", "get", "--nats", url); p.status != 0 || !strings.Contains(p.stderr, "in force (warn)") || strings.Contains(p.stdout, "lead") {
			t.Fatalf("rules get with a shadow file: %+v", p)
		}
		if p := runBin(t, nil, "", "rules", "set", "--shadow", os.DevNull, "--nats", url); p.status != 0 || p.stdout != "no shadow rules in force\n" {
			t.Fatalf("rules set --shadow /dev/null: %+v", p)
		}
		if p := runBin(t, nil, "", "rules", "get", "--nats", url); p.status != 0 || strings.Contains(p.stderr, "shadow") {
			t.Fatalf("rules get without a shadow file: %+v", p)
		}
	})

	t.Run("dlq list", func(t *testing.T) {
		if p := runBin(t, nil, "", "dlq", "list", "--nats", url); p.status != 0 || p.stdout != "" || p.stderr != "no dead letters\n" {
			t.Fatalf("dlq list: %+v", p)
		}
		if p := runBin(t, nil, "", "dlq", "--json", "list", "--nats", url); p.status != 0 || p.stdout != "[]\n" || p.stderr != "no dead letters\n" {
			t.Fatalf("dlq --json list: %+v", p)
		}
	})

	t.Run("conflicts top", func(t *testing.T) {
		p := runBin(t, nil, "", "conflicts", "top", "--nats", url, "--limit", "5")
		if p.status != 0 || !strings.HasPrefix(p.stdout, "kind    name ") {
			t.Fatalf("conflicts top: %+v", p)
		}
		p = runBin(t, nil, "", "conflicts", "top", "--nats", url, "-o", "json")
		var got struct{ Spots []any }
		if p.status != 0 || json.Unmarshal([]byte(p.stdout), &got) != nil {
			t.Fatalf("conflicts top -o json: %+v", p)
		}
	})
}

// TestDataCommands: the commands on a data directory take -o and flags
// after the data directory's flag alike.
func TestDataCommands(t *testing.T) {
	dir, hash, _ := writeData(t)
	p := runBin(t, nil, "", "log", "--data", dir, "-o", "json", "--limit", "3")
	lines := strings.Split(strings.TrimSuffix(p.stdout, "\n"), "\n")
	for _, l := range lines {
		var ev intents.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("log -o json line %q: %v", l, err)
		}
	}
	if p.status != 0 || len(lines) != 3 || p.stderr != "more: --from 4\n" {
		t.Fatalf("log -o json: %+v", p)
	}
	p = runBin(t, nil, "", "replay", "-o", "json", "--data", dir)
	var rep struct {
		Hash string `json:"sha256"`
	}
	if p.status != 0 || json.Unmarshal([]byte(p.stdout), &rep) != nil || rep.Hash != hash {
		t.Fatalf("replay -o json: %+v", p)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	writeFile(t, bad, `{"id":"01JD0000000000000000000000","agent":"w1","kind":"apply","writes":[{"path":"a","op":"incr","value":"two"}]}`)
	p = runBin(t, nil, "", "check", bad, "--json")
	var res struct {
		File  string
		OK    bool
		Error string
	}
	if p.status != 1 || json.Unmarshal([]byte(p.stdout), &res) != nil || res.File != bad || res.OK || !strings.Contains(res.Error, "writes[0].value") {
		t.Fatalf("check bad.json --json: %+v", p)
	}
}
