package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// ErrNoDecision is DeadLetters.Decision's error when the coordinator has
// recorded no decision of the intent by the end of the wait.
var ErrNoDecision = errors.New("agents: no decision recorded")

// DeadLetter is what the dead-letter stream (COAGENT_DLQ) keeps, for
// someone to read and perhaps retry: a case no arbiter resolved by its
// deadline (Case; the fallback decided it), or a task tried past its
// rule's max_retries (Task). One of the two is set.
type DeadLetter struct {
	// Seq is its message in the stream, which Retry and Remove remove.
	Seq  uint64
	Case *intents.Escalation
	Task *intents.DeadTask
}

// ID names l: its case's id, or its task's path.
func (l DeadLetter) ID() string {
	if l.Task != nil {
		return l.Task.Task
	}
	return l.Case.ID
}

// DeadLetters reads and retries the dead letters of a coordinator: what
// `coagent dlq` does. Under --auth it needs an agent with the role admin,
// the operator, whom the server lets read the stream, remove from it and
// publish any agent's intents. It is safe for concurrent use.
type DeadLetters struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	subj   intents.Subjects
}

// OpenDeadLetters looks up the dead-letter stream on nc, which the caller
// keeps owning. WithPrefix names the coordinator's prefix; other options
// are not read. A stream it cannot look up is JetStream's error as it
// came (jetstream.ErrStreamNotFound when the coordinator has made none),
// so that a caller watching its connection's permissions
// (Permissions.Err) can tell one it was refused.
func OpenDeadLetters(ctx context.Context, nc *nats.Conn, opts ...SharedOption) (*DeadLetters, error) {
	var cfg clientConfig
	for _, o := range opts {
		if o != nil {
			o.applyClient(&cfg)
		}
	}
	d := &DeadLetters{nc: nc, subj: intents.Subjects{Prefix: cfg.prefix}}
	var err error
	if d.js, err = jetstream.New(nc); err != nil {
		return nil, err
	}
	if d.stream, err = d.js.Stream(ctx, d.subj.Stream(intents.StreamDLQ)); err != nil {
		return nil, err
	}
	return d, nil
}

// List reads every dead letter, oldest first. A letter removed while it
// reads (by a retry elsewhere) is left out.
func (d *DeadLetters) List(ctx context.Context) ([]DeadLetter, error) {
	info, err := d.stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	var out []DeadLetter
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := d.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("dead letter %d: %w", seq, err)
		}
		if m.Header.Get(intents.HeaderDeadTask) != "" {
			var t intents.DeadTask
			if err := json.Unmarshal(m.Data, &t); err != nil {
				return nil, fmt.Errorf("dead letter %d (a dead task): %w", seq, err)
			}
			out = append(out, DeadLetter{Seq: seq, Task: &t})
			continue
		}
		var c intents.Escalation
		if err := json.Unmarshal(m.Data, &c); err != nil {
			return nil, fmt.Errorf("dead letter %d: %w", seq, err)
		}
		out = append(out, DeadLetter{Seq: seq, Case: &c})
	}
	return out, nil
}

// Retry sends the escalated intent of l again under a new id, its
// meta.retry_of naming the case (arbiter.Retry), on its agent's intents
// stream, so that it is decided anew and escalates again if it still
// conflicts; then it removes l. It returns the intent sent. When the
// intent went but l could not be removed, it returns both the intent and
// the error, which says so.
func (d *DeadLetters) Retry(ctx context.Context, l DeadLetter) (*intents.Intent, error) {
	if l.Task != nil {
		return nil, fmt.Errorf("retry %s: a dead task is retried by an operator's apply (RetryTask), not sent again", l.Task.Task)
	}
	id := l.Case.ID
	again, err := arbiter.Retry(l.Case, ulid.Make().String())
	if err != nil {
		return nil, fmt.Errorf("retry %s: %w", id, err)
	}
	data, err := json.Marshal(again)
	if err != nil {
		return nil, fmt.Errorf("retry %s: %w", id, err)
	}
	if _, err := d.js.Publish(ctx, d.subj.Intents(again.Agent), data, jetstream.WithMsgID(again.ID)); err != nil {
		return nil, fmt.Errorf("retry %s: %w", id, err)
	}
	if err := d.stream.DeleteMsg(ctx, l.Seq); err != nil {
		return again, fmt.Errorf("retry %s: sent as %s, but the dead letter stays: %w", id, again.ID, err)
	}
	return again, nil
}

// RetryTask sends, as agent (one of the task rule's operators), the apply
// that puts l's dead task back in its pool: its status the pool's, its
// tries 0, with action "retry" and meta.retry_of naming the letter. It
// returns the intent sent, on agent's intents stream; once it is applied
// (Decision), Remove takes the letter away. The apply is decided as any:
// an agent that is not an operator is refused, and the task stays dead.
func (d *DeadLetters) RetryTask(ctx context.Context, l DeadLetter, agent string) (*intents.Intent, error) {
	if l.Task == nil {
		return nil, fmt.Errorf("retry %s: not a dead task", l.ID())
	}
	t := l.Task
	status, _ := json.Marshal(t.Pool)
	meta, _ := json.Marshal(map[string]any{"retry_of": fmt.Sprintf("%s@%d", t.Task, t.Rev)})
	in := &intents.Intent{ID: ulid.Make().String(), Agent: agent, Kind: intents.KindApply, Action: "retry", Meta: meta,
		Writes: []intents.Write{
			{Path: t.Task + ".status", Op: intents.OpSet, Value: status},
			{Path: t.Task + ".tries", Op: intents.OpSet, Value: json.RawMessage("0")},
		}}
	data, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("retry %s: %w", t.Task, err)
	}
	if _, err := d.js.Publish(ctx, d.subj.Intents(agent), data, jetstream.WithMsgID(in.ID)); err != nil {
		return nil, fmt.Errorf("retry %s: %w", t.Task, err)
	}
	return in, nil
}

// Remove takes l out of the dead-letter stream.
func (d *DeadLetters) Remove(ctx context.Context, l DeadLetter) error {
	if err := d.stream.DeleteMsg(ctx, l.Seq); err != nil {
		return fmt.Errorf("remove dead letter %s: %w", l.ID(), err)
	}
	return nil
}

// Decision asks decision.get for the decision of intent id until it is
// final or wait has passed, and returns the latest one; with none
// recorded by then it is ErrNoDecision. A retried intent went through the
// stream, whose decisions are its agent's to subscribe to: asking the API
// needs no such right. An error reply other than not_found is an
// *APIError.
func (d *DeadLetters) Decision(ctx context.Context, id string, wait time.Duration) (*intents.Decision, error) {
	body, _ := json.Marshal(map[string]string{"intent": id})
	deadline := time.Now().Add(wait)
	var last *intents.Decision
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 250*time.Millisecond) {
		reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := d.nc.RequestWithContext(reqCtx, d.subj.API(intents.APIDecisionGet), body)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("decision.get: %w", err)
		}
		var api *APIError
		switch err := apiError(resp); {
		case err == nil:
			var dec intents.Decision
			if err := json.Unmarshal(resp.Data, &dec); err != nil {
				return nil, fmt.Errorf("decision.get: the coordinator answered %q: %w", resp.Data, err)
			}
			if dec.Outcome.Final() {
				return &dec, nil
			}
			last = &dec
		case !errors.As(err, &api) || api.Code != codeNotFound:
			return nil, fmt.Errorf("decision.get: %w", err)
		}
		if time.Now().After(deadline) {
			if last != nil {
				return last, nil
			}
			return nil, fmt.Errorf("%w of intent %s after %s", ErrNoDecision, id, wait)
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
