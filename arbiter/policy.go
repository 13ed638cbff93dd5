package arbiter

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/coagent/coagent/intents"
)

// Policy is a rule arbiter: it turns a case into a resolution signed by
// arbiter. A rule always has an answer, so it never returns nil. The
// resolution names only the escalated intent (the case's id) and the
// proposes of the transactions it conflicts with, as the coordinator
// requires.
type Policy func(arbiter string, c *intents.Escalation) *intents.Resolution

// Policies lists the names ByName knows, in the order a usage text shows
// them.
var Policies = []string{"priority", "first", "reject"}

// ErrUnknownPolicy is returned (wrapped) by ByName for a name it does not
// know.
var ErrUnknownPolicy = errors.New("arbiter: unknown policy")

// ByName returns the policy called name: "priority", "first" or "reject".
func ByName(name string) (Policy, error) {
	switch name {
	case "priority":
		return Priority, nil
	case "first":
		return First, nil
	case "reject":
		return Reject, nil
	}
	return nil, fmt.Errorf("%w %q (the policies are %s)", ErrUnknownPolicy, name, strings.Join(Policies, ", "))
}

// Priority lets the intent with the higher priority win. A tie goes to the
// earlier intent: the holder's propose, which was granted before the
// escalated intent arrived, and otherwise the lower id (ULIDs sort by
// time). When the escalated intent wins, every transaction in its way
// loses; when a transaction wins, only the escalated intent loses.
func Priority(arbiter string, c *intents.Escalation) *intents.Resolution {
	cands := candidates(c)
	holder := ""
	if c.Holder != nil {
		holder = c.Holder.Intent
	}
	// Highest priority first; among equals the holder, then the lower id.
	ranked := slices.Clone(cands)
	slices.SortStableFunc(ranked, func(a, b *intents.Intent) int {
		if p := cmp.Compare(b.Priority, a.Priority); p != 0 {
			return p
		}
		if (a.ID == holder) != (b.ID == holder) {
			if a.ID == holder {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.ID, b.ID)
	})
	win := ranked[0]
	res := &intents.Resolution{Escalation: c.ID, Arbiter: arbiter, Winners: []string{win.ID}}
	if win.ID == c.ID {
		for _, in := range cands {
			if in.ID != c.ID {
				res.Losers = append(res.Losers, in.ID)
			}
		}
	} else {
		res.Losers = []string{c.ID}
	}
	if len(ranked) == 1 {
		res.Rationale = fmt.Sprintf("priority: %s (priority %d) wins unopposed: the case names no other intent", win.ID, win.Priority)
		return res
	}
	// The strongest rival is the best-ranked intent on the other side.
	var rival *intents.Intent
	for _, in := range ranked[1:] {
		if (in.ID == c.ID) != (win.ID == c.ID) {
			rival = in
			break
		}
	}
	if win.Priority > rival.Priority {
		res.Rationale = fmt.Sprintf("priority: %s's priority %d beats %s's %d", win.ID, win.Priority, rival.ID, rival.Priority)
	} else {
		why := "has the lower id"
		if win.ID == holder {
			why = "holds the grant it was given first"
		}
		res.Rationale = fmt.Sprintf("priority: a tie at %d goes to the earlier intent, and %s %s", win.Priority, win.ID, why)
	}
	return res
}

// First lets whoever came first win: the holder's propose, granted before
// the escalated intent arrived, keeps its grant and the escalated intent
// loses. A case with no holder has nobody earlier, so the escalated intent
// wins.
func First(arbiter string, c *intents.Escalation) *intents.Resolution {
	if c.Holder == nil {
		return &intents.Resolution{Escalation: c.ID, Arbiter: arbiter, Winners: []string{c.ID},
			Rationale: fmt.Sprintf("first come: no transaction was there before %s, so it wins", c.ID)}
	}
	return &intents.Resolution{Escalation: c.ID, Arbiter: arbiter, Winners: []string{c.Holder.Intent}, Losers: []string{c.ID},
		Rationale: fmt.Sprintf("first come: %s's transaction %s was granted before %s arrived, so it keeps its grant",
			c.Holder.Agent, c.Holder.Txn, c.ID)}
}

// Reject lets the escalated intent lose, whatever it conflicts with: what
// is in flight carries on.
func Reject(arbiter string, c *intents.Escalation) *intents.Resolution {
	return &intents.Resolution{Escalation: c.ID, Arbiter: arbiter, Losers: []string{c.ID},
		Rationale: fmt.Sprintf("reject: escalated intent %s loses and what is in flight carries on", c.ID)}
}

// candidates returns the escalated intent and the proposes it conflicts
// with, each once, the escalated intent first. An intent the case names
// but does not carry (a malformed case) stands in with priority 0.
func candidates(c *intents.Escalation) []*intents.Intent {
	var out []*intents.Intent
	seen := map[string]bool{}
	add := func(in *intents.Intent) {
		if in != nil && !seen[in.ID] {
			seen[in.ID] = true
			out = append(out, in)
		}
	}
	add(c.Escalated())
	add(&intents.Intent{ID: c.ID})
	for _, in := range c.Intents {
		add(in)
	}
	if c.Holder != nil {
		add(&intents.Intent{ID: c.Holder.Intent})
	}
	return out
}
