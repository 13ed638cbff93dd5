package robustness

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation does to its path.
type Kind int

const (
	// Read is a state.get of the path.
	Read Kind = iota
	// CAS sets the path's value if its version is still Version.
	CAS
	// Incr adds one to the path's value.
	Incr
	// Claim sets a task's owner (its path, <task>.owner) to the claimer's
	// number if the task has none, first wins: an apply whose precondition
	// is that the owner is absent. Under the task's leased rule it takes a
	// lease: applied, it is told the claim's fence.
	Claim
	// Release removes the task's owner, carrying the fence of the
	// releaser's claim: it applies only if the releaser holds the task
	// under that fence.
	Release
	// ReadBoth is one state.get of Path and Path2.
	ReadBoth
	// TxnSet is a transaction over Path and Path2: a propose that reads
	// both at Version and Version2 and writes both, granted, then a commit
	// that sets them to Value and Value2. It applies only if both paths
	// are still at the versions read: a write to either while it is in
	// flight must wait (or be refused), or the commit would overwrite it.
	TxnSet
	// Renew extends the lease of the renewer's claim of the task, named by
	// its fence: it is renewed only if the renewer holds the task under
	// that fence, and changes nothing else.
	Renew
)

func (k Kind) String() string {
	return [...]string{"read", "cas", "incr", "claim", "release", "read2", "txn", "renew"}[k]
}

// read reports whether k changes nothing.
func (k Kind) read() bool { return k == Read || k == ReadBoth }

// Input is an operation as it was asked.
type Input struct {
	Kind    Kind
	Path    string
	Version uint64 // CAS: the version it expects
	Value   int64  // CAS: the value it sets; Claim, Release: the claimer's number (not 0)
	Intent  string // writes: the intent's id (TxnSet: the commit's, or the propose's if it was refused)
	// Path2 is the second path of ReadBoth and TxnSet; Slot is which of
	// its group's two paths Path is, for the other kinds (a path of a
	// pair is 1 if it is its second).
	Path2    string
	Version2 uint64
	Value2   int64
	Slot     int
	// Wait says the write was sent with on_conflict: wait.
	Wait bool
	// Fence is the fence a Release or Renew carries. Task says a Read is
	// of a task's owner: the model reads it as the tasks' ops do.
	Fence uint64
	Task  bool
}

// Output is what an operation was told. Unknown says nothing was (no
// reply, or unavailable, and decision.get found no decision): the
// operation may have taken effect or not.
type Output struct {
	Unknown bool
	// Applied: the write was applied (CAS, Incr); false and known: it was
	// rejected and changed nothing. Stale says a CAS was rejected because
	// the version was not the one it named (stale_read); Failed that its
	// precondition did not hold (precondition_failed).
	Applied bool
	Stale   bool
	Failed  bool
	// Fenced says a Release or Renew was refused because the claim it
	// names is not the caller's live one (fenced, lease_expired,
	// unauthorized), and a Claim that another holds the task
	// (unauthorized).
	Fenced bool
	// Fence is the fence an applied Claim was given (and a renewal's).
	// Lease names the claim's lease, for renew; the model does not look
	// at it.
	Fence uint64
	Lease string
	// Version is what the path's version became (an applied write) or was
	// (a read); Value the value a read saw.
	Version uint64
	Value   int64
	// Version2 and Value2 are the same of Path2 (ReadBoth, TxnSet).
	Version2 uint64
	Value2   int64
	// Rev is the revision of the log the answer stands at: an applied
	// write's, or the one a read was answered at (SPEC §1). The model does
	// not look at it; checkRevs does.
	Rev uint64
}

// pathState is a path's value and version; version 0 is absent. A
// task's owner is its Value (0: none), with Fence the fence of its owner's
// claim (0 while not known: an unknown claim took it) and Top the highest
// fence the task's history has shown; its version is not modelled.
type pathState struct {
	Value   int64
	Version uint64
	Fence   uint64
	Top     uint64
}

