package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/oklog/ulid/v2"
)

// The consumers agents read JetStream through are made by the coordinator,
// not by the agents: the server's permissions can scope a consumer's
// filter subject (in the create request's subject) but not the rest of its
// configuration, so an agent allowed to create consumers could create a
// push consumer that delivers into another agent's subjects, or one on
// another stream or filter. An agent may only pull from, and look up, a
// consumer it was given.

// followInactive is how long a change feed consumer nobody pulls from
// lives; the server then deletes it.
const followInactive = 30 * time.Second

// maxFollows bounds the feed consumers one connection may have made
// within followInactive, and maxAgentFollows those of one agent over all
// its connections (without --auth everyone is the one agent "anyone"), so
// that a client cannot fill the server with them, and a client that leaks
// them spends its own quota, not its neighbours'.
const (
	maxFollows      = 64
	maxAgentFollows = 1024
)

// followMark is one feed consumer made: when, and for which connection
// (requesterOf).
type followMark struct {
	at   time.Time
	conn string
}

// requesterOf names the connection a request came from by its reply
// subject. NATS does not tell a responder in the same account who sent a
// request: the server's client id reaches it only across a service import
// between accounts (the header Nats-Request-Info), and its connz needs the
// system account, which a coordinator on --nats has not, and sees only its
// own server's clients, not a cluster's. What a request does carry is
// where its answer goes, and the NATS clients (Go, JavaScript, Python,
// Rust, the nats CLI) send every request of a connection to one response
// subscription, <inbox prefix>.<random per connection>.*, so the reply
// subject less its last token names the connection. A client can name
// another's inbox, and then spend its quota; it needs to have read that
// inbox's name first, which under --auth it cannot (an agent subscribes
// only under its own inbox prefix), and without --auth nothing stops a
// client from being anyone anyway: the bound keeps one client's leak from
// starving others, and maxAgentFollows keeps a client that draws a new
// inbox per request from filling the server. A reply of one or two
// tokens (an inbox per request, as the old request style of nats.go) is
// its own connection.
func requesterOf(reply string) string {
	if strings.Count(reply, ".") < 2 {
		return reply
	}
	return reply[:strings.LastIndexByte(reply, '.')]
}

// arbitersAckWait is the AckWait of the arbiters' consumer the coordinator
// creates: how long a case an arbiter took and went silent on waits before
// another gets it. It is the SDK's default; an arbiter allowed to may set
// its own.
const arbitersAckWait = 30 * time.Second

// followRequest is the body of feed.follow: the subtree to follow ("" for
// the whole state) and the stream sequence to start at (0: the next
// change).
type followRequest struct {
	Path     string `json:"path,omitempty"`
	StartSeq uint64 `json:"start_seq,omitempty"`
}

// followReply names the consumer made for the request and the stream
// sequence it starts at: a reader that lost it asks for another from
// the sequence after the last it got.
type followReply struct {
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	StartSeq uint64 `json:"start_seq"`
}

// handleFollow makes an ephemeral pull consumer on the change feed for the
// requester: filtered to the changes of one subtree, acknowledging
// nothing, in memory, and gone once nobody pulls from it for
// followInactive.
func (s *Service) handleFollow(req micro.Request) {
	var body followRequest
	if len(req.Data()) > 0 {
		if err := strictJSON(req.Data(), &body); err != nil {
			replyError(req, intents.ReasonInvalid, "feed.follow: %v", err)
			return
		}
	}
	if body.Path != "" {
		if err := intents.CheckPath(body.Path); err != nil {
			replyError(req, intents.ReasonInvalid, "feed.follow: path %q: %v", body.Path, err)
			return
		}
	}
	who := s.viewerOf(req.Reply()).Agent
	if who == "" {
		who = "anyone"
	}
	conn := requesterOf(req.Reply())
	if over := s.mayFollow(who, conn, s.opts.Now()); over != "" {
		replyError(req, intents.ReasonRateLimited, "feed.follow: %s feed consumers within %s; reuse one, or ask again later", over, followInactive)
		return
	}
	cfg := jetstream.ConsumerConfig{
		Name:              "follow_" + who + "_" + ulid.Make().String(),
		FilterSubjects:    s.subj.ChangeSubjects(body.Path),
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: followInactive,
		MemoryStorage:     true,
		Replicas:          1,
	}
	if body.StartSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, body.StartSeq
		if s.planted().WatchResumeSkip {
			cfg.OptStartSeq++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := s.js.CreateConsumer(ctx, s.subj.Stream(intents.StreamEvents), cfg)
	if err != nil {
		replyError(req, codeUnavailable, "feed.follow: %v", err)
		return
	}
	start := body.StartSeq
	if start == 0 {
		// A consumer that delivers what is new starts after the last
		// message the stream held when it was made.
		start = cons.CachedInfo().Delivered.Stream + 1
	}
	respond(req, followReply{Stream: s.subj.Stream(intents.StreamEvents), Consumer: cfg.Name, StartSeq: start})
}

// mayFollow counts one more feed consumer for the connection conn of
// agent at now, unless the connection made maxFollows, or the agent
// maxAgentFollows, within followInactive: it then says which, and how
// many.
func (s *Service) mayFollow(agent, conn string, now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	recent, mine := s.mu.follows[agent][:0], 0
	for _, m := range s.mu.follows[agent] {
		if now.Sub(m.at) < followInactive {
			recent = append(recent, m)
			if m.conn == conn {
				mine++
			}
		}
	}
	s.mu.follows[agent] = recent
	switch {
	case mine >= maxFollows:
		return fmt.Sprintf("connection %q of agent %s made %d", intents.Clip(conn, 100), agent, mine)
	case len(recent) >= maxAgentFollows:
		return fmt.Sprintf("agent %s made %d, over its connections,", agent, len(recent))
	}
	s.mu.follows[agent] = append(recent, followMark{at: now, conn: conn})
	return ""
}

// ensureArbitersConsumer creates the durable pull consumer every arbiter
// shares, if missing, so that arbiters need no right to create consumers.
// One that exists is kept as it is: an arbiter may have set its AckWait.
func (s *Service) ensureArbitersConsumer(ctx context.Context) error {
	stream := s.subj.Stream(intents.StreamArbiter)
	_, err := s.js.Consumer(ctx, stream, intents.ArbitersConsumer)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("coordinator: consumer %s on %s: %w", intents.ArbitersConsumer, stream, err)
	}
	_, err = s.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       intents.ArbitersConsumer,
		FilterSubject: s.subj.Escalations(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       arbitersAckWait,
		MaxDeliver:    -1,
	})
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("coordinator: create consumer %s on %s: %w", intents.ArbitersConsumer, stream, err)
	}
	return nil
}
