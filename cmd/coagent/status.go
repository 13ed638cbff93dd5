package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// newStatusCmd is `coagent status`: the coordinators of a cluster, which
// one is active, how far behind each standby is, and the NATS nodes that
// hold the replicated log (SPEC §10).
func newStatusCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	var wait time.Duration
	c := &cobra.Command{
		Use:   "status [--wait DURATION]",
		Short: "print the cluster (its coordinators, the active one, each standby's lag, the nodes of the log), or the coordinator alone",
		Long: "Ask every coordinator of a cluster for its status (one request on PREFIX.cluster.status, which each\n" +
			"coordinator answers, active or standby), gather the answers for --wait, and read the replicated log's\n" +
			"stream, COAGENT_LOG, for the NATS nodes that hold it. The table has a row a coordinator, by node name:\n" +
			"\n" +
			"  NODE  ROLE     EVENTS  LOG  LAG            SINCE\n" +
			"  n1    active   1204    402  -              2m3s\n" +
			"  n2    standby  1204    402  0 groups       5m1s\n" +
			"  n3    standby  1180    394  8 groups 0.4s  1.5s\n" +
			"  log COAGENT_LOG: last group 402, leader n2, replicas n1 (current), n3 (current)\n" +
			"\n" +
			"EVENTS is the last event of the coordinator's own log, LOG the last group of COAGENT_LOG it holds,\n" +
			"LAG how many groups it is behind the log's last and how much older the last one it folded is, SINCE\n" +
			"how long it has had its role. Once a snapshot of the log is stored (serve --snapshot-every, coagent\n" +
			"snapshot), a column SNAPSHOT says which each coordinator stored (the active one) or loaded (one that\n" +
			"joined from it): its event, the log message that holds it, how long ago it was stored; and the log's\n" +
			"line says its first group, the ones before it trimmed. -o json prints one object:\n" +
			"\n" +
			"  {\"members\": [{node, role, leader, seq, log_seq, log_first, log_last, snapshot: {seq, log_seq, stored},\n" +
			"                lag_groups, lag_seconds, since}, …],\n" +
			"   \"active\": [NODE, …],\n" +
			"   \"log\": {stream, messages, first_seq, last_seq, last_time, want_replicas, cluster, leader,\n" +
			"           replicas: [{node, current, offline, seen_seconds, lag}, …]},\n" +
			"   \"log_error\": \"…\"}\n" +
			"\n" +
			"members are what each coordinator said of itself, by node; active the nodes that said they are active\n" +
			"(none while a failover is under way; two, for an instant, while one is deposed); log is null when the\n" +
			"stream does not exist, or could not be read (log_error then says why); its replicas are the nodes\n" +
			"other than the leader, lag in Raft entries.\n" +
			"A coordinator that runs alone (no --cluster) is shown as one row, role alone, with no name, log or lag:\n" +
			"\n" +
			"  NODE  ROLE   EVENTS  LOG  LAG  SINCE\n" +
			"  -     alone  1204    -    -    2m3s\n" +
			"\n" +
			"No coordinator answering is an error (exit 1); none active is said on stderr, and the status is 0.\n" +
			"In a deployment of several shards (docs/sharding.md), each shard's table follows a line naming it and its\n" +
			"boards, the default shard's first; with -o json, a line each, with \"shard\" and \"boards\" besides;\n" +
			"--shard NAME prints that shard's alone.",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if wait <= 0 {
				return usagef(c, "--wait %s: want a duration above 0, such as 1s", wait)
			}
			return runStatus(c.Context(), &conn, out.json(), wait, e.stdout, e.stderr)
		},
	}
	c.Flags().DurationVar(&wait, "wait", time.Second, "how long to gather the coordinators' answers (every one answers; there is no knowing when the last has)")
	conn.register(c.Flags(), e.defaultNATS())
	out.register(c.Flags(), true)
	return c
}

// errNoMembers is runStatus's error when no coordinator of a cluster
// answered.
var errNoMembers = errors.New("no coordinator of a cluster answered")