// groupState is the state of a partition: one path, or the two paths a
// transaction writes together (slot 0 the first).
type groupState [2]pathState

// Model is the porcupine model of the paths, partitioned by path, the two
// paths of a transaction in one partition.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		first := map[string]string{} // a pair's second path → its first
		for _, op := range history {
			if in := op.Input.(Input); in.Path2 != "" {
				first[in.Path2] = in.Path
			}
		}
		byPath := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			p := op.Input.(Input).Path
			if f, ok := first[p]; ok {
				p = f
			}
			if _, ok := byPath[p]; !ok {
				order = append(order, p)
			}
			byPath[p] = append(byPath[p], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, p := range order {
			out = append(out, byPath[p])
		}
		return out
	},
	Init: func() any { return groupState{} },
	Step: func(state, input, output any) (bool, any) {
		g, in, out := state.(groupState), input.(Input), output.(Output)
		switch in.Kind {
		case ReadBoth:
			return sees(g[0], out.Value, out.Version) && sees(g[1], out.Value2, out.Version2), g
		case TxnSet:
			holds := g[0].Version == in.Version && g[1].Version == in.Version2
			next := groupState{{Value: in.Value, Version: g[0].Version + 1}, {Value: in.Value2, Version: g[1].Version + 1}}
			switch {
			case out.Unknown:
				if holds {
					return true, next
				}
				return true, g
			case out.Applied:
				return holds && out.Version == next[0].Version && out.Version2 == next[1].Version, next
			case out.Stale:
				return !holds, g
			default:
				return true, g // refused (a conflict, fenced, its lease ended): nothing changed
			}
		}
		ok, s := step(g[in.Slot], in, out)
		g[in.Slot] = s
		return ok, g
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		told := fmt.Sprintf("applied v%d", out.Version)
		switch {
		case out.Unknown:
			told = "unknown"
		case in.Kind == Read:
			told = fmt.Sprintf("%d at v%d", out.Value, out.Version)
		case in.Kind == ReadBoth:
			told = fmt.Sprintf("%d at v%d, %d at v%d", out.Value, out.Version, out.Value2, out.Version2)
		case in.Kind == TxnSet && out.Applied:
			told = fmt.Sprintf("committed v%d, v%d", out.Version, out.Version2)
		case !out.Applied:
			told = "rejected"
		}
		switch in.Kind {
		case CAS:
			return fmt.Sprintf("cas(%s, v%d → %d) %s", in.Path, in.Version, in.Value, told)
		case Claim:
			if out.Applied {
				told = fmt.Sprintf("applied fence %d", out.Fence)
			}
			return fmt.Sprintf("claim(%s by %d) %s", in.Path, in.Value, told)
		case Release, Renew:
			return fmt.Sprintf("%s(%s by %d, fence %d) %s", in.Kind, in.Path, in.Value, in.Fence, told)
		case Read:
			if in.Task && !out.Unknown {
				told = fmt.Sprintf("owner %d", out.Value)
			}
			return fmt.Sprintf("read(%s) %s", in.Path, told)
		case ReadBoth:
			return fmt.Sprintf("read(%s, %s) %s", in.Path, in.Path2, told)
		case TxnSet:
			return fmt.Sprintf("txn(%s v%d → %d, %s v%d → %d) %s", in.Path, in.Version, in.Value, in.Path2, in.Version2, in.Value2, told)
		default:
			return fmt.Sprintf("%s(%s) %s", in.Kind, in.Path, told)
		}
	},
	DescribeState: func(state any) string {
		g := state.(groupState)
		if g[0].Top > 0 {
			return fmt.Sprintf("owner %d, fence %d, top fence %d", g[0].Value, g[0].Fence, g[0].Top)
		}
		if g[1] == (pathState{}) {
			return fmt.Sprintf("%d at v%d", g[0].Value, g[0].Version)
		}
		return fmt.Sprintf("%d at v%d, %d at v%d", g[0].Value, g[0].Version, g[1].Value, g[1].Version)
	},
}

