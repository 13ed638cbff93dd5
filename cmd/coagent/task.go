package main

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// taskFlags are the flags of `coagent task`'s verbs: one intent each on a
// task record (a path under a task rule), as the agent that owns it.
type taskFlags struct {
	kv     kvFlags
	fence  uint64
	status string
	lease  time.Duration
}

// register registers the flags; fence says the verb carries the claim's
// fence, status is the --status default ("-": no --status at all).
func (f *taskFlags) register(c *cobra.Command, e *env, fence bool, status string) {
	f.kv.register(c, e)
	fs := c.Flags()
	if fence {
		fs.Uint64Var(&f.fence, "fence", 0, "the fence of your claim, from its decision (required)")
	}
	if status != "-" {
		fs.StringVar(&f.status, "status", status, "the status to set (\"\" for none)")
	}
}

// newTaskCmd is `coagent task`: claiming, renewing, completing and
// releasing a task from the command line, as an agent would.
func newTaskCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "task",
		Short: "claim, renew, complete or release a task (a path under a task rule)",
		Long: "Each verb is one intent on a task record, as --agent (default the agent of --nkey, else " + defaultKVAgent + ").\n" +
			"Under a task rule with a lease, a claim's decision prints its lease (txn) and fence: renew the lease\n" +
			"before it ends, and give the fence to done and release, or they are fenced. When the lease ends\n" +
			"unrenewed the coordinator takes the task back (docs/semantics.md, task claims under a lease).",
	}
	c.AddCommand(newTaskClaimCmd(e), newTaskNextCmd(e), newTaskRenewCmd(e), newTaskEndCmd(e, "done", "DONE"), newTaskEndCmd(e, "release", ""),
		newTaskOperatorCmd(e, "reassign"), newTaskOperatorCmd(e, "cancel"), newTaskReconcileCmd(e))
	return c
}

// newTaskReconcileCmd is `coagent task reconcile`: a person declares the
// effects a task's last owner left pending, each --effect KEY=STATUS
// (confirmed, failed or compensated), with --why recorded in the intent's
// meta; once none is pending, the task can be claimed again.
func newTaskReconcileCmd(e *env) *cobra.Command {
	var f taskFlags
	var effects []string
	var why string
	c := &cobra.Command{
		Use:   "reconcile TASK --effect KEY=STATUS… --why TEXT",
		Short: "declare the effects a task's last owner left pending: confirmed, failed or compensated (coagent case list shows the tasks to reconcile)",
		Args:  argsBetween(1, 1, "TASK"),
		RunE: func(c *cobra.Command, args []string) error {
			task := args[0]
			if err := checkPath(c, task); err != nil {
				return err
			}
			if why == "" {
				return usagef(c, "--why: missing; say how you know, for the log")
			}
			if len(effects) == 0 {
				return usagef(c, "--effect: missing; declare each effect pending as KEY=confirmed, KEY=failed or KEY=compensated")
			}
			var writes []intents.Write
			for _, kv := range effects {
				key, status, ok := strings.Cut(kv, "=")
				if !ok || !intents.ValidSegment(key) || (status != "confirmed" && status != "failed" && status != "compensated") {
					return usagef(c, "--effect %q: want KEY=confirmed, KEY=failed or KEY=compensated", kv)
				}
				v, _ := json.Marshal(status)
				writes = append(writes, intents.Write{Path: task + ".effects." + key + ".status", Op: intents.OpSet, Value: v})
			}
			meta, _ := json.Marshal(map[string]string{"why": why})
			return f.send(c, e, map[string]any{"kind": intents.KindApply, "action": "reconcile", "writes": writes, "meta": json.RawMessage(meta)})
		},
	}
	f.register(c, e, false, "-")
	c.Flags().StringArrayVar(&effects, "effect", nil, "an effect pending and what became of it, KEY=confirmed|failed|compensated (repeat for each)")
	c.Flags().StringVar(&why, "why", "", "how you know, recorded with the intent (required)")
	return c
}