// runStatus gathers the members' answers for wait while it reads the
// log's stream, then prints both.
func runStatus(ctx context.Context, conn *natsFlags, asJSON bool, wait time.Duration, stdout, stderr io.Writer) error {
	nc, err := conn.connect("coagent status")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancelPerms := conn.guard(ctx)
	defer cancelPerms()
	subj := conn.subjects()
	stream := subj.Stream(intents.StreamLog)
	g, err := coordinator.GatherStatus(ctx, nc, coordinator.StatusOptions{Prefix: subj.Prefix, Wait: wait,
		Stats: conn.nkey == "" && conn.creds == ""})
	if err != nil {
		return conn.refused(ctx, err)
	}
	for _, s := range g.Strays {
		fmt.Fprintf(stderr, "coagent: an answer on %s that is not a coordinator's status, left out: %.200q: %v\n", subj.Status(), s.Data, s.Err)
	}
	if g.LogErr != nil && !errors.Is(g.LogErr, jetstream.ErrStreamNotFound) {
		// The members' answers are worth printing while the log's
		// stream cannot be read (it elects a leader, say); a refused
		// permission is the whole story.
		var ce *connectError
		if err := conn.refused(ctx, g.LogErr); errors.As(err, &ce) || len(g.Members) == 0 {
			return fmt.Errorf("status: stream %s: %w", stream, err)
		}
	}
	if len(g.Members) == 0 {
		return noMembersError(nc, conn, subj.Status(), stream, wait, g.NoResponders, g.Log)
	}
	st := g.ClusterStatus
	shards := shardsOf(ctx, nc, conn)
	if asJSON {
		var b []byte
		if len(shards) > 0 {
			// A sharded deployment: a line per shard, each naming it.
			b, err = json.Marshal(struct {
				Shard  string   `json:"shard"`
				Boards []string `json:"boards,omitempty"`
				coordinator.ClusterStatus
			}{shardName(conn.shard), shards[shardName(conn.shard)], st})
		} else {
			b, err = json.Marshal(st)
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	} else {
		if len(shards) > 0 {
			fmt.Fprintf(stdout, "shard %s: %s\n", shardName(conn.shard), boardsLine(shards[shardName(conn.shard)]))
		}
		if err := printStatus(stdout, st, stream, time.Now()); err != nil {
			return err
		}
	}
	statusNotes(stderr, st, stream)
	if conn.shard != "" || len(shards) == 0 {
		return nil
	}
	// Then each other shard, as the default shard's log names them.
	for _, name := range slices.Sorted(maps.Keys(shards)) {
		if name == intents.DefaultShard {
			continue
		}
		if !asJSON {
			fmt.Fprintln(stdout)
		}
		other := *conn
		other.shard = name
		if err := runStatus(ctx, &other, asJSON, wait, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "coagent: shard %s: %v\n", name, err)
		}
	}
	return nil
}

// shardsOf is, in a sharded deployment, every shard and the boards it
// owns, as the default shard's log says where its boards went (the
// default shard's own entry is nil: every other board); none for a
// deployment of one shard, or a coordinator from before shards.
func shardsOf(ctx context.Context, nc *nats.Conn, conn *natsFlags) map[string][]string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, conn.base().API(intents.APIShardInfo), nil)
	if err != nil || apiError(m) != nil {
		return nil
	}
	var info intents.ShardInfo
	if json.Unmarshal(m.Data, &info) != nil || len(info.Owners) == 0 {
		return nil
	}
	// The map, where it can be read, knows of a board moved twice; the
	// default shard's log, of its first move.
	owners := info.Owners
	if kv, err := shardMap(ctx, nc, conn.base(), false, 0); err == nil {
		if boards, err := boardsOf(ctx, kv); err == nil {
			owners = boards
		}
	}
	out := map[string][]string{intents.DefaultShard: nil}
	for _, b := range slices.Sorted(maps.Keys(owners)) {
		if sh := owners[b]; sh != intents.DefaultShard {
			out[sh] = append(out[sh], b)
		}
	}
	return out
}

func shardName(s string) string { return cmp.Or(s, intents.DefaultShard) }

func boardsLine(boards []string) string {
	if boards == nil {
		return "every board no other shard took"
	}
	return "boards " + strings.Join(boards, ", ")
}

// noMembersError says that no member answered, and what that likely
// means: no coordinator in cluster mode here (there is no log, or a
// coordinator runs alone), or all of the cluster's are stopped.
func noMembersError(nc *nats.Conn, conn *natsFlags, subject, stream string, wait time.Duration, noResponders bool, log *coordinator.LogStatus) error {
	what := fmt.Sprintf("within %s", wait)
	if noResponders {
		what = "(nothing subscribes to it)"
	}
	start := "start coordinators in cluster mode: coagent serve --cluster HOST:PORT --routes URL,… --name NAME on each node, or a coordinator given a node name"
	var hint string
	switch {
	case log != nil:
		hint = fmt.Sprintf("the log %s is there (last group %d) but none of its coordinators answers: they may all be stopped; %s", stream, log.LastSeq, start)
	case coordinator.AloneAnswers(nc, conn.subjects()):
		hint = fmt.Sprintf("a coordinator answers its API on %s, but it runs alone, not in cluster mode (there is no stream %s): status is of a cluster; %s", nc.ConnectedUrlRedacted(), stream, start)
	default:
		hint = fmt.Sprintf("no coordinator runs in cluster mode on %s (there is no stream %s); %s", nc.ConnectedUrlRedacted(), stream, start)
	}
	return fmt.Errorf("%w on %s %s\n  %s", errNoMembers, subject, what, hint)
}

