package coordinator

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go/micro"
)

// fakeRequest is a micro.Request that keeps its one answer.
type fakeRequest struct {
	micro.Request
	mu      sync.Mutex
	answers []string
}

func (r *fakeRequest) Respond(data []byte, _ ...micro.RespondOpt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers = append(r.answers, string(data))
	return nil
}

func (r *fakeRequest) Error(code, description string, _ []byte, _ ...micro.RespondOpt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers = append(r.answers, "error "+code)
	return nil
}

// A submit whose wait has passed by the time its group is durable is
// answered with its own decision, even when replies answers it before the
// group's decisions are handed out (as its own goroutine may): never with
// unavailable.
func TestRepliesAnswerADueSubmitWithItsOwnDecision(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newReplies(func() time.Time { return now })
	queued := &intents.Decision{Intent: "01JD0000000000000000000001", Agent: "a", Outcome: intents.OutcomeQueued}
	req := &fakeRequest{}
	sub := &submit{req: req, deadline: now, id: queued.Intent, own: queued}
	r.add([]*submit{sub})
	r.flush() // due: answered before wake was told of anything
	if len(req.answers) != 1 {
		t.Fatalf("answers %q", req.answers)
	}
	var d intents.Decision
	if err := json.Unmarshal([]byte(req.answers[0]), &d); err != nil || d.Outcome != intents.OutcomeQueued {
		t.Fatalf("a due submit was answered %q, want its queued decision", req.answers[0])
	}
	// Told of its decisions after, it is not answered twice.
	r.wake(queued)
	r.wake(&intents.Decision{Intent: queued.Intent, Agent: "a", Outcome: intents.OutcomeApplied})
	if len(req.answers) != 1 {
		t.Fatalf("answered again: %q", req.answers)
	}
	// One still waiting takes the final decision when it comes.
	req2 := &fakeRequest{}
	r.add([]*submit{{req: req2, deadline: now.Add(time.Minute), id: queued.Intent, own: queued}})
	r.flush()
	r.wake(&intents.Decision{Intent: queued.Intent, Agent: "a", Outcome: intents.OutcomeApplied})
	if len(req2.answers) != 1 || !json.Valid([]byte(req2.answers[0])) || json.Unmarshal([]byte(req2.answers[0]), &d) != nil || d.Outcome != intents.OutcomeApplied {
		t.Fatalf("a waiting submit: %q, want applied", req2.answers)
	}
}