// newTaskOperatorCmd is reassign or cancel: one of the task rule's
// operators gives TASK to --to, or takes it from its owner, whoever that
// is; --why is recorded with the intent (meta.why), and the agents are
// told.
func newTaskOperatorCmd(e *env, verb string) *cobra.Command {
	var f taskFlags
	var to, why string
	short := "as one of the task rule's operators, give TASK to --to, whoever holds it (recorded with --why)"
	def := "-"
	if verb == "cancel" {
		short = "as one of the task rule's operators, take TASK from its owner and set --status (CANCELLED), recorded with --why"
		def = "CANCELLED"
	}
	c := &cobra.Command{
		Use:   verb + " TASK",
		Short: short,
		Args:  argsBetween(1, 1, "TASK"),
		RunE: func(c *cobra.Command, args []string) error {
			task := args[0]
			if err := checkPath(c, task); err != nil {
				return err
			}
			if why == "" {
				return usagef(c, "--why: missing; say why, for the log")
			}
			var writes []intents.Write
			if verb == "reassign" {
				if !intents.ValidSegment(to) {
					return usagef(c, "--to %q: want the agent to give the task to", to)
				}
				v, _ := json.Marshal(to)
				writes = append(writes, intents.Write{Path: task + ".owner", Op: intents.OpSet, Value: v})
			} else {
				writes = append(writes, intents.Write{Path: task + ".owner", Op: intents.OpDelete})
				if f.status != "" {
					v, _ := json.Marshal(f.status)
					writes = append(writes, intents.Write{Path: task + ".status", Op: intents.OpSet, Value: v})
				}
			}
			meta, _ := json.Marshal(map[string]string{"why": why})
			return f.send(c, e, map[string]any{"kind": intents.KindApply, "action": verb, "writes": writes, "meta": json.RawMessage(meta)})
		},
	}
	f.register(c, e, false, def)
	c.Flags().StringVar(&why, "why", "", "why, recorded with the intent (required)")
	if verb == "reassign" {
		c.Flags().StringVar(&to, "to", "", "the agent to give the task to (required)")
	}
	return c
}

// taskAgent is the agent a verb acts as: the owner it claims for.
func (f *taskFlags) taskAgent() string {
	if f.kv.agent != "" {
		return f.kv.agent
	}
	if a := f.kv.conn.agent(); a != "" {
		return a
	}
	return defaultKVAgent
}

func (f *taskFlags) send(c *cobra.Command, e *env, in map[string]any) error {
	return f.sendLane(c, e, "", in)
}

// sendLane sends in; with a lane, as a claim of the lane's next task.
func (f *taskFlags) sendLane(c *cobra.Command, e *env, lane string, in map[string]any) error {
	if _, fenced := in["fence"]; fenced && f.fence == 0 {
		return usagef(c, "--fence: missing; give the fence your claim's decision printed")
	}
	agent := f.taskAgent()
	in["agent"] = agent
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	s := submission{name: c.CommandPath(), conn: &f.kv.conn, timeout: f.kv.timeout, agent: agent, out: &f.kv.out, lane: lane}
	if in["kind"] == intents.KindRenew {
		s.success = func(o intents.Outcome) bool { return o == intents.OutcomeRenewed }
	}
	return s.send(c.Context(), data, e.stdout, e.stderr)
}

