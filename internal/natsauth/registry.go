package natsauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// RoleArbiter is the role that may work the arbiter queue and resolve
// cases; RoleObserver may read the whole event feed, not only changes,
// and every value; RoleAdmin, the operator's, may besides what an
// observer may put rules in force (rules.set) and list, retry and remove
// the dead letters (the board rules give these roles their meaning).
const (
	RoleArbiter  = rules.RoleArbiter
	RoleObserver = rules.RoleObserver
	RoleAdmin    = rules.RoleAdmin
)

// Registry is the agents known to the server.
type Registry struct {
	Agents map[string]Agent `json:"agents"`
}

// Agent is one registered agent.
type Agent struct {
	Roles []string `json:"roles,omitempty"`
	// Nkey is the public key the agent authenticates with.
	Nkey string `json:"nkey"`
	// HTTPToken is the SHA-256 (hex) of the token the agent gives serve
	// --auth's HTTP listener (see NewHTTPToken); "" for none. The token
	// itself is shown once, when made, and kept nowhere.
	HTTPToken string `json:"http_token,omitempty"`
}

// ErrExists is returned by Add for a name already registered.
var ErrExists = errors.New("natsauth: agent already registered")

// Load reads a registry; a missing file is an empty registry.
func Load(path string) (*Registry, error) {
	r := &Registry{Agents: map[string]Agent{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsauth: read registry %s: %w", path, err)
	}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("natsauth: registry %s: %w", path, err)
	}
	if r.Agents == nil {
		r.Agents = map[string]Agent{}
	}
	for name, a := range r.Agents {
		if !intents.ValidSegment(name) {
			return nil, fmt.Errorf("natsauth: registry %s: %q is not an agent name", path, name)
		}
		if !nkeys.IsValidPublicUserKey(a.Nkey) {
			return nil, fmt.Errorf("natsauth: registry %s: agent %s: %q is not a public user nkey", path, name, a.Nkey)
		}
	}
	return r, nil
}

// Save writes the registry atomically: a crash leaves the old file or the
// new one, never half of one.
func (r *Registry) Save(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("natsauth: write registry: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("natsauth: write registry: %w", err)
	}
	return nil
}

