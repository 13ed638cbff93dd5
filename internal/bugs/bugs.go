// Package bugs names the deliberate bugs the robustness suite
// (tests/robustness) plants in a coordinator, to show that its checks
// catch each of them: a check that a planted bug passes proves nothing.
// Nothing outside this module can plant one, since nothing outside it can
// name this package.
package bugs

import (
	"fmt"
	"strings"
)

// Set is the bugs planted in one coordinator; the zero Set plants none.
type Set struct {
	// DirtyReads: state.get, decision.get and txn.list answer what the
	// engine holds at once, durable or not (a read is told what a crash
	// may then lose).
	DirtyReads bool
	// EarlyReplies: the output stage answers, publishes and acknowledges
	// each group without waiting for it to be durable.
	EarlyReplies bool
	// FeedGap: a coordinator that starts puts on the change feed again the
	// changes a killed one made durable but did not publish, all but the
	// first, so that a watcher misses it.
	FeedGap bool
	// SkipIdempotency: the engine decides an intent whose id it has
	// decided before afresh, instead of answering the recorded decision.
	SkipIdempotency bool
	// UnchainedReads: a cluster's members read the replicated log by the
	// seqs of its messages alone, not by the event each continues, so that
	// a deposed leader's orphan group (stored on top of the new leader's
	// first) is folded, or stops them.
	UnchainedReads bool
	// StandbyReads: a cluster's standbys answer state.get on the API's
	// shared subject too, from what they have folded, so that a read may
	// be answered at a revision behind a write that returned.
	StandbyReads bool
	// SkipFence: the engine lets the holder of a transaction whose lease
	// expired commit it still: the expiry is recorded, and the commit
	// that comes after it is applied instead of fenced.
	SkipFence bool
	// ClaimFence: the engine takes any fence on an apply that writes a
	// task under a leased claim: the owner's write under a stale fence,
	// or under the fence of a claim that ended (reclaimed, released), is
	// applied instead of fenced.
	ClaimFence bool
	// WatchResumeSkip: feed.follow, asked for a consumer from a stream
	// sequence (a watcher resuming after its consumer failed), starts it
	// at the one after, so that the watcher misses a message.
	WatchResumeSkip bool
}

// names are the bugs by the name Parse and String use.
var names = []struct {
	name    string
	set     func(*Set) *bool
	cluster bool // it shows in a cluster only
}{
	{"dirty-reads", func(s *Set) *bool { return &s.DirtyReads }, false},
	{"early-replies", func(s *Set) *bool { return &s.EarlyReplies }, false},
	{"feed-gap", func(s *Set) *bool { return &s.FeedGap }, false},
	{"skip-idempotency", func(s *Set) *bool { return &s.SkipIdempotency }, false},
	{"unchained-reads", func(s *Set) *bool { return &s.UnchainedReads }, true},
	{"standby-reads", func(s *Set) *bool { return &s.StandbyReads }, true},
	{"skip-fence", func(s *Set) *bool { return &s.SkipFence }, false},
	{"claim-fence", func(s *Set) *bool { return &s.ClaimFence }, false},
	{"watch-resume-skip", func(s *Set) *bool { return &s.WatchResumeSkip }, false},
}

// InCluster reports whether the bug name shows only in a cluster of
// coordinators.
func InCluster(name string) bool {
	for _, n := range names {
		if n.name == name {
			return n.cluster
		}
	}
	return false
}

// Names lists every bug's name.
func Names() []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.name
	}
	return out
}

// Parse reads a comma-separated list of bug names ("" is none).
func Parse(list string) (Set, error) {
	var s Set
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		found := false
		for _, n := range names {
			if n.name == name {
				*n.set(&s) = true
				found = true
			}
		}
		if !found {
			return Set{}, fmt.Errorf("bugs: no bug named %q (the bugs: %s)", name, strings.Join(Names(), ", "))
		}
	}
	return s, nil
}

// String lists the bugs s plants, comma-separated.
func (s Set) String() string {
	var out []string
	for _, n := range names {
		if *n.set(&s) {
			out = append(out, n.name)
		}
	}
	return strings.Join(out, ",")
}
