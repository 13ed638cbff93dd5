package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"
)

// submitFlags are the flags of `coagent submit`.
type submitFlags struct {
	conn    natsFlags
	timeout time.Duration
	agent   string
	// traceparent, if set, is sent as the W3C traceparent header: every
	// event of the intent then carries its trace id.
	traceparent string
	out         output
}

// newSubmitCmd is `coagent submit`: one intent to the API, and its
// decision.
func newSubmitCmd(e *env) *cobra.Command {
	var f submitFlags
	c := &cobra.Command{
		Use:   "submit FILE|-",
		Short: "submit an intent (FILE or - for stdin) and print its decision",
		Long: "Send the intent by request/reply on coagent.api.submit (the agent's own subject with --nkey), again while\n" +
			"the coordinator is unavailable, and print its decision: one line, or the decision's JSON with -o json.\n" +
			"An intent that waits or escalates is asked for again, with the same id, until its final decision or --timeout\n" +
			"(then its interim decision is printed, exit 1).\n" +
			"An intent without an id is given a new ULID; --agent fills in its agent. Exits 0 only for applied, granted or committed.",
		Args: argsBetween(1, 1, "FILE (or - for stdin)"),
		RunE: func(c *cobra.Command, args []string) error {
			if f.traceparent != "" {
				if _, err := intents.ParseTraceparent(f.traceparent); err != nil {
					return usagef(c, "--traceparent %q: %v", f.traceparent, err)
				}
			}
			return runSubmit(c.Context(), &f, args[0], e.stdin, e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	f.conn.register(fs, e.defaultNATS())
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for a final decision")
	fs.StringVar(&f.agent, "agent", "", "the intent's agent, where the intent names none (default the agent of --nkey)")
	fs.StringVar(&f.traceparent, "traceparent", "", "send this W3C traceparent (00-TRACEID-PARENTID-FLAGS) with the intent: its events carry the trace id (coagent log --trace)")
	f.out.register(fs, true)
	return c
}

func runSubmit(ctx context.Context, f *submitFlags, file string, stdin io.Reader, stdout, stderr io.Writer) error {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, intents.MaxIntentSize+1))
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return fmt.Errorf("read intent: %w", err)
	}
	s := submission{name: "coagent submit", conn: &f.conn, timeout: f.timeout, agent: f.agent, traceparent: f.traceparent, out: &f.out}
	return s.send(ctx, data, stdout, stderr)
}

// submission is how one command sends an intent and prints its decision:
// submit, and the commands that make the intent for the user (put, del,
// incr, txn commit|abort|renew).
type submission struct {
	name    string // the command, for what it says on stderr
	conn    *natsFlags
	timeout time.Duration
	// agent is --agent: the intent's agent where the intent names none
	// ("": the agent of --nkey, or none).
	agent       string
	traceparent string
	// lane, when set, asks for a claim of the lane's next task
	// (intents.HeaderClaimNext), which the reply's header names.
	lane string
	out  *output
	// success says which outcomes exit 0 (nil: Outcome.Success, applied,
	// granted or committed).
	success func(intents.Outcome) bool
}

