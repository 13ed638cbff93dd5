package coordinator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// This file is the asking side of the members' status (answerStatus):
// what `coagent status` gathers of a cluster from any connection.

// RoleAlone is the role GatherStatus gives a coordinator that runs alone,
// not in cluster mode: it decides, as an active one does, and no other
// takes over from it. No coordinator says it of itself.
const RoleAlone = "alone"

// ClusterStatus is a cluster's coordinators and its replicated log, as
// GatherStatus finds them; `coagent status -o json` prints it.
type ClusterStatus struct {
	// Members are the coordinators' answers, by node name.
	Members []intents.MemberStatus `json:"members"`
	// Active names the members that said they are active.
	Active []string `json:"active"`
	// Log is the replicated log's stream, nil if it does not exist or
	// could not be read (LogError says why).
	Log      *LogStatus `json:"log"`
	LogError string     `json:"log_error,omitempty"`
}

// LogStatus is JetStream's view of COAGENT_LOG: its extent and the nodes
// that hold it.
type LogStatus struct {
	Stream   string    `json:"stream"`
	Messages uint64    `json:"messages"`
	FirstSeq uint64    `json:"first_seq"`
	LastSeq  uint64    `json:"last_seq"`
	LastTime time.Time `json:"last_time"`
	// WantReplicas is the stream's configured replicas.
	WantReplicas int `json:"want_replicas"`
	// Cluster is the NATS cluster's name, "" for a server alone.
	Cluster string `json:"cluster,omitempty"`
	// Leader is the node that leads the stream's Raft group (a server
	// alone is its own leader); "" while it elects one.
	Leader string `json:"leader"`
	// Replicas are the other nodes of the group.
	Replicas []LogReplica `json:"replicas"`
}

// LogReplica is one node holding the log beside its leader.
type LogReplica struct {
	Node    string `json:"node"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline,omitempty"`
	// SeenSeconds is how long ago the leader last heard from it.
	SeenSeconds float64 `json:"seen_seconds"`
	// Lag is how many Raft entries it is behind the leader.
	Lag uint64 `json:"lag,omitempty"`
}

// StatusOptions says how GatherStatus asks. The zero value asks the
// coordinators under the default prefix for a second.
type StatusOptions struct {
	// Prefix is the coordinators' subject prefix. The default is
	// "coagent".
	Prefix string
	// Wait is how long the members' answers are gathered: every one
	// answers, and there is no knowing when the last has. The default is
	// 1s.
	Wait time.Duration
	// Stats lets GatherStatus ask the micro services' stats
	// ($SRV.STATS.coagent) when a coordinator alone started, which an
	// agent's permissions under --auth do not allow. The default is not
	// to ask.
	Stats bool
}

// Gathered is what GatherStatus found: the status, and what the status
// leaves out.
type Gathered struct {
	ClusterStatus
	// LogErr is why the log's stream could not be read (LogError says
	// the same), or jetstream.ErrStreamNotFound when there is none (and
	// LogError is "").
	LogErr error
	// NoResponders says the server told at once that nothing subscribes
	// to the status subject: no answer could come.
	NoResponders bool
	// Strays are the answers on the status subject that are not a
	// coordinator's status, left out of Members.
	Strays []Stray
}

// Stray is an answer that is not a coordinator's status, and why.
type Stray struct {
	Data []byte
	Err  error
}

// GatherStatus asks every coordinator of a cluster for its status (one
// request on the status subject, which each answers, active or
// standby), gathers the answers for opts.Wait while it reads the
// replicated log's stream, and returns both. When none answers and there
// is no stream, a coordinator that runs alone is asked instead
// (AloneStatus) and is the one member, as etcdctl's endpoint status shows
// any member. No member at all is not an error here: the caller says what
// it means. The error is that of the request on the status subject.
func GatherStatus(ctx context.Context, nc *nats.Conn, opts StatusOptions) (*Gathered, error) {
	if opts.Wait <= 0 {
		opts.Wait = time.Second
	}
	subj := intents.Subjects{Prefix: opts.Prefix}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	type logAnswer struct {
		log *LogStatus
		err error
	}
	logs := make(chan logAnswer, 1)
	go func() {
		l, err := ReadLogStatus(ctx, js, subj.Stream(intents.StreamLog))
		logs <- logAnswer{l, err}
	}()
	g, err := AskStatus(ctx, nc, subj.Status(), opts.Wait)
	la := <-logs
	if err != nil {
		return nil, err
	}
	g.Active, g.Log, g.LogErr = []string{}, la.log, la.err
	if la.err != nil && !errors.Is(la.err, jetstream.ErrStreamNotFound) {
		g.LogError = la.err.Error()
	}
	if len(g.Members) == 0 && errors.Is(la.err, jetstream.ErrStreamNotFound) {
		if m, ok := AloneStatus(ctx, nc, subj, opts.Stats); ok {
			g.Members = []intents.MemberStatus{m}
		}
	}
	for _, m := range g.Members {
		if m.Role == intents.RoleActive {
			g.Active = append(g.Active, m.Node)
		}
	}
	return g, nil
}

