package intents

import "strings"

// DefaultPrefix is the subject prefix of SPEC §6.
const DefaultPrefix = "coagent"

// HeaderIntent names the intent a decision message answers.
const HeaderIntent = "Coagent-Intent"

// HeaderClaimNext, on an API submit request, names a lane: a path whose
// members are tasks under a task rule with a lease. The coordinator picks
// the lane's next claimable task and decides the intent as a claim of it:
// the owner set to the agent, and the intent's writes taken as relative to
// the task. The reply's header HeaderTask names the task; a lane with
// nothing claimable is answered with the error CodeNothingClaimable and
// nothing is decided.
const (
	HeaderClaimNext = "Coagent-Claim-Next"
	HeaderTask      = "Coagent-Task"
)

// HeaderWait, on an API submit request, says how many milliseconds the
// caller will wait for a final decision; past it the interim one is sent.
const HeaderWait = "Coagent-Wait-Ms"

// Subjects names every subject and stream of the wire contract under one
// prefix. The zero value uses DefaultPrefix. These are the only spellings
// of the wire names; everything else calls them.
type Subjects struct{ Prefix string }

func (s Subjects) p() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// Intents is where agent publishes its intents: <prefix>.intents.<agent>.
func (s Subjects) Intents(agent string) string { return s.p() + ".intents." + agent }

// AllIntents matches every agent's intents.
func (s Subjects) AllIntents() string { return s.p() + ".intents.>" }

// IntentAgent returns the agent token of an intents subject, and whether
// the subject has exactly one token after <prefix>.intents.
func (s Subjects) IntentAgent(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.p()+".intents.")
	if !ok || rest == "" || strings.Contains(rest, ".") {
		return rest, false
	}
	return rest, true
}

// InboxPrefix is the inbox prefix of agent's connection when the server
// enforces identities (coagent serve --auth): replies to its requests come
// under it, and only it may subscribe there.
func InboxPrefix(agent string) string { return "_INBOX_" + agent }

// InboxAgent returns the agent whose inbox prefix (InboxPrefix) reply is
// under, and whether it is under one.
func InboxAgent(reply string) (string, bool) {
	rest, ok := strings.CutPrefix(reply, "_INBOX_")
	if !ok {
		return "", false
	}
	agent, _, ok := strings.Cut(rest, ".")
	if !ok || !ValidSegment(agent) {
		return "", false
	}
	return agent, true
}

// Decisions is where agent's decisions are published.
func (s Subjects) Decisions(agent string) string { return s.p() + ".decisions." + agent }

// AllDecisions matches every agent's decisions.
func (s Subjects) AllDecisions() string { return s.p() + ".decisions.>" }

// Notices is where agent is told that someone waits on it or that its lease
// is running out (core NATS, not a stream).
func (s Subjects) Notices(agent string) string { return s.p() + ".notices." + agent }

// Events is the public feed subject of an event type.
func (s Subjects) Events(t EventType) string { return s.p() + ".events." + string(t) }

// EventsChange is the change feed's subject of a board: its messages
// carry the changes of a commit group that wrote to the board (FeedMessage),
// so that <prefix>.events.change.report follows the board report and a
// watcher of a subtree keeps the changes that overlap it.
func (s Subjects) EventsChange(board string) string { return s.p() + ".events.change." + board }

// ChangeSubjects are the feed subjects that carry the changes that
// overlap subtree ("" for the whole state): its board's, and, under it,
// the per-path subjects on which wire v2 put one message per path written
// (a feed stored before an upgrade may still hold some).
func (s Subjects) ChangeSubjects(subtree string) []string {
	if subtree == "" {
		return []string{s.EventsChange(">")}
	}
	board := Board(subtree)
	return []string{s.EventsChange(board), s.EventsChange(board + ".>")}
}

// AllEvents matches the whole feed.
func (s Subjects) AllEvents() string { return s.p() + ".events.>" }

// Escalations is the work queue of arbiter cases.
func (s Subjects) Escalations() string { return s.p() + ".arbiter.escalations" }

// DeadLetters is where cases no arbiter resolved in time are kept.
func (s Subjects) DeadLetters() string { return s.p() + ".arbiter.dlq" }

// The endpoints of the API (SPEC §6), each at <prefix>.api.<endpoint>.
// These are their only spellings; Subjects.API makes the subject.
const (
	APISubmit         = "submit"          // an intent by request/reply; the reply is its decision
	APIStateGet       = "state.get"       // values and versions of paths
	APITxnList        = "txn.list"        // open transactions
	APILogQuery       = "log.query"       // a page of the event log
	APIDecisionGet    = "decision.get"    // the recorded decision of an intent
	APIArbiterResolve = "arbiter.resolve" // an arbiter's resolution of a case
	APICaseVote       = "case.vote"       // an approver's verdict on an approval case
	APIConflictsTop   = "conflicts.top"   // where conflicts happen most
	APIFeedFollow     = "feed.follow"     // a pull consumer on the changes of a subtree
	APIRulesGet       = "rules.get"       // the board rules in force
	APIRulesSet       = "rules.set"       // new board rules (under auth, role admin only)
)

