package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"
)

// newLogCmd is `coagent log`: the audit trail, from a running server's
// log.query, or from the log's indexes in a stopped server's directory.
//
// The server is the default: a running server holds its directory locked,
// so reading the directory works only once the server is stopped, while
// the question "what happened" is mostly asked of a live system. --data
// names the directory when that is what is wanted.
func newLogCmd(e *env) *cobra.Command {
	var data, typ, trace, intent string
	var q eventlog.Query
	var out output
	var follow bool
	var conn natsFlags
	c := &cobra.Command{
		Use:   "log",
		Short: "query the audit trail by agent, path, type, transaction, intent or trace (--follow: and go on)",
		Long: "Print the events that match every filter given, one a line (-o json: one JSON event a line), from the running\n" +
			"server at --nats (log.query, as the agent of --nkey may see them), or with --data DIR from the directory of a\n" +
			"stopped server. When more match than --limit, stderr says where to go on (more: --from SEQ). --follow prints\n" +
			"every match from --from on and then each new one as it is logged, until interrupted (with --path, the decisions of\n" +
			"the intents that touch the path too, which carry no path themselves). --trace finds the events of\n" +
			"the intents that came with that W3C trace id (a traceparent header, or meta.traceparent), in order. --intent\n" +
			"finds the events of one intent (its own: those of the transaction it opened are found by --txn). On a cluster,\n" +
			"--node NAME asks that coordinator, a standby too, as far as it has followed the log (stderr says which node\n" +
			"answered).",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if typ != "" {
				q.Type = intents.EventType(typ)
				if !slices.Contains(intents.EventTypes, q.Type) {
					return usagef(c, "--type %q: want one of %s", typ, typeNames())
				}
			}
			if q.Limit <= 0 {
				return usagef(c, "--limit %d: want at least 1", q.Limit)
			}
			if q.Agent != "" && !intents.ValidSegment(q.Agent) {
				return usagef(c, "--agent %q: not an agent name", q.Agent)
			}
			if q.Path != "" {
				if err := intents.CheckPath(q.Path); err != nil {
					return usagef(c, "--path %q: %v", q.Path, err)
				}
			}
			if msg := conn.checkNode(); msg != "" {
				return usagef(c, "%s", msg)
			}
			if trace != "" {
				id, err := intents.ParseTraceID(trace)
				if err != nil {
					return usagef(c, "--trace %q: %v", trace, err)
				}
				q.Trace = id
			}
			if intent != "" {
				id, err := ulid.ParseStrict(intent)
				if err != nil {
					return usagef(c, "--intent %q: not an intent id (a ULID): %v", intent, err)
				}
				q.Intent = id.String() // canonical upper case, as intents spell their ids
			}
			if c.Flags().Changed("data") {
				for _, flag := range []string{"nats", "follow", "nkey", "creds", "subject-prefix", "node"} {
					if c.Flags().Changed(flag) {
						return usagef(c, "--data reads a stopped server's directory, --%s is for a running server: give one", flag)
					}
				}
				return runLog(data, q, out.json(), e.stdout, e.stderr)
			}
			if follow {
				return followLog(c.Context(), &conn, q, out.json(), e.stdout)
			}
			return queryLog(c.Context(), &conn, q, out.json(), e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	fs.StringVar(&data, "data", "", "read the log in the data directory `DIR` of a stopped server (serve's default: "+defaultData+") instead of asking a running one")
	fs.StringVar(&q.Agent, "agent", "", "events of this agent")
	fs.StringVar(&q.Path, "path", "", "events concerning this path, anything under it or an ancestor of it")
	fs.StringVar(&typ, "type", "", "events of this type ("+typeNames()+")")
	fs.StringVar(&q.Txn, "txn", "", "events of this transaction")
	fs.StringVar(&intent, "intent", "", "events of the intent of this `ID` (a ULID): its intent event, decisions, change, grant, wait, escalation, the notices sent for it and the resolution of its case")
	fs.StringVar(&trace, "trace", "", "events caused by the intents of this trace `ID` (32 hex digits, or a whole traceparent)")
	fs.Uint64Var(&q.From, "from", 0, "start at this sequence number")
	fs.IntVar(&q.Limit, "limit", 100, "at most this many events (with --follow: how many one request asks for)")
	fs.BoolVarP(&follow, "follow", "f", false, "go on printing new events as they are logged, until interrupted")
	conn.register(fs, e.defaultNATS())
	conn.registerNode(fs)
	conn.alt = "or read a stopped server's log with --data DIR"
	out.register(fs, true)
	return c
}

// printEvents prints events, a line each.
func printEvents(events []*intents.Event, asJSON bool, stdout io.Writer) error {
	enc := json.NewEncoder(stdout)
	for _, ev := range events {
		if asJSON {
			if err := enc.Encode(ev); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintln(stdout, summary(ev)); err != nil {
			return err
		}
	}
	return nil
}

func runLog(data string, q eventlog.Query, asJSON bool, stdout, stderr io.Writer) error {
	log, err := openLog(data)
	if err != nil {
		return err
	}
	defer log.Close()
	p := newProgress(stderr, "log", 0).startAt(max(q.From, log.FirstSeq()))
	events, next, err := log.QueryProgress(q, p.fn())
	p.finish()
	if err != nil {
		return err
	}
	if err := printEvents(events, asJSON, stdout); err != nil {
		return err
	}
	if next != 0 {
		fmt.Fprintf(stderr, "more: --from %d\n", next)
	}
	return nil
}

// logPageMax is the most events one log.query answers.
const logPageMax = 1000

// logPage is one log.query: the events of q (q.Limit at most, fewer when
// some are not ours to see), the seq to go on from (0 at the end), and who
// answered (answeredBy).
func logPage(ctx context.Context, nc *nats.Conn, conn *natsFlags, q eventlog.Query) ([]*intents.Event, uint64, string, error) {
	req := map[string]any{"agent": q.Agent, "path": q.Path, "type": q.Type, "txn": q.Txn,
		"from": q.From, "limit": min(q.Limit, logPageMax)}
	if q.Trace != "" {
		req["trace"] = q.Trace // only when asked: a server from before traces knows no such field
	}
	if q.Intent != "" {
		req["intent"] = q.Intent // only when asked, too
	}
	body, _ := json.Marshal(req)
	reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	subject := conn.readSubject(intents.APILogQuery)
	resp, err := nc.RequestWithContext(reqCtx, subject, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, 0, "", fmt.Errorf("log.query: %w", conn.noResponders(subject))
	}
	if err != nil {
		return nil, 0, "", fmt.Errorf("log.query: %w", err)
	}
	if err := apiError(resp); err != nil {
		return nil, 0, "", fmt.Errorf("log.query: %w", err)
	}
	var page struct {
		Events []*intents.Event `json:"events"`
		Next   uint64           `json:"next"`
	}
	if err := json.Unmarshal(resp.Data, &page); err != nil {
		return nil, 0, "", fmt.Errorf("log.query: the coordinator answered %q: %w", resp.Data, err)
	}
	return page.Events, page.Next, answeredBy(resp.Header), nil
}

// queryLog prints up to q.Limit events of q from the running server, a
// page after another, and where to go on.
func queryLog(ctx context.Context, conn *natsFlags, q eventlog.Query, asJSON bool, stdout, stderr io.Writer) error {
	nc, err := conn.connect("coagent log")
	if err != nil {
		return err
	}
	defer nc.Close()
	for first, left := true, q.Limit; left > 0; first = false {
		q.Limit = left
		events, next, by, err := logPage(ctx, nc, conn, q)
		if err != nil {
			return err
		}
		if first {
			noteAnswered(conn, by, stderr)
		}
		if err := printEvents(events, asJSON, stdout); err != nil {
			return err
		}
		left -= len(events)
		if next == 0 {
			return nil
		}
		q.From = next
	}
	fmt.Fprintf(stderr, "more: --from %d\n", q.From)
	return nil
}

// logPoll is how often --follow asks for new events once it has seen the
// end of the log.
const logPoll = 250 * time.Millisecond

// followLog prints every event of q from q.From on, then each new one,
// until ctx ends. It asks log.query from the seq after the last event it
// printed: the log is appended in seq order, so nothing is missed and
// nothing printed twice. With --path it prints the decisions of the
// intents it saw touch the path too (pathFollow), which carry no paths
// themselves: following a path shows what became of each intent.
func followLog(ctx context.Context, conn *natsFlags, q eventlog.Query, asJSON bool, stdout io.Writer) error {
	nc, err := conn.connect("coagent log")
	if err != nil {
		return err
	}
	defer nc.Close()
	page := func(q eventlog.Query) ([]*intents.Event, uint64, bool, error) {
		events, next, _, err := logPage(ctx, nc, conn, q)
		switch {
		case err != nil:
			return nil, 0, false, err
		case next != 0:
			return events, next, true, nil
		case len(events) > 0:
			return events, events[len(events)-1].Seq + 1, false, nil
		}
		return nil, q.From, false, nil
	}
	if q.Path != "" && (q.Type == "" || q.Type == intents.EventDecision) {
		page = (&pathFollow{ctx: ctx, nc: nc, conn: conn, pending: map[string]bool{}}).page
	}
	for {
		events, from, more, err := page(q)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := printEvents(events, asJSON, stdout); err != nil {
			return err
		}
		q.From = from
		if more {
			continue
		}
		select {
		case <-time.After(logPoll):
		case <-ctx.Done():
			return nil
		}
	}
}

// pathFollow reads the pages of a follow of a path with the decisions of
// the intents that touch it.
type pathFollow struct {
	ctx  context.Context
	nc   *nats.Conn
	conn *natsFlags
	// pending are the intents seen touching the path whose final decision
	// has not been printed yet.
	pending map[string]bool
}

// page is logPage for q with the decisions of the pending intents merged
// in, in seq order; it returns them, the seq to go on from and whether
// more are logged already.
//
// The path's events and the decisions are two queries, made one after the
// other while the log grows, so each is complete only up to a point the
// answer does not say: a query that stops at its limit up to the seq before
// its next, one that reaches the end up to the log's end when it was made,
// which is past its last event and not before the end of any query made
// earlier. What page prints is up to a seq both are complete to, so that
// no decision is printed out of order or dropped for an intent not yet
// seen: the path's last event (the decisions were asked after), or, when
// decisions come after it, the last of those, once the path's events are
// asked again after them. The rest is asked again from there next time.
func (f *pathFollow) page(q eventlog.Query) ([]*intents.Event, uint64, bool, error) {
	q.From = max(q.From, 1) // seqs start at 1: q.From-1 is a seq or none
	pq, dq := q, q
	pq.Type = ""
	dq.Path, dq.Type = "", intents.EventDecision
	touching, tnext, _, err := logPage(f.ctx, f.nc, f.conn, pq)
	if err != nil {
		return nil, 0, false, err
	}
	decisions, dnext, _, err := logPage(f.ctx, f.nc, f.conn, dq)
	if err != nil {
		return nil, 0, false, err
	}
	more := tnext != 0 || dnext != 0
	// upTo is the seq both are complete to: a page cut at its limit is
	// complete to the seq before its next; one that reached the end, to
	// at least its last event (q.From-1 when it has none).
	upTo := func(next uint64, evs []*intents.Event) uint64 {
		if next != 0 {
			return next - 1
		}
		if len(evs) == 0 {
			return q.From - 1
		}
		return evs[len(evs)-1].Seq
	}
	x := upTo(tnext, touching)
	if dnext != 0 {
		x = min(x, dnext-1)
	}
	if n := len(decisions); tnext == 0 && n > 0 && decisions[n-1].Seq > x {
		// Decisions after the path's last event: ask the path's events
		// again, after the decisions were asked, up to the last of them.
		pq.From = x + 1
		later, lnext, _, err := logPage(f.ctx, f.nc, f.conn, pq)
		if err != nil {
			return nil, 0, false, err
		}
		touching = append(touching, later...)
		y := decisions[n-1].Seq
		if dnext != 0 {
			y = min(y, dnext-1)
		}
		if lnext != 0 {
			y = min(y, lnext-1)
			more = true
		}
		x = max(x, y)
	}
	var out []*intents.Event
	i, j := 0, 0
	for i < len(decisions) || j < len(touching) {
		var ev *intents.Event
		if j == len(touching) || i < len(decisions) && decisions[i].Seq < touching[j].Seq {
			ev, i = decisions[i], i+1
		} else {
			ev, j = touching[j], j+1
			if ev.Type == intents.EventDecision {
				continue // the same event comes among the decisions
			}
		}
		if ev.Seq > x {
			break
		}
		if ev.Type == intents.EventDecision {
			if !f.pending[ev.Intent] {
				continue
			}
			if ev.Decision != nil && ev.Decision.Outcome.Final() {
				delete(f.pending, ev.Intent)
			}
		} else if ev.Intent != "" {
			f.pending[ev.Intent] = true
		}
		if q.Type == "" || ev.Type == q.Type {
			out = append(out, ev)
		}
	}
	return out, max(x+1, q.From), more, nil
}

func typeNames() string {
	s := make([]string, len(intents.EventTypes))
	for i, t := range intents.EventTypes {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// summary is one line a person can read: seq, time, type, agent, and what
// the event says.
func summary(ev *intents.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6d %s %-8s %-12s", ev.Seq, ev.Time.Format(time.RFC3339Nano), ev.Type, ev.Agent)
	if ev.Intent != "" {
		fmt.Fprintf(&b, " intent=%s", ev.Intent)
	}
	if ev.Txn != "" {
		fmt.Fprintf(&b, " txn=%s", ev.Txn)
	}
	if ev.Trace != "" {
		fmt.Fprintf(&b, " trace=%s", ev.Trace)
	}
	if ev.Received != nil && ev.Received.TraceError != "" {
		fmt.Fprintf(&b, " (traceparent not used: %s)", ev.Received.TraceError)
	}
	switch {
	case ev.Decision != nil:
		d := ev.Decision
		fmt.Fprintf(&b, " %s", d.Outcome)
		if d.Reason != "" {
			fmt.Fprintf(&b, " %s", d.Reason)
		}
		if d.Duplicate {
			b.WriteString(" (duplicate)")
		}
		if d.Detail != "" {
			fmt.Fprintf(&b, ": %s", d.Detail)
		}
	case ev.Change != nil:
		for _, w := range ev.Change.Writes {
			fmt.Fprintf(&b, " %s %s", w.Op, w.Path)
			if len(w.Value) > 0 {
				fmt.Fprintf(&b, "=%s", w.Value)
			}
			fmt.Fprintf(&b, " (v%d→v%d)", w.OldVersion, w.NewVersion)
		}
	case ev.Received != nil && ev.Received.Intent != nil:
		in := ev.Received.Intent
		fmt.Fprintf(&b, " %s", in.Kind)
		if in.Action != "" {
			fmt.Fprintf(&b, " %s", in.Action)
		}
	case ev.Received != nil:
		fmt.Fprintf(&b, " invalid: %s", ev.Received.Error)
	case ev.Notice != nil:
		fmt.Fprintf(&b, " %s: %s", ev.Notice.Kind, ev.Notice.Detail)
	case ev.Release != nil:
		fmt.Fprintf(&b, " %s", ev.Release.Cause)
	case ev.Wait != nil:
		fmt.Fprintf(&b, " until %s", ev.Wait.Deadline.Format(time.RFC3339Nano))
		if g := ev.Wait.Gate; g != nil {
			fmt.Fprintf(&b, ": held for %d of %s (rules[%d])", g.Quorum, strings.Join(g.By, ", "), g.Rule)
		}
		if p := ev.Wait.Panel; p != nil {
			fmt.Fprintf(&b, ": a panel, %d must agree", p.Quorum)
		}
	case ev.Shadow != nil:
		sh := ev.Shadow
		fmt.Fprintf(&b, " %s (%s): decided %s, would be %s", sh.Kind, sh.Mode, sh.Decided, sh.WouldBeKey())
		if sh.Rule != "" {
			fmt.Fprintf(&b, " by %s", sh.Rule)
		}
		if sh.Detail != "" {
			fmt.Fprintf(&b, ": %s", sh.Detail)
		}
	case ev.Vote != nil:
		v := ev.Vote
		fmt.Fprintf(&b, " %s by %s", v.Verdict, v.Agent)
		if len(v.Answer) > 0 {
			fmt.Fprintf(&b, " %s", intents.Clip(string(v.Answer), 80))
		}
		if v.Rationale != "" {
			fmt.Fprintf(&b, ": %s", v.Rationale)
		}
	case ev.Resolution != nil:
		r := ev.Resolution
		fmt.Fprintf(&b, " by %s: winners %s losers %s: %s", r.Arbiter, strings.Join(r.Winners, ","), strings.Join(r.Losers, ","), r.Rationale)
	case ev.Grant != nil:
		fmt.Fprintf(&b, " fence=%d expires %s", ev.Grant.Fence, ev.Grant.Expires.Format(time.RFC3339Nano))
	}
	return b.String()
}