// printStatus prints the table of members, then a line for the log.
func printStatus(w io.Writer, st coordinator.ClusterStatus, stream string, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// The snapshots' column only once a member has one: until the first
	// is stored it would be a column of dashes.
	snaps := slices.ContainsFunc(st.Members, func(m intents.MemberStatus) bool { return m.Snapshot != nil })
	header := "NODE\tROLE\tEVENTS\tLOG\tLAG\tSINCE"
	if snaps {
		header += "\tSNAPSHOT"
	}
	fmt.Fprintln(tw, header)
	for _, m := range st.Members {
		lag := "-"
		if m.Role != intents.RoleActive {
			lag = fmt.Sprintf("%d groups", m.LagGroups)
			if m.LagSeconds > 0 {
				lag += fmt.Sprintf(" %.1fs", m.LagSeconds)
			}
		}
		node, logSeq := m.Node, fmt.Sprint(m.LogSeq)
		switch m.Role {
		case intents.RoleActive:
		case coordinator.RoleAlone:
			// No name, no replicated log, nothing to lag behind.
			node, logSeq, lag = "-", "-", "-"
		}
		row := fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", node, m.Role, m.Seq, logSeq, lag, since(m.Since, now))
		switch {
		case !snaps:
		case m.Snapshot == nil:
			row += "\t-"
		default:
			row += fmt.Sprintf("\tevent %d (log %d) %s ago", m.Snapshot.Seq, m.Snapshot.LogSeq, since(m.Snapshot.Stored, now))
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Members) == 1 && st.Members[0].Role == coordinator.RoleAlone {
		return nil // no replicated log to speak of
	}
	_, err := fmt.Fprintln(w, logLine(st, stream))
	return err
}

// since is how long ago t was, for reading: tenths of a second under a
// minute, seconds above; "-" for no time.
func since(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := max(0, now.Sub(t)) // a member's clock may be ahead of ours
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// logLine is the line of the table about the log's stream.
func logLine(st coordinator.ClusterStatus, stream string) string {
	l := st.Log
	switch {
	case st.LogError != "":
		return fmt.Sprintf("log %s: not read: %s", stream, st.LogError)
	case l == nil:
		return fmt.Sprintf("log %s: no such stream", stream)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "log %s: last group %d", l.Stream, l.LastSeq)
	if l.FirstSeq > 1 {
		fmt.Fprintf(&b, ", first %d (trimmed below it)", l.FirstSeq)
	}
	if l.Cluster == "" && len(l.Replicas) == 0 {
		// A server alone leads its streams under its id, which says
		// nothing to whoever reads this.
		b.WriteString(", on a server alone, not replicated")
		return b.String()
	}
	if l.Leader == "" {
		b.WriteString(", no leader (an election may be under way)")
	} else {
		fmt.Fprintf(&b, ", leader %s", l.Leader)
	}
	if len(l.Replicas) == 0 {
		b.WriteString(", no replicas")
	} else {
		var rs []string
		for _, r := range l.Replicas {
			switch {
			case r.Offline:
				rs = append(rs, r.Node+" (offline)")
			case r.Current:
				rs = append(rs, r.Node+" (current)")
			default:
				rs = append(rs, fmt.Sprintf("%s (behind by %d entries, seen %.1fs ago)", r.Node, r.Lag, r.SeenSeconds))
			}
		}
		b.WriteString(", replicas " + strings.Join(rs, ", "))
	}
	if have := len(l.Replicas) + 1; l.Leader != "" && l.WantReplicas > have {
		fmt.Fprintf(&b, " (%d of %d replicas placed)", have, l.WantReplicas)
	}
	return b.String()
}

// statusNotes says on stderr what the table leaves to the eye: no active
// coordinator, two of them, two coordinators of one name, no log.
func statusNotes(w io.Writer, st coordinator.ClusterStatus, stream string) {
	if len(st.Members) == 1 && st.Members[0].Role == coordinator.RoleAlone {
		fmt.Fprintln(w, "a coordinator alone, not in cluster mode: no standby, no replicated log")
		return
	}
	switch len(st.Active) {
	case 0:
		note := "no active coordinator (a failover may be under way)"
		if leaders := leadersSeen(st.Members); len(leaders) > 0 {
			note += "; the leadership key names " + strings.Join(leaders, ", ")
		}
		fmt.Fprintln(w, note)
	case 1:
	default:
		fmt.Fprintf(w, "%d coordinators say they are active (%s): one is being deposed, which lasts an instant; ask again\n",
			len(st.Active), strings.Join(st.Active, ", "))
	}
	for i := 1; i < len(st.Members); i++ {
		if st.Members[i].Node == st.Members[i-1].Node && (i == 1 || st.Members[i-2].Node != st.Members[i].Node) {
			fmt.Fprintf(w, "more than one coordinator answers as node %s: give each its own name\n", st.Members[i].Node)
		}
	}
	if st.Log == nil && st.LogError == "" {
		fmt.Fprintf(w, "there is no stream %s: the coordinators that answered do not log to it\n", stream)
	}
}

// leadersSeen are the holders of the leadership key the members saw,
// each once.
func leadersSeen(members []intents.MemberStatus) []string {
	var out []string
	for _, m := range members {
		if m.Leader != "" && !slices.Contains(out, m.Leader) {
			out = append(out, m.Leader)
		}
	}
	slices.Sort(out)
	return out
}