// API is the subject of an API endpoint, one of the API… constants.
func (s Subjects) API(endpoint string) string { return s.p() + ".api." + endpoint }

// Submit is the API's submit endpoint for agent: <prefix>.api.submit.<agent>,
// the subject an authenticated agent may submit on, or the anonymous
// <prefix>.api.submit for "".
func (s Subjects) Submit(agent string) string {
	if agent == "" {
		return s.API(APISubmit)
	}
	return s.API(APISubmit + "." + agent)
}

// SubmitAgent returns the agent a submit subject names ("" for the
// anonymous one), and whether subject is a submit subject at all.
func (s Subjects) SubmitAgent(subject string) (string, bool) {
	if subject == s.API(APISubmit) {
		return "", true
	}
	rest, ok := strings.CutPrefix(subject, s.API(APISubmit+"."))
	if !ok || rest == "" || strings.Contains(rest, ".") {
		return "", false
	}
	return rest, true
}

// ArbitersConsumer is the durable consumer on the arbiter stream that the
// coordinator creates and every arbiter pulls from.
const ArbitersConsumer = "arbiters"

// CoordinatorConsumer is the coordinator's durable consumer on the intents
// stream. It must exist whenever the stream does: an interest stream drops
// at once a message no consumer is interested in.
const CoordinatorConsumer = "coordinator"

// Log is the subject of the replicated log of record (SPEC §10): one
// message for each durable group, appended by the active coordinator.
func (s Subjects) Log() string { return s.p() + ".log" }

// LeaderBucket is the name of the key-value bucket whose key LeaderKey
// names the active coordinator of a cluster (SPEC §10): COAGENT_LEADER
// under the default prefix.
func (s Subjects) LeaderBucket() string { return s.Stream("LEADER") }

// LeaderKey is the key of LeaderBucket the active coordinator holds.
const LeaderKey = "active"

// Status is where every coordinator of a cluster, active or standby,
// answers with its MemberStatus: a request gathers one reply from each.
func (s Subjects) Status() string { return s.p() + ".cluster.status" }

// ClusterSnapshot is where the active coordinator of a cluster, and it
// alone, answers a request to store a snapshot of the replicated log now
// and trim the log below it, with a SnapshotReply (`coagent snapshot`).
// A standby does not subscribe, so with no active coordinator the
// request has no responders.
func (s Subjects) ClusterSnapshot() string { return s.p() + ".cluster.snapshot" }

// NodeAPI is the subject of an API endpoint of one coordinator of a
// cluster, named node, active or standby: <prefix>.cluster.<node>.api.<endpoint>.
// Each member answers the read-only endpoints (APIStateGet, APILogQuery,
// APITxnList) there from its own log and engine, at the revision it is
// at; the API's shared subjects (API) are the active coordinator's alone,
// so that a read after a write sees the write.
func (s Subjects) NodeAPI(node, endpoint string) string {
	return s.p() + ".cluster." + node + ".api." + endpoint
}

// The headers of a read's answer from a coordinator of a cluster (on its
// own subjects, NodeAPI, and on the API's, which only the active one
// answers): who answered, in which role, and the revision it was read at,
// the last event of its log then (the events of coagent status), so that
// a reader knows how current it is.
const (
	HeaderNode = "Coagent-Node"
	HeaderRole = "Coagent-Role" // RoleActive or RoleStandby
	HeaderRev  = "Coagent-Rev"
)

// The error codes of the API's answers besides the rejection reasons
// (Reason), in the micro service's error header: the coordinator cannot
// answer now (ask again, of the active one), or failed to.
const (
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
	// CodeNothingClaimable answers a claim of a lane's next task when no
	// task of the lane is claimable (HeaderClaimNext).
	CodeNothingClaimable = "nothing_claimable"
)

// APIGroup is the subject prefix of the micro service's endpoints.
func (s Subjects) APIGroup() string { return s.p() + ".api" }

// Stream returns the name of one of the streams (INTENTS, DECISIONS,
// EVENTS, ARBITER, DLQ): COAGENT_INTENTS under the default prefix.
func (s Subjects) Stream(kind string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(s.p())) + "_" + kind
}

// The stream kinds of SPEC §6.
const (
	StreamIntents   = "INTENTS"
	StreamDecisions = "DECISIONS"
	StreamEvents    = "EVENTS"
	StreamArbiter   = "ARBITER"
	// StreamLog is the replicated log of record of a cluster (SPEC §10).
	StreamLog = "LOG"
	StreamDLQ = "DLQ"
)