// Add registers name with roles and a new user nkey, and returns the seed
// the agent authenticates with. It changes only r; Save persists it.
func (r *Registry) Add(name string, roles []string) ([]byte, error) {
	if !intents.ValidSegment(name) {
		return nil, fmt.Errorf("natsauth: %q is not an agent name", name)
	}
	for _, role := range roles {
		if !intents.ValidSegment(role) {
			return nil, fmt.Errorf("natsauth: %q is not a role name", role)
		}
	}
	if _, ok := r.Agents[name]; ok {
		return nil, fmt.Errorf("%w: %s", ErrExists, name)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("natsauth: create a key for %s: %w", name, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	roles = slices.Clone(roles)
	sort.Strings(roles)
	r.Agents[name] = Agent{Roles: slices.Compact(roles), Nkey: pub}
	return seed, nil
}

// Roles returns every agent's roles, for the board rules.
func (r *Registry) Roles() map[string][]string {
	out := map[string][]string{}
	for name, a := range r.Agents {
		if len(a.Roles) > 0 {
			out[name] = a.Roles
		}
	}
	return out
}

// Permissions are what agent may publish and subscribe to under prefix.
//
// Of JetStream, an agent may only look up and pull from consumers that
// the coordinator made (the change feed's, through the feed.follow API,
// and the arbiters'): making one is the coordinator's, because the server
// can scope a consumer's filter subject but not the rest of its
// configuration (a push consumer delivers wherever its creator says, into
// another agent's subjects too). Nor may it list, delete or change
// consumers, read a stream's messages or its subjects, or touch any other
// stream: what it reads of JetStream is the change feed, which carries
// only what every agent may read.
func Permissions(prefix, agent string, roles []string) *server.Permissions {
	s := intents.Subjects{Prefix: prefix}
	events := s.Stream(intents.StreamEvents)
	pub := []string{
		s.Intents(agent),
		s.Submit(agent),
		s.API(intents.APIStateGet), s.API(intents.APITxnList), s.API(intents.APILogQuery), s.API(intents.APIConflictsTop), s.API(intents.APIRulesGet),
		s.API(intents.APIDecisionGet),
		// A vote on an approval case: the coordinator checks that the
		// rule's approve names the agent, and that the vote is its own.
		s.API(intents.APICaseVote),
		// The change feed (Watch): a consumer made by feed.follow, whose
		// name the agent is told and nobody can guess.
		s.API(intents.APIFeedFollow),
		"$JS.API.CONSUMER.INFO." + events + ".*",
		"$JS.API.CONSUMER.MSG.NEXT." + events + ".*",
		// The read-only API of each coordinator of a cluster, a standby's
		// too (`--node`), answered through the same viewer as the active
		// one's shared subjects.
		s.NodeAPI("*", intents.APIStateGet), s.NodeAPI("*", intents.APILogQuery), s.NodeAPI("*", intents.APITxnList),
	}
	sub := []string{
		s.Decisions(agent),
		s.Notices(agent),
		s.EventsChange(">"),
		intents.InboxPrefix(agent) + ".>",
	}
	if slices.Contains(roles, RoleObserver) || slices.Contains(roles, RoleAdmin) {
		// `coagent status`: every member's answer, and the replicated
		// log's stream information (its sequences and replicas, none of
		// its messages).
		sub = append(sub, s.AllEvents())
		pub = append(pub, s.Status(), "$JS.API.STREAM.INFO."+s.Stream(intents.StreamLog))
	}
	if slices.Contains(roles, RoleAdmin) {
		// What `coagent rules set` and `coagent dlq list|show|retry` do:
		// the dead letters are read and removed by stream sequence, and a
		// retry sends the escalated intent again on its own agent's
		// subject, so the operator may publish as any agent.
		dlq := s.Stream(intents.StreamDLQ)
		pub = append(pub,
			s.API(intents.APIRulesSet),
			s.ClusterSnapshot(), // coagent snapshot: the active coordinator checks the role too
			s.Intents("*"),
			"$JS.API.STREAM.INFO."+dlq,
			"$JS.API.STREAM.MSG.GET."+dlq,
			"$JS.API.DIRECT.GET."+dlq,
			"$JS.API.STREAM.MSG.DELETE."+dlq,
		)
	}
	if slices.Contains(roles, RoleArbiter) {
		arb, cons := s.Stream(intents.StreamArbiter), intents.ArbitersConsumer
		pub = append(pub,
			s.API(intents.APIArbiterResolve),
			"$JS.API.CONSUMER.INFO."+arb+"."+cons,
			"$JS.API.CONSUMER.MSG.NEXT."+arb+"."+cons,
			"$JS.ACK."+arb+"."+cons+".>",
		)
	}
	// The same subjects of every shard (docs/sharding.md: shard s1 speaks
	// under <prefix>.s1), but JetStream's, whose stream names a wildcard
	// cannot cover: an agent of a sharded deployment routes its intents,
	// reads, votes and its decisions and notices to the shard that owns
	// a board as it does to the default one.
	p := strings.TrimSuffix(s.APIGroup(), ".api") // the prefix, defaulted
	for _, list := range []*[]string{&pub, &sub} {
		for _, subj := range *list {
			if rest, ok := strings.CutPrefix(subj, s.APIGroup()); ok && !strings.HasPrefix(rest, ".") {
				continue
			}
			if rest, ok := strings.CutPrefix(subj, p+"."); ok && !strings.HasPrefix(rest, "cluster.") {
				*list = append(*list, p+".*."+rest)
			}
		}
	}
	if slices.Contains(roles, RoleAdmin) {
		pub = append(pub, s.API(intents.APIShardRelease), s.API(intents.APIShardAdopt), p+".*.api."+intents.APIShardRelease,
			p+".*.api."+intents.APIShardAdopt)
	}
	pub = append(pub, s.API(intents.APIShardInfo), p+".*.api."+intents.APIShardInfo)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

// Users are the server users of the registry's agents, and the
// coordinator's own (coordinator, a public user nkey), which may do
// anything.
func (r *Registry) Users(prefix, coordinator string) []*server.NkeyUser {
	users := []*server.NkeyUser{{Nkey: coordinator}}
	for _, name := range slices.Sorted(maps.Keys(r.Agents)) {
		a := r.Agents[name]
		users = append(users, &server.NkeyUser{Nkey: a.Nkey, Permissions: Permissions(prefix, name, a.Roles)})
	}
	return users
}

// SeedPath is where `coagent agents add` writes an agent's seed, under
// the data directory.
func SeedPath(data, agent string) string { return filepath.Join(data, "agents", agent+".nk") }

// RegistryPath is the registry's file under the data directory.
func RegistryPath(data string) string { return filepath.Join(data, "agents.json") }

// RoleFor returns the role that would let agent publish (publish true) or
// subscribe to subject under prefix, when agent's roles do not: what a
// command refused by the server tells its user to use (an --nkey of an
// agent with that role). It returns "" if no role does, or if the roles
// given already do (the refusal is then of something else).
func RoleFor(prefix, agent string, roles []string, subject string, publish bool) string {
	allowed := func(p *server.Permissions) bool {
		sp := p.Subscribe
		if publish {
			sp = p.Publish
		}
		return slices.ContainsFunc(sp.Allow, func(filter string) bool { return server.SubjectMatchesFilter(subject, filter) })
	}
	if allowed(Permissions(prefix, agent, roles)) {
		return ""
	}
	for _, role := range []string{RoleArbiter, RoleObserver, RoleAdmin} { // the least power first
		if allowed(Permissions(prefix, agent, append(slices.Clone(roles), role))) {
			return role
		}
	}
	return ""
}