// AskStatus publishes one request on subject, the status subject, and
// collects every answer that comes within wait, sorted by node: what
// GatherStatus shows, and how the active member learns the others'
// positions. Every member answers a plain
// subscription, so there is no telling when the last has: it waits the
// whole time, unless the server says at once that nobody listens.
func AskStatus(ctx context.Context, nc *nats.Conn, subject string, wait time.Duration) (*Gathered, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("status: subscribe %s: %w", inbox, err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("status: request %s: %w", subject, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	g := &Gathered{}
	for {
		m, err := sub.NextMsgWithContext(waitCtx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("status: request %s: %w", subject, ctx.Err())
			}
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			if errors.Is(err, nats.ErrNoResponders) {
				// The server's word that nothing subscribes to the
				// subject, sent only when it delivered the request to
				// nobody: no answer can come.
				g.NoResponders = true
				break
			}
			return nil, fmt.Errorf("status: request %s: %w", subject, err)
		}
		var ms intents.MemberStatus
		if err := json.Unmarshal(m.Data, &ms); err != nil || ms.Node == "" {
			if err == nil {
				err = errors.New("no node")
			}
			g.Strays = append(g.Strays, Stray{Data: m.Data, Err: err})
			continue
		}
		g.Members = append(g.Members, ms)
	}
	slices.SortStableFunc(g.Members, func(a, b intents.MemberStatus) int { return cmp.Compare(a.Node, b.Node) })
	return g, nil
}

// ReadLogStatus reads the info of the log's stream: its state and its
// cluster. The error is JetStream's (jetstream.ErrStreamNotFound when
// there is no such stream).
func ReadLogStatus(ctx context.Context, js jetstream.JetStream, stream string) (*LogStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info := s.CachedInfo()
	l := &LogStatus{Stream: stream, Messages: info.State.Msgs, FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq,
		LastTime: info.State.LastTime, WantReplicas: info.Config.Replicas, Replicas: []LogReplica{}}
	if ci := info.Cluster; ci != nil {
		l.Cluster, l.Leader = ci.Name, ci.Leader
		for _, p := range ci.Replicas {
			l.Replicas = append(l.Replicas, LogReplica{Node: p.Name, Current: p.Current, Offline: p.Offline,
				SeenSeconds: p.Active.Seconds(), Lag: p.Lag})
		}
		slices.SortFunc(l.Replicas, func(a, b LogReplica) int { return cmp.Compare(a.Node, b.Node) })
	}
	return l, nil
}

// AloneStatus is the status of a coordinator that runs alone under subj's
// prefix, as far as its API tells: its last event (log.query, from the
// last commit to the end of its log) and, with stats, since when it has
// served. ok is false when none answers.
func AloneStatus(ctx context.Context, nc *nats.Conn, subj intents.Subjects, stats bool) (m intents.MemberStatus, ok bool) {
	m = intents.MemberStatus{Node: "", Role: RoleAlone}
	subject := subj.API(intents.APILogQuery)
	from := uint64(0)
	if resp, err := nc.Request(subj.API(intents.APIStateGet), []byte(`{"paths":[]}`), time.Second); err != nil || isErrorReply(resp) {
		return m, false
	} else {
		var st struct {
			Rev uint64 `json:"rev"`
		}
		if json.Unmarshal(resp.Data, &st) == nil {
			from = st.Rev // only what was logged since the last commit is read
		}
	}
	for {
		body, _ := json.Marshal(map[string]any{"from": from, "limit": 1000})
		reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := nc.RequestWithContext(reqCtx, subject, body)
		cancel()
		if err != nil || isErrorReply(resp) {
			break
		}
		var page struct {
			Events []struct {
				Seq uint64 `json:"seq"`
			} `json:"events"`
			Next uint64 `json:"next"`
		}
		if json.Unmarshal(resp.Data, &page) != nil {
			break
		}
		for _, ev := range page.Events {
			m.Seq = max(m.Seq, ev.Seq)
		}
		if page.Next == 0 || page.Next <= from {
			break
		}
		from = page.Next
	}
	if stats {
		m.Since = aloneStarted(nc, subj.API(intents.APIStateGet))
	}
	return m, true
}

// isErrorReply reports whether resp is a micro error reply.
func isErrorReply(resp *nats.Msg) bool { return resp.Header.Get(micro.ErrorCodeHeader) != "" }

// aloneStarted is when the coagent micro service whose state.get is on
// stateGet started, from its stats; zero when none says.
func aloneStarted(nc *nats.Conn, stateGet string) time.Time {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return time.Time{}
	}
	defer sub.Unsubscribe()
	// Every coagent service on the server answers, whatever its prefix.
	if nc.PublishRequest("$SRV.STATS.coagent", inbox, nil) != nil {
		return time.Time{}
	}
	deadline := time.Now().Add(time.Second)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return time.Time{}
		}
		var stats micro.Stats
		if json.Unmarshal(msg.Data, &stats) != nil {
			continue
		}
		for _, ep := range stats.Endpoints {
			if ep != nil && ep.Subject == stateGet {
				return stats.Started
			}
		}
	}
}

// AloneAnswers reports whether a coordinator answers its API under subj's
// prefix: one that runs alone answers state.get but not the status.
func AloneAnswers(nc *nats.Conn, subj intents.Subjects) bool {
	_, err := nc.Request(subj.API(intents.APIStateGet), []byte(`{"paths":[]}`), time.Second)
	return err == nil
}