func newTaskClaimCmd(e *env) *cobra.Command {
	var f taskFlags
	c := &cobra.Command{
		Use:   "claim TASK",
		Short: "claim TASK if nobody holds it: sets TASK.owner (and --status)",
		Args:  argsBetween(1, 1, "TASK"),
		RunE: func(c *cobra.Command, args []string) error {
			task := args[0]
			if err := checkPath(c, task); err != nil {
				return err
			}
			agent := f.taskAgent()
			owner, _ := json.Marshal(agent)
			writes := []intents.Write{{Path: task + ".owner", Op: intents.OpSet, Value: owner}}
			if f.status != "" {
				v, _ := json.Marshal(f.status)
				writes = append(writes, intents.Write{Path: task + ".status", Op: intents.OpSet, Value: v})
			}
			return f.send(c, e, map[string]any{"kind": intents.KindApply, "action": "claim", "writes": writes,
				"pre": []string{intents.StateRef(task+".owner") + " == nil"}})
		},
	}
	f.register(c, e, false, "RUNNING")
	return c
}

// newTaskNextCmd is `coagent task next LANE`: the coordinator picks the
// lane's next claimable task (highest priority, then least recently
// changed) and claims it for the agent, in one decision.
func newTaskNextCmd(e *env) *cobra.Command {
	var f taskFlags
	c := &cobra.Command{
		Use:   "next LANE",
		Short: "claim LANE's next claimable task (highest priority first); says which on stderr",
		Args:  argsBetween(1, 1, "LANE"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkPath(c, args[0]); err != nil {
				return err
			}
			var writes []intents.Write
			if f.status != "" {
				v, _ := json.Marshal(f.status)
				writes = append(writes, intents.Write{Path: "status", Op: intents.OpSet, Value: v})
			}
			in := map[string]any{"kind": intents.KindApply, "action": "claim_next", "writes": writes}
			if f.lease > 0 {
				// Waits for a task as an intent waits on a transaction;
				// the request waits as long (--timeout permitting).
				in["on_conflict"], in["wait_ms"] = intents.OnConflictWait, f.lease.Milliseconds()
			}
			return f.sendLane(c, e, args[0], in)
		},
	}
	f.register(c, e, false, "RUNNING")
	c.Flags().DurationVar(&f.lease, "wait", 0, "wait up to this long for a task to become claimable (within --timeout); 0: answer at once")
	return c
}

func newTaskRenewCmd(e *env) *cobra.Command {
	var f taskFlags
	c := &cobra.Command{
		Use:   "renew LEASE",
		Short: "renew the lease of your claim (LEASE is the txn its decision printed)",
		Args:  argsBetween(1, 1, "LEASE"),
		RunE: func(c *cobra.Command, args []string) error {
			in := map[string]any{"kind": intents.KindRenew, "txn": args[0], "fence": f.fence}
			if f.lease > 0 {
				in["lease_ms"] = f.lease.Milliseconds()
			}
			return f.send(c, e, in)
		},
	}
	f.register(c, e, true, "-")
	c.Flags().DurationVar(&f.lease, "lease", 0, "how long from now (default the rule's lease)")
	return c
}

// newTaskEndCmd is done or release: the owner, carrying its fence,
// removes TASK.owner and sets --status (done: DONE by default).
func newTaskEndCmd(e *env, verb, status string) *cobra.Command {
	var f taskFlags
	short := "release TASK: remove its owner (and set --status), carrying your claim's fence"
	if verb == "done" {
		short = "complete TASK: set --status (DONE) and remove its owner, carrying your claim's fence"
	}
	c := &cobra.Command{
		Use:   verb + " TASK",
		Short: short,
		Args:  argsBetween(1, 1, "TASK"),
		RunE: func(c *cobra.Command, args []string) error {
			task := args[0]
			if err := checkPath(c, task); err != nil {
				return err
			}
			writes := []intents.Write{{Path: task + ".owner", Op: intents.OpDelete}}
			if f.status != "" {
				v, _ := json.Marshal(f.status)
				writes = append(writes, intents.Write{Path: task + ".status", Op: intents.OpSet, Value: v})
			}
			return f.send(c, e, map[string]any{"kind": intents.KindApply, "action": verb, "fence": f.fence, "writes": writes,
				"pre": []string{intents.StateRef(task+".owner") + " == agent"}})
		},
	}
	f.register(c, e, true, status)
	return c
}
