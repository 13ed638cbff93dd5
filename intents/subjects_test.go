package intents

import "testing"

// The agent parsed from a subject is the one the subject was made for,
// and nothing else parses: an authenticated agent is known by it.
func TestSubjectAgents(t *testing.T) {
	s := Subjects{Prefix: "p"}
	for _, agent := range []string{"", "alice", "r-2"} {
		got, ok := s.SubmitAgent(s.Submit(agent))
		if !ok || got != agent {
			t.Errorf("SubmitAgent(Submit(%q)) = %q, %v", agent, got, ok)
		}
		if agent == "" {
			continue
		}
		if got, ok := s.IntentAgent(s.Intents(agent)); !ok || got != agent {
			t.Errorf("IntentAgent(Intents(%q)) = %q, %v", agent, got, ok)
		}
	}
	for _, subject := range []string{"p.api.submit.", "p.api.submit.a.b", "p.api.submitx", "q.api.submit.a", "p.api.state.get", "coagent.api.submit"} {
		if got, ok := s.SubmitAgent(subject); ok {
			t.Errorf("SubmitAgent(%q) = %q, true; want not a submit subject", subject, got)
		}
	}
	for _, subject := range []string{"p.intents.", "p.intents.a.b", "q.intents.a", "p.decisions.a"} {
		if got, ok := s.IntentAgent(subject); ok {
			t.Errorf("IntentAgent(%q) = %q, true", subject, got)
		}
	}
}