// send completes the intent data (its id, its agent), sends it, asks again
// after an interim decision up to the timeout, and prints the decision; it
// is exitError(1) unless the outcome is a success.
func (s *submission) send(ctx context.Context, data []byte, stdout, stderr io.Writer) error {
	agent, from := s.agent, "--agent"
	if nk := s.conn.agent(); nk != "" {
		if agent != "" && agent != nk {
			return fmt.Errorf("--agent %s, but --nkey %s is the key of agent %s", agent, s.conn.nkey, nk)
		}
		agent, from = nk, "--nkey "+s.conn.nkey
	}
	data, id, _, err := completeIntent(data, agent, from)
	if err != nil {
		return err
	}
	if id != "" {
		fmt.Fprintf(stderr, "%s: intent id %s\n", s.name, id)
	}
	nc, err := s.conn.connect(s.name)
	if err != nil {
		return err
	}
	defer nc.Close()
	reqCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// An agent known from --nkey or --agent submits on its own subject: an
	// authenticated one may only, and the coordinator then records even an
	// intent it cannot read as that agent's.
	var d intents.Decision
	for said := false; ; {
		hdr := nats.Header{}
		if s.traceparent != "" {
			hdr.Set(intents.HeaderTraceparent, s.traceparent)
		}
		if s.lane != "" {
			hdr.Set(intents.HeaderClaimNext, s.lane)
		}
		resp, err := sendIntent(reqCtx, nc, s.conn.subjects().Submit(agent), data, hdr, stderr)
		if err != nil {
			return err
		}
		if task := resp.Header.Get(intents.HeaderTask); s.lane != "" && task != "" {
			fmt.Fprintf(stderr, "%s: task %s\n", s.name, task)
		}
		d = intents.Decision{}
		if err := json.Unmarshal(resp.Data, &d); err != nil {
			return fmt.Errorf("submit: the coordinator answered %q: %w", resp.Data, err)
		}
		if said {
			// The answer to this command's own asking again: the intent
			// was decided once, whatever the reply's record says.
			d.Duplicate = false
		}
		// An interim decision (queued, escalated) is the answer at the end
		// of one request's wait, not of the timeout: the same intent asks
		// again, the coordinator answering its final decision as soon as
		// it exists, as the SDK's Submit does.
		dl, _ := reqCtx.Deadline()
		if d.Outcome.Final() || d.Intent == "" || time.Until(dl) < reaskMin {
			break
		}
		if !said {
			fmt.Fprintf(stderr, "%s: %s %s; waiting up to --timeout %s for its final decision\n", s.name, d.Outcome, d.Intent, s.timeout)
			said = true
		}
	}
	if s.out.json() {
		out, _ := json.MarshalIndent(&d, "", "  ")
		fmt.Fprintln(stdout, string(out))
	} else {
		fmt.Fprintln(stdout, describeDecision(&d))
	}
	ok := intents.Outcome.Success
	if s.success != nil {
		ok = s.success
	}
	if !ok(d.Outcome) {
		return exitError(1)
	}
	return nil
}

// completeIntent gives the intent data a new ULID when it has no id, and
// agent as its agent when it names none (agent may be ""); it returns the
// intent, the id it made and whether it names no agent (before agent is
// filled in). An intent naming an agent other than agent is an error naming
// both, and from, the flag that named agent. What is not a JSON object is
// left for the coordinator to refuse, with the reasons it gives.
func completeIntent(data []byte, agent, from string) (out []byte, made string, noAgent bool, err error) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil || fields == nil {
		return data, "", false, nil
	}
	str := func(key string) (string, bool) {
		raw, ok := fields[key]
		if !ok || string(raw) == "null" {
			return "", true
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return "", false // not a string: the coordinator says so
		}
		return v, true
	}
	changed := false
	if id, ok := str("id"); ok && id == "" {
		made = ulid.Make().String()
		fields["id"], _ = json.Marshal(made)
		changed = true
	}
	named, ok := str("agent")
	noAgent = ok && named == ""
	if ok && agent != "" {
		switch named {
		case "":
			fields["agent"], _ = json.Marshal(agent)
			changed = true
		case agent:
		default:
			return nil, "", false, fmt.Errorf("the intent's agent is %s, but %s says %s", named, from, agent)
		}
	}
	if !changed {
		return data, "", noAgent, nil // the bytes as written: the coordinator decodes them strictly
	}
	if out, err = json.Marshal(fields); err != nil {
		return nil, "", false, fmt.Errorf("encode the intent: %w", err)
	}
	return out, made, noAgent, nil
}

