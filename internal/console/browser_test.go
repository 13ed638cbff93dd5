package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natstest"
	"github.com/oklog/ulid/v2"
)

// chromium is the browser the console's test drives: Debian's chromium,
// which .ci/run installs when it is missing, or COAGENT_CHROMIUM.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("COAGENT_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("COAGENT_SKIP_BROWSER") == "1" {
			t.Skipf("no browser at %s, and COAGENT_SKIP_BROWSER=1", path)
		}
		t.Fatalf("the console's browser test needs Chromium at %s (apt-get install chromium, or COAGENT_CHROMIUM=PATH; COAGENT_SKIP_BROWSER=1 skips it): %v", path, err)
	}
	return path
}

// browser starts a headless Chromium for the test, with a fresh profile
// and nothing that reaches out to the network on its own.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 860),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chromium(t), err)
	}
	return ctx
}

// shots is where the screenshots go: COAGENT_CONSOLE_SHOTS, or the test's
// temporary directory.
func shots(t *testing.T) string {
	dir := os.Getenv("COAGENT_CONSOLE_SHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestConsoleInBrowser runs a small scenario — two titles, a claim race, a
// held transaction, a waiter on it, an escalation against it — opens the
// console in headless Chromium and checks what a person sees in each
// view, saving a screenshot of each.
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser; the full test run has it")
	}
	bctx := browser(t)
	w := newWorld(t)
	ctx := context.Background()

	draft := w.apply(w.w1, intents.Apply("title").Set("report.title", "Draft")).Rev
	w.apply(w.w1, intents.Apply("title").Set("report.title", "Final"))
	// The claim race: both claim t1 at once; one wins.
	claim := func(c *agents.Client, out chan<- string) {
		_, err := c.Apply(ctx, intents.Apply("claim").Pre("state.tasks.t1.owner == nil").Set("tasks.t1.owner", c.Name()))
		if err == nil {
			out <- c.Name()
		} else {
			out <- ""
		}
	}
	race := make(chan string, 2)
	go claim(w.w1, race)
	go claim(w.w2, race)
	winner := <-race + <-race
	if winner != "w1" && winner != "w2" {
		t.Fatalf("the claim race: %q won", winner)
	}
	// The held transaction, not renewed, so its lease counts down.
	txn, err := w.w1.Propose(ctx, intents.Propose("rewrite").Write("report.intro", intents.OpSet).Write("report.outline", intents.OpSet).Lease(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	txn.StopRenewing()
	waiter := w.publish(w.w3, intents.Apply("intro").Set("report.intro", "w3's").OnConflict(intents.OnConflictWait).Wait(10*time.Minute))
	escalated := w.publish(w.w2, intents.Apply("outline").Set("report.outline", "w2's").OnConflict(intents.OnConflictEscalate))
	// A second wait of w3 on w1's transaction: one arrow, two labels.
	w.publish(w.w3, intents.Apply("outline").Set("report.outline", "w3's").OnConflict(intents.OnConflictWait).Wait(10*time.Minute))
	dir := shots(t)

	b := &page{t: t, ctx: bctx, dir: dir}
	b.open(w.srv.URL + "/#state")
	b.waitText(`li.node[data-path="report.title"] > .row .val`, `"Final"`)
	b.waitText(`li.node[data-path="report.title"] > .row .ver`, "v2")
	b.waitText(`li.node[data-path="tasks.t1.owner"] > .row .val`, strconv.Quote(winner))
	b.waitText(`li.node[data-path="tasks.t1.owner"] > .row .ver`, "v1")
	b.click(`li.node[data-path="report.title"] > .row`)
	b.waitText(`#detail`, "state.get at rev")
	b.shot("state")

	b.run(chromedp.SetValue(chromedp.CSS(`#rev`), strconv.FormatUint(draft, 10)), chromedp.Click(chromedp.CSS(`#rev-go`)))
	b.waitText(`#rev-shown`, fmt.Sprintf("rev %d of", draft))
	b.waitText(`li.node[data-path="report.title"] > .row .val`, `"Draft"`)
	b.waitText(`li.node[data-path="report.title"] > .row .ver`, "v1")
	b.poll(`!document.querySelector('li.node[data-path="tasks"]')`, "no tasks at the earlier revision")
	b.shot("state-earlier")

	b.open(w.srv.URL + "/#txns")
	row := fmt.Sprintf(`tr.txn[data-txn=%q]`, txn.ID())
	b.waitText(row, "w1")
	b.waitText(row+" .fence", strconv.FormatUint(txn.Fence(), 10))
	b.waitText(row, "set report.outline")
	b.poll(fmt.Sprintf(`(() => { const ms = +document.querySelector('%s .countdown').dataset.ms;
		window.firstLease ??= ms; return ms > 0 && ms < 600000 && ms < window.firstLease - 300; })()`, row), "the lease counting down")
	b.shot("txns")

	b.open(w.srv.URL + "/#waiters")
	b.waitText(fmt.Sprintf(`li.waiter[data-intent=%q]`, waiter), "w3")
	b.waitText(fmt.Sprintf(`li.waiter[data-intent=%q]`, waiter), txn.ID())
	b.poll(`!!document.querySelector('#waitgraph g.edge[data-from="w3"][data-to="w1"]')`, "the edge w3 → w1 in the wait-for graph")
	b.poll(`document.querySelectorAll('#waitgraph g.edge[data-from="w3"][data-to="w1"] tspan').length === 2`, "w3's two waits on w1, one label each")
	// No text of the graph covers another: labels nor agents.
	b.poll(`(() => { const bs = [...document.querySelectorAll('#waitgraph text')].map((t) => t.getBBox());
		return bs.length >= 5 && bs.every((a, i) => bs.every((b, j) => i === j ||
			a.x + a.width <= b.x || b.x + b.width <= a.x || a.y + a.height <= b.y || b.y + b.height <= a.y)); })()`, "the graph's texts apart")
	b.shot("waiters")

	b.open(w.srv.URL + "/#arbiter")
	cas := fmt.Sprintf(`#queue .case[data-case=%q]`, escalated)
	b.waitText(cas, "from w2")
	b.waitText(cas, "report.outline")
	b.shot("arbiter")

	b.open(w.srv.URL + "/#conflicts")
	b.waitText(`tr.spot[data-name="report"]`, "report")
	b.shot("conflicts")

	b.open(w.srv.URL + "/#events")
	b.poll(`document.querySelector('#feed-status').dataset.state === 'open'`, "the feed open")
	live := w.apply(w.w2, intents.Apply("note").Set("notes.live", "seen live")).Intent
	b.waitText(fmt.Sprintf(`#feed li.event[data-type="change"][data-agent="w2"]`), "notes.live")
	b.waitText(fmt.Sprintf(`#feed li.event[data-type="decision"][data-intent=%q]`, live), "applied")
	// What happened before the page opened is there too, from the log.
	b.waitText(fmt.Sprintf(`#feed li.event[data-type="change"][data-seq="%d"]`, draft), "Draft")
	b.shot("events")

	b.open(w.srv.URL + "/#story/" + escalated)
	b.waitText(`#story`, "Intent "+escalated)
	b.waitText(fmt.Sprintf(`#story li.event[data-type="escalate"][data-intent=%q]`, escalated), "with w1")
	b.waitText(fmt.Sprintf(`#story li.event[data-type="intent"][data-intent=%q]`, escalated), "set report.outline")
	b.shot("story")
}

// publish sends an intent by the stream path, which returns at once: for
// one that waits or escalates, and whose final decision the test does not
// wait for.
func (w *world) publish(c *agents.Client, b *intents.Builder) string {
	w.t.Helper()
	in, err := b.Build()
	if err != nil {
		w.t.Fatal(err)
	}
	in.ID = ulid.Make().String()
	id, err := c.Publish(context.Background(), in)
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

// page drives the browser tab, failing the test with what the page shows
// when an expectation is not met in time.
type page struct {
	t   *testing.T
	ctx context.Context
	dir string
}

const pageWait = 15 * time.Second

func (p *page) run(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pageWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("%v; the page says: %s", err, p.says())
	}
}

func (p *page) open(url string) {
	p.t.Helper()
	p.run(chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS(`#view`)))
}

func (p *page) click(sel string) {
	p.t.Helper()
	p.run(chromedp.Click(chromedp.CSS(sel)))
}

// poll waits until the expression is true.
func (p *page) poll(expr, what string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pageWait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(pageWait))); err != nil {
		p.t.Fatalf("waiting for %s: %v; the page says: %s", what, err, p.says())
	}
}

