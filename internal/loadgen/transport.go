package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
)

// The bounds of waiting for one intent's decision: each send of the same
// intent waits twice as long as the one before, up to maxRequestTimeout,
// and an intent that has no final decision after maxDecisionWait ends the
// run with an error.
const (
	maxRequestTimeout = 30 * time.Second
	maxDecisionWait   = time.Minute
)

// The micro error header a coordinator's API error reply carries, and the
// code of a coordinator that cannot take the intent now (its intake is
// full, it is stopping): the same intent is to be sent again.
const (
	headerErrorCode = "Nats-Service-Error-Code"
	headerError     = "Nats-Service-Error"
	codeUnavailable = "unavailable"
)

// submitter sends an intent and returns its final decision, sending the
// same intent (same id) again while none comes. It counts the round trips
// and the sends again in st. It is used by one agent goroutine at a time.
type submitter interface {
	submit(ctx context.Context, in *intents.Intent, st *agentStats) (*intents.Decision, error)
	close()
}

var (
	_ submitter = (*apiSubmitter)(nil)
	_ submitter = (*streamSubmitter)(nil)
)

func newSubmitter(cfg Config, nc *nats.Conn, subj intents.Subjects, agent string) (submitter, error) {
	if cfg.Path == PathStream {
		return newStreamSubmitter(cfg, nc, subj, agent)
	}
	return &apiSubmitter{nc: nc, subject: subj.Submit(agent), timeout: cfg.RequestTimeout}, nil
}

// apiSubmitter submits by request/reply on <prefix>.api.submit.<agent>.
type apiSubmitter struct {
	nc      *nats.Conn
	subject string
	timeout time.Duration
}

func (a *apiSubmitter) close() {}

func (a *apiSubmitter) submit(ctx context.Context, in *intents.Intent, st *agentStats) (*intents.Decision, error) {
	raw, err := intents.AppendIntentJSON(nil, in)
	if err != nil {
		return nil, fmt.Errorf("loadgen: encode intent %s: %w", in.ID, err)
	}
	m := nats.NewMsg(a.subject)
	m.Data = raw
	timeout := a.timeout
	giveUp := time.Now().Add(maxDecisionWait)
	for send := 0; ; send++ {
		if send > 0 {
			st.resends++
			if time.Now().After(giveUp) {
				return nil, fmt.Errorf("loadgen: agent %s: no final decision for intent %s in %v (%d sends)",
					in.Agent, in.ID, maxDecisionWait, send)
			}
		}
		// The coordinator answers with the interim decision before the
		// request gives up, so that a queued intent is seen to be queued.
		m.Header.Set(intents.HeaderWait, strconv.FormatInt(max(timeout/2, time.Millisecond).Milliseconds(), 10))
		st.roundTrips++
		rctx, cancel := context.WithTimeout(ctx, timeout)
		reply, err := a.nc.RequestMsgWithContext(rctx, m)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
			// The reply was lost or is late: the same intent again gets
			// the recorded decision, or waits for it.
			timeout = min(2*timeout, maxRequestTimeout)
			continue
		case errors.Is(err, nats.ErrNoResponders):
			// No coordinator listens (yet, or for a moment): wait a little.
			if !pause(ctx, backoff(send+1, nil)) {
				return nil, ctx.Err()
			}
			continue
		default:
			return nil, fmt.Errorf("loadgen: agent %s: submit intent %s: %w", in.Agent, in.ID, err)
		}
		if code := reply.Header.Get(headerErrorCode); code != "" {
			if code != codeUnavailable {
				return nil, fmt.Errorf("loadgen: agent %s: submit intent %s: the coordinator answered %s: %s",
					in.Agent, in.ID, code, reply.Header.Get(headerError))
			}
			if !pause(ctx, backoff(send+1, nil)) {
				return nil, ctx.Err()
			}
			continue
		}
		var d intents.Decision
		if err := intents.UnmarshalDecision(reply.Data, &d); err != nil {
			return nil, fmt.Errorf("loadgen: agent %s: the decision of intent %s: %q: %w", in.Agent, in.ID, reply.Data, err)
		}
		if d.Outcome.Final() {
			return &d, nil
		}
		// Interim (queued, escalated): the same intent again waits for
		// the final decision.
	}
}