// step applies one operation to a path's state, reporting whether what it
// was told is possible there. An unknown write is taken as applied where
// it could apply: porcupine places an operation without a return at the
// end of the history if it must, where having applied is the same as not
// having applied for everything that was observed.
func step(s pathState, in Input, out Output) (bool, pathState) {
	switch in.Kind {
	case Read:
		if in.Task {
			return task(s, in, out)
		}
		return sees(s, out.Value, out.Version), s
	case Claim, Release, Renew:
		return task(s, in, out)
	case CAS:
		switch {
		case out.Unknown:
			if s.Version == in.Version {
				return true, pathState{Value: in.Value, Version: s.Version + 1}
			}
			return true, s
		case out.Applied:
			return s.Version == in.Version && out.Version == s.Version+1, pathState{Value: in.Value, Version: s.Version + 1}
		case out.Stale:
			return s.Version != in.Version, s
		default:
			return true, s // refused for another reason: nothing changed
		}
	case Incr:
		next := pathState{Value: s.Value + 1, Version: s.Version + 1}
		switch {
		case out.Unknown:
			return true, next
		case out.Applied:
			return out.Version == next.Version, next
		default:
			return true, s // refused (the intake full, an invalid intent): nothing changed
		}
	}
	return false, s
}

// task steps an operation on a leased task. No client's operation
// reclaims a task: the coordinator does, when the owner's lease ends, at
// a moment the history does not show. The model lets an owner lose its
// task at any moment, but only where the history shows it did (a claim
// of the task by another, a read that finds no owner, the owner's renewal
// or release refused as fenced), and it requires every claim's fence to
// be above every fence the task's history had shown before it: a claim
// given while another was live, or a stale fence accepted, then shows as
// two holders, a fence reused, or a write under a fence that is not the
// owner's. Being lazy about reclaims loses nothing: an owner's task taken
// earlier than where it shows explains nothing more, since every
// operation in between finds it owned or does not look.
func task(s pathState, in Input, out Output) (bool, pathState) {
	reclaimed := pathState{Top: s.Top}
	holds := s.Value == in.Value && (s.Fence == in.Fence || s.Fence == 0 && in.Fence > s.Top)
	if out.Unknown {
		// Taken as applied where it could apply (see step); a claim of
		// an owned task is taken as not applied, and its fence, which
		// nobody was told, as not known.
		switch {
		case in.Kind == Claim && s.Value == 0:
			return true, pathState{Value: in.Value, Top: s.Top}
		case in.Kind == Release && holds:
			return true, pathState{Top: max(s.Top, in.Fence)}
		}
		return true, s
	}
	switch in.Kind {
	case Read:
		switch out.Value {
		case s.Value:
			return true, s
		case 0:
			return true, reclaimed // its owner's lease ended
		}
		return false, s
	case Claim:
		switch {
		case out.Applied:
			// Over an owner, the owner's lease must have ended: a fence
			// above the task's top says a new claim.
			return out.Fence > s.Top, pathState{Value: in.Value, Fence: out.Fence, Top: out.Fence}
		case out.Failed || out.Fenced:
			return s.Value != 0, s
		}
		return true, s // refused for another reason: nothing changed
	case Release, Renew:
		switch {
		case out.Applied && in.Kind == Release:
			return holds, pathState{Top: max(s.Top, in.Fence)}
		case out.Applied:
			next := s
			next.Fence, next.Top = in.Fence, max(s.Top, in.Fence)
			return holds && (out.Fence == 0 || out.Fence == in.Fence), next
		case out.Fenced:
			// The caller's claim under that fence ended, if it was live.
			if holds {
				return true, reclaimed
			}
			return true, s
		}
		return true, s
	}
	return false, s
}

// sees reports whether a read of value at version is what s holds.
func sees(s pathState, value int64, version uint64) bool {
	return version == s.Version && (s.Version == 0 || value == s.Value)
}