// waitText waits until the element sel exists and its text holds want.
func (p *page) waitText(sel, want string) {
	p.t.Helper()
	p.poll(fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? '').includes(%q)`, sel, want), fmt.Sprintf("%s to show %q", sel, want))
}

// says is the page's error line and view, for a failure's message.
func (p *page) says() string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('#error')?.textContent || '') + ' | ' + (document.querySelector('#view')?.innerText || '').slice(0, 1500)`))
	return text
}

func (p *page) shot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pageWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	file := filepath.Join(p.dir, "console-"+name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", file)
}

// TestBoardInBrowser: the board shows a lane's tasks, who holds each, and
// a held claim's lease counting down, renewed by its holder.
func TestBoardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser; the full test run has it")
	}
	bctx := browser(t)
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.svc.SetRules(ctx, []byte(`{"rules":[{"pattern":"tasks.*","kind":"task","lease":"20s","reclaim_to":"PENDING","max_retries":1,"operators":["w1"]}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	// t3 as a task past its tries leaves it (only an operator writes tries).
	w.apply(w.w1, intents.Apply("plan").Set("tasks.t1", map[string]any{"status": "PENDING", "priority": 2}).
		Set("tasks.t2", map[string]any{"status": "PENDING"}).Set("tasks.t3", map[string]any{"status": "DEAD", "tries": 2}))
	cl, err := w.w2.ClaimNext(ctx, "tasks", map[string]any{"status": "RUNNING"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.StopRenewing()
	if cl.Task() != "tasks.t1" {
		t.Fatalf("claim next: %s, want tasks.t1, of the higher priority", cl.Task())
	}

	b := &page{t: t, ctx: bctx, dir: shots(t)}
	b.open(w.srv.URL + "/#board")
	b.waitText(`#board section.lane[data-lane="tasks"] h3`, "tasks")
	b.waitText(`#board .task[data-task="tasks.t1"] .owner`, "w2")
	b.waitText(`#board .task[data-task="tasks.t1"] .status`, "RUNNING")
	b.waitText(`#board .task[data-task="tasks.t2"] .owner`, "unclaimed")
	b.waitText(`#board .task[data-task="tasks.t3"] .tries`, "tries 2")
	b.waitText(`#board .task[data-task="tasks.t3"] .dead`, "dead letter")
	b.poll(`(() => { const ms = +document.querySelector('#board .task[data-task="tasks.t1"] .countdown')?.dataset.ms;
		return ms > 0 && ms <= 20000; })()`, "t1's lease counting down")
	b.shot("board")
}

// TestCasesInBrowser: a person acts on the open cases from the Arbiter
// view. An intent a rule holds for approval shows with its diff and its
// deadline counting down, and a badge on every view says it waits for
// them; an approval by an agent the rule does not name is refused, in
// words, and changes nothing; the approver's approval applies it; a
// denial with a reason rejects another; and an escalation is settled by
// picking its winner and writing a rationale.
func TestCasesInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser; the full test run has it")
	}
	bctx := browser(t)
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.svc.SetRules(ctx, []byte(`{"rules":[{"pattern":"deploy.**","approve":{"by":["lina"],"timeout":"10m"}},
		{"pattern":"tasks.*","kind":"task","lease":"1s","reclaim_to":"PENDING"}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	gated := w.publish(w.w1, intents.Apply("release").Set("deploy.web", map[string]any{"version": 3}))
	b := &page{t: t, ctx: bctx, dir: shots(t)}
	card := fmt.Sprintf(`#open .case[data-case=%q]`, gated)

	b.open(w.srv.URL + "/#arbiter")
	b.waitText(card, "from w1")
	b.waitText(card+` tr[data-path="deploy.web"] .now`, "absent")
	b.waitText(card+` tr[data-path="deploy.web"] .after`, `{"version":3}`)
	b.waitText(card, "needs 1 approval of lina")
	b.poll(fmt.Sprintf(`(() => { const ms = +document.querySelector('%s .countdown')?.dataset.ms; return ms > 0 && ms <= 600000; })()`, card), "the deadline counting down")

	// bob may not approve: the refusal is said, and the case stays open.
	b.run(chromedp.SetValue(chromedp.CSS(`#act-as`), "bob"), chromedp.Click(chromedp.CSS(`#act-as-set`)))
	b.waitText(card+` .muted`, "may not let bob vote")
	b.click(card + ` button.approve`)
	b.waitText(card+` .result.refused`, "agent bob may not vote on case "+gated)
	b.shot("case-refused")

	// As lina: the badge shows from another view, and her approval applies it.
	b.run(chromedp.SetValue(chromedp.CSS(`#act-as`), "lina"), chromedp.Click(chromedp.CSS(`#act-as-set`)))
	b.open(w.srv.URL + "/#state")
	b.waitText(`#for-you`, "1 case waits for you")
	b.waitText(`#who`, "acting as lina")
	b.open(w.srv.URL + "/#arbiter")
	b.waitText(card, "from w1")
	b.run(chromedp.SetValue(chromedp.CSS(card+` input.why`), "the release notes are in"))
	b.shot("case-approval")
	b.click(card + ` button.approve`)
	b.waitText(card+` .result.ok`, "approved: the intent was applied")
	st, err := w.w2.Read(ctx, "deploy.web")
	if err != nil || string(st.Values["deploy.web"].Value) != `{"version":3}` {
		t.Fatalf("deploy.web after the approval: %+v %v", st, err)
	}

	// The intent's story holds the approval: who, when, why.
	b.open(w.srv.URL + "/#story/" + gated)
	b.waitText(fmt.Sprintf(`#story li.event[data-type="escalate"][data-intent=%q]`, gated), "waits for 1 approval of lina")
	b.waitText(fmt.Sprintf(`#story li.event[data-type="vote"][data-intent=%q]`, gated), "approve by lina: the release notes are in")
	b.shot("case-story")
	b.open(w.srv.URL + "/#arbiter")

	// A denial needs a reason, and rejects the intent with it.
	denied := w.publish(w.w1, intents.Apply("release").Set("deploy.web", map[string]any{"version": 4}))
	card = fmt.Sprintf(`#open .case[data-case=%q]`, denied)
	b.waitText(card, "from w1")
	b.click(card + ` button.deny`)
	b.waitText(card+` .result.refused`, "rationale: missing")
	b.run(chromedp.SetValue(chromedp.CSS(card+` input.why`), "not during the freeze"))
	b.click(card + ` button.deny`)
	b.waitText(card+` .result.ok`, "denied: the intent was rejected (arbiter_rejected: denied by lina: not during the freeze)")

	// An agent's question: the person answers it, and the answer is
	// written where the agent said.
	question := w.publish(w.w3, intents.Apply("ask").Set("plan.budget", nil).
		Meta(intents.MetaAsk, intents.Ask{Question: "What is the budget?", Schema: json.RawMessage(`{"type":"number"}`)}))
	card = fmt.Sprintf(`#open .case[data-case=%q]`, question)
	b.waitText(card, "asks: What is the budget?")
	b.run(chromedp.SetValue(chromedp.CSS(card+` input.answer`), "12000"))
	b.shot("case-question")
	b.click(card + ` button.answer`)
	b.waitText(card+` .result.ok`, "answered: the intent was applied")
	if st, err := w.w2.Read(ctx, "plan.budget"); err != nil || string(st.Values["plan.budget"].Value) != "12000" {
		t.Fatalf("plan.budget after the answer: %+v %v", st, err)
	}

	// An escalation: the person picks the winner and says why.
	txn, err := w.w2.Propose(ctx, intents.Propose("rewrite").Write("report.outline", intents.OpSet).Lease(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.StopRenewing()
	escalated := w.publish(w.w3, intents.Apply("outline").Set("report.outline", "w3's").OnConflict(intents.OnConflictEscalate))
	card = fmt.Sprintf(`#open .case[data-case=%q]`, escalated)
	b.waitText(card, "write-write on report.outline with w2")
	b.click(card + fmt.Sprintf(` input.winner[value=%q]`, escalated))
	b.run(chromedp.SetValue(chromedp.CSS(card+` input.why`), "w3's outline is the newer one"))
	b.shot("case-escalation")
	b.click(card + ` button.resolve`)
	b.waitText(card+` .result.ok`, "resolved: "+escalated+" wins")
	natstest.CheckFor(t, 10*time.Second, "the winner's write", func() error {
		st, err := w.w2.Read(ctx, "report.outline")
		if err != nil || string(st.Values["report.outline"].Value) != `"w3's"` {
			return fmt.Errorf("report.outline after the resolution: %+v %v", st, err)
		}
		return nil
	})

	// A task whose claim ended with an effect pending: the person declares
	// what became of it, and the task can be claimed again.
	w.apply(w.w1, intents.Apply("plan").Set("tasks.t1", map[string]any{"status": "PENDING"}))
	cl, err := w.w1.Claim(ctx, "tasks.t1", map[string]any{"status": "RUNNING"})
	if err != nil {
		t.Fatal(err)
	}
	w.apply(w.w1, intents.Apply("effect").Fence(cl.Fence()).Set("tasks.t1.effects.mail", map[string]any{"status": "pending", "description": "send the invoice"}))
	cl.StopRenewing()
	card = `#open .case[data-case="tasks.t1"]`
	b.waitText(card, "effects pending: mail")
	b.run(chromedp.SetValue(chromedp.CSS(card+` input.why`), "the invoice is in the outbox"))
	b.shot("case-reconcile")
	b.click(card + ` button.reconcile`)
	b.waitText(card+` .result.ok`, "declared: the intent was applied")
	if _, err := w.w2.Claim(ctx, "tasks.t1", nil); err != nil {
		t.Fatalf("a claim of the task once reconciled: %v", err)
	}
}

// TestWhatIfInBrowser: the What if view decides the log again under a
// rules file typed into the page: the matrix shows the decision that
// changes, the divergence names the rule and opens the intent's story; a
// file that is not JSON is refused in words.
func TestWhatIfInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a browser; the full test run has it")
	}
	bctx := browser(t)
	w := newWorld(t)
	w.apply(w.w1, intents.Apply("draft").Set("docs.intro", "by w1"))
	second := w.apply(w.w2, intents.Apply("draft").Set("docs.outro", "by w2")).Intent
	b := &page{t: t, ctx: bctx, dir: shots(t)}

	b.open(w.srv.URL + "/#whatif")
	b.run(chromedp.SetValue(chromedp.CSS(`#whatif-rules`), `{"rules":[{"pattern":"docs.**","writers":["w1"]}]}`))
	b.click(`#whatif-go`)
	b.waitText(`#whatif-summary`, "1 change")
	b.waitText(`#whatif-matrix tr.changed`, "rejected:unauthorized")
	div := fmt.Sprintf(`#whatif-top li.divergence[data-intent=%q]`, second)
	b.waitText(div, "rules[0] (docs.**)")
	b.waitText(div, "agent w2 may not write docs.outro")
	b.shot("whatif")
	b.click(div + ` a`)
	b.waitText(fmt.Sprintf(`#story li.event[data-type="decision"][data-intent=%q]`, second), "applied")

	b.open(w.srv.URL + "/#whatif")
	b.run(chromedp.SetValue(chromedp.CSS(`#whatif-rules`), `{"rules":[{"pattern":"docs.**","on_conflict":"later"}]}`))
	b.click(`#whatif-go`)
	b.waitText(`#error`, "on_conflict")
}