// streamSubmitter publishes on <prefix>.intents.<agent> and reads the
// decisions on <prefix>.decisions.<agent>.
type streamSubmitter struct {
	nc        *nats.Conn
	subject   string
	lookup    string // decision.get
	timeout   time.Duration
	sub       *nats.Subscription
	decisions chan *intents.Decision
	done      chan struct{}
}

func newStreamSubmitter(cfg Config, nc *nats.Conn, subj intents.Subjects, agent string) (*streamSubmitter, error) {
	s := &streamSubmitter{nc: nc, subject: subj.Intents(agent), lookup: subj.API(intents.APIDecisionGet),
		timeout: cfg.RequestTimeout, decisions: make(chan *intents.Decision, 64), done: make(chan struct{})}
	sub, err := nc.Subscribe(subj.Decisions(agent), func(m *nats.Msg) {
		var d intents.Decision
		if intents.UnmarshalDecision(m.Data, &d) != nil {
			return
		}
		select {
		case s.decisions <- &d:
		case <-s.done:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("loadgen: agent %s: subscribe to its decisions: %w", agent, err)
	}
	// The first decision must not race the subscription to the server.
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("loadgen: agent %s: subscribe to its decisions: %w", agent, err)
	}
	s.sub = sub
	return s, nil
}

func (s *streamSubmitter) close() {
	close(s.done)
	_ = s.sub.Unsubscribe()
}

func (s *streamSubmitter) submit(ctx context.Context, in *intents.Intent, st *agentStats) (*intents.Decision, error) {
	raw, err := intents.AppendIntentJSON(nil, in)
	if err != nil {
		return nil, fmt.Errorf("loadgen: encode intent %s: %w", in.ID, err)
	}
	m := nats.NewMsg(s.subject)
	m.Data = raw
	// The stream keeps one copy of an intent however often it is sent.
	m.Header.Set(nats.MsgIdHdr, in.ID)
	publish := func() error {
		st.roundTrips++
		if err := s.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("loadgen: agent %s: publish intent %s: %w", in.Agent, in.ID, err)
		}
		return nil
	}
	if err := publish(); err != nil {
		return nil, err
	}
	timeout := s.timeout
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	giveUp := time.Now().Add(maxDecisionWait)
	for sends := 1; ; {
		select {
		case d := <-s.decisions:
			// Decisions of earlier intents (a decision sent again) are
			// passed over: each intent is counted once.
			if d.Intent == in.ID && d.Outcome.Final() {
				return d, nil
			}
		case <-timer.C:
			if time.Now().After(giveUp) {
				return nil, fmt.Errorf("loadgen: agent %s: no final decision for intent %s in %v (%d sends)",
					in.Agent, in.ID, maxDecisionWait, sends)
			}
			// The decision was lost or is late: ask for it; failing
			// that, send the intent again.
			if d, err := s.get(ctx, in.ID, timeout, st); err != nil {
				return nil, err
			} else if d != nil {
				return d, nil
			}
			st.resends++
			sends++
			if err := publish(); err != nil {
				return nil, err
			}
			timeout = min(2*timeout, maxRequestTimeout)
			timer.Reset(timeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// get asks decision.get for the final decision of intent id; nil if it has
// none yet (not_found, interim, no answer in time).
func (s *streamSubmitter) get(ctx context.Context, id string, timeout time.Duration, st *agentStats) (*intents.Decision, error) {
	body, _ := json.Marshal(map[string]string{"intent": id})
	st.roundTrips++
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := s.nc.RequestWithContext(rctx, s.lookup, body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, nil
	}
	if reply.Header.Get(headerErrorCode) != "" {
		return nil, nil
	}
	var d intents.Decision
	if err := intents.UnmarshalDecision(reply.Data, &d); err != nil {
		return nil, fmt.Errorf("loadgen: decision.get %s: %q: %w", id, reply.Data, err)
	}
	if !d.Outcome.Final() {
		return nil, nil
	}
	return &d, nil
}