// describeDecision is a decision as one line a person reads:
// `applied 01J… rev 7 (report.title v3)`.
func describeDecision(d *intents.Decision) string {
	var b strings.Builder
	intent := d.Intent
	if intent == "" {
		intent = "(no intent id)" // an intent the coordinator could not read
	}
	fmt.Fprintf(&b, "%s %s", d.Outcome, intent)
	if d.Reason != "" {
		fmt.Fprintf(&b, " %s", d.Reason)
	}
	if d.Rev != 0 {
		fmt.Fprintf(&b, " rev %d", d.Rev)
	}
	if len(d.Versions) > 0 {
		var vs []string
		for _, p := range slices.Sorted(maps.Keys(d.Versions)) {
			vs = append(vs, fmt.Sprintf("%s v%d", p, d.Versions[p]))
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(vs, ", "))
	}
	if d.Txn != "" {
		fmt.Fprintf(&b, " txn %s fence %d", d.Txn, d.Fence)
	}
	if d.LeaseExpires != nil {
		fmt.Fprintf(&b, " lease until %s", d.LeaseExpires.Format(time.RFC3339))
	}
	if d.Duplicate {
		b.WriteString(" (duplicate)")
	}
	if d.Detail != "" {
		fmt.Fprintf(&b, ": %s", d.Detail)
	}
	for _, c := range d.Conflicts {
		fmt.Fprintf(&b, "; %s conflict on %s", c.Kind, c.Path)
		if c.WithAgent != "" {
			fmt.Fprintf(&b, " with %s", c.WithAgent)
		}
	}
	if len(d.MergedWith) > 0 {
		fmt.Fprintf(&b, "; merged with %s", strings.Join(d.MergedWith, ", "))
	}
	if d.Retryable && !d.Outcome.Success() {
		b.WriteString("; retryable")
	}
	return b.String()
}

// sendIntent sends the intent on subject and returns the reply. It sends
// the same intent again, with backoff, until ctx ends — the intent's id
// makes that safe — when the coordinator answers unavailable (its intake
// is full), when none answers (no responders: a cluster between two
// active coordinators), and when a reply does not come within attempt (the
// coordinator died with the request): so a submit rides a failover.
func sendIntent(ctx context.Context, nc *nats.Conn, subject string, data []byte, hdr nats.Header, stderr io.Writer) (*nats.Msg, error) {
	said := ""
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		msg := nats.NewMsg(subject)
		msg.Data = data
		for k, v := range hdr {
			msg.Header[k] = v
		}
		// The coordinator answers with the interim decision a little before
		// this attempt gives up, rather than not at all.
		attemptCtx, cancel := ctx, context.CancelFunc(func() {})
		wait := time.Duration(0)
		if dl, ok := ctx.Deadline(); ok {
			left := time.Until(dl)
			if left > 2*attempt {
				attemptCtx, cancel = context.WithTimeout(ctx, attempt)
				left = attempt
			}
			wait = max(left-time.Second, 0)
		}
		msg.Header.Set(intents.HeaderWait, strconv.FormatInt(wait.Milliseconds(), 10))
		resp, err := nc.RequestMsgWithContext(attemptCtx, msg)
		cancel()
		var why string
		switch {
		case err == nil:
			if err = apiError(resp); err == nil {
				return resp, nil
			}
			if resp.Header.Get(micro.ErrorCodeHeader) != "unavailable" {
				return nil, err
			}
			why = err.Error()
		case errors.Is(err, nats.ErrNoResponders):
			why = "no coordinator answers (a failover may be under way)"
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			why = fmt.Sprintf("no reply within %s", attempt)
		default:
			return nil, fmt.Errorf("submit: %w", err)
		}
		if why != said {
			fmt.Fprintf(stderr, "coagent submit: %s; sending the same intent again\n", why)
			said = why
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, fmt.Errorf("submit: %w (%s)", ctx.Err(), why)
		}
	}
}

// reaskMin is the least time left of --timeout for which submit asks
// again after an interim decision: below it the coordinator's wait, a
// second less than the request's, would be none.
const reaskMin = 1500 * time.Millisecond

// attempt bounds one request// attempt bounds one request of a submit whose timeout is longer than
// twice it: a coordinator that died holding the request is not waited
// for, the intent goes to whichever coordinator is active.
const attempt = 5 * time.Second

// apiError turns a micro error reply into an error naming its code.
func apiError(resp *nats.Msg) error {
	if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" {
		return fmt.Errorf("%s: %s", code, resp.Header.Get(micro.ErrorHeader))
	}
	return nil
}
