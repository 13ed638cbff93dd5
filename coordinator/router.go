package coordinator

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Every coordinator of a sharded deployment routes: a submit whose boards
// another shard owns, as far as this shard's log knows (the boards it
// released, and, on a shard other than the default one, every board it
// did not adopt, which the default shard knows more of), is sent on to
// that shard's submit subject with the request's own reply subject, so
// the owner answers the client directly and, under auth, knows it by its
// inbox as if it had asked itself. A client that knows nothing of shards
// (the nats CLI, nats.js) keeps sending to coagent.api.submit.<agent>.
// A board moved twice is found by following the shards' pointers, one
// hop each; HeaderHops bounds the hops, since a board in the middle of a
// move is owned by neither shard for a moment, and the last coordinator
// decides the intent itself: out_of_scope, naming the owner.

// HeaderHops counts the coordinators a submit was routed through.
const HeaderHops = "Coagent-Hops"

// maxHops bounds them: a board moved this many times since the default
// shard gave it away is still found from there; a submit bouncing
// between the two shards of a move in progress stops there.
const maxHops = 8

// routing is what the API's goroutines route by: this shard's name, the
// deployment's subjects (the default shard's), and the owner of each
// board this shard's log names. The loop replaces it after each board
// event; nil while this is the default shard and never gave a board away,
// which routes nothing and costs a submit nothing.
type routing struct {
	shard  string
	base   intents.Subjects
	owners map[string]string
}

// owner is the shard that owns board, as far as r knows.
func (r *routing) owner(board string) string {
	if o, ok := r.owners[board]; ok {
		return o
	}
	return intents.DefaultShard
}

// target is the one other shard that owns the boards of paths, "" when
// they are this shard's (or there are none), and, when they are of two or
// more shards, "" and each board with its owner, for a refusal.
func (r *routing) target(paths []string) (to string, mixed []string) {
	owners := map[string]string{}
	var parts []string
	for _, p := range paths {
		b := intents.Board(p)
		if _, seen := owners[b]; seen {
			continue
		}
		owners[b] = r.owner(b)
		parts = append(parts, b+" (shard "+owners[b]+")")
		if to == "" {
			to = owners[b]
		} else if to != owners[b] {
			mixed = parts
		}
	}
	if mixed != nil {
		// Every board is named, not just those seen up to the second shard.
		return "", parts
	}
	if to == r.shard {
		return "", nil
	}
	return to, nil
}

// involved says whether this shard owns a board of paths.
func (r *routing) involved(paths []string) bool {
	for _, p := range paths {
		if r.owner(intents.Board(p)) == r.shard {
			return true
		}
	}
	return false
}

// hops is how many coordinators sent a request on so far, and whether
// it may go one more.
func hops(h micro.Headers) (int, bool) {
	n, _ := strconv.Atoi(h.Get(HeaderHops))
	return n, n < maxHops
}

// setRouting makes the API route by what the engine's log says of boards
// now. Called on the loop.
func (s *Service) setRouting() {
	e := s.core.Engine()
	owners := e.Owners()
	if len(owners) == 0 && e.Shard() == intents.DefaultShard {
		s.routing.Store(nil)
		return
	}
	base := s.subj
	if e.Shard() != intents.DefaultShard {
		base = intents.Subjects{Prefix: strings.TrimSuffix(s.opts.Prefix, "."+e.Shard())}
	}
	s.routing.Store(&routing{shard: e.Shard(), base: base, owners: owners})
}

// shards are the shards r knows of: the default one, this one, and
// every one its log names, sorted.
func (r *routing) shards() []string {
	set := map[string]bool{intents.DefaultShard: true, r.shard: true}
	for _, o := range r.owners {
		set[o] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// HeaderRing is the shards a request that names no board goes round,
// in order, the first the coordinator that sent it round; a coordinator
// that does not know it adds the shards it knows of and the ring lacks,
// sends it to the one after itself, and the last one answers.
const HeaderRing = "Coagent-Ring"

// around sends req's body on to the next shard of its ring (made here if
// it has none), at the subject of that shard's subjects that subject
// makes, and says whether it did.
func (s *Service) around(r *routing, h micro.Headers, reply string, data []byte, subject func(intents.Subjects) string) bool {
	var ring []string
	if v := h.Get(HeaderRing); v != "" {
		ring = strings.Split(v, ",")
		// The ring names subjects this coordinator publishes on: a name
		// that is no shard's is the sender's, and the request is answered
		// here.
		if slices.ContainsFunc(ring, func(sh string) bool { return sh != intents.DefaultShard && intents.CheckShard(sh) != nil }) {
			return false
		}
		// A shard this one knows of and the ring's first did not (a
		// board this one gave away) goes round too, last.
		for _, sh := range r.shards() {
			if !slices.Contains(ring, sh) {
				ring = append(ring, sh)
			}
		}
	} else {
		all := r.shards()
		i := slices.Index(all, r.shard)
		ring = append(all[i:], all[:i]...)
	}
	at := slices.Index(ring, r.shard)
	if at < 0 || at+1 >= len(ring) {
		return false
	}
	to := ring[at+1]
	if !s.sendOn(subject(r.base.Shard(to)), reply, h, data, func(m nats.Header) { m.Set(HeaderRing, strings.Join(ring, ",")) }) {
		return false
	}
	s.metrics.routed(to)
	return true
}

// forwardTxn sends on, called on the loop, a commit, abort or renew of a
// transaction (or a task claim's lease) this shard does not know: it may
// name no path to route it by, so it goes round the shards until one
// knows it; the last one asked decides it (refused, as a transaction no
// shard knows). It says whether it sent the submit on.
func (s *Service) forwardTxn(sub *submit) bool {
	r := s.routing.Load()
	if r == nil || sub.txn == "" || s.core.Engine().KnowsTxn(sub.txn) {
		return false
	}
	return s.around(r, sub.req.Headers(), sub.req.Reply(), sub.req.Data(), func(subj intents.Subjects) string { return subj.Submit(sub.agent) })
}

// forwardDecisionGet sends a decision.get this shard has no record for
// on to the next shard of the ring, and says whether it did: an intent's
// id names no board, and the shard that decided it may be any.
func (s *Service) forwardDecisionGet(req micro.Request) bool {
	r := s.routing.Load()
	if r == nil || req.Reply() == "" {
		return false
	}
	return s.around(r, req.Headers(), req.Reply(), req.Data(), func(subj intents.Subjects) string { return subj.API(intents.APIDecisionGet) })
}

// forwardRead sends a state.get on to the shard that owns the boards of
// its paths, and says whether it did, or answered: paths of two shards'
// boards are refused, naming them, since no one shard can answer them at
// one revision (the SDK's Read asks each shard and says each one's rev).
func (s *Service) forwardRead(req micro.Request) bool {
	var body struct {
		Paths []string `json:"paths"`
	}
	if s.routing.Load() == nil || json.Unmarshal(req.Data(), &body) != nil || len(body.Paths) == 0 {
		return false
	}
	return s.forwardByPaths(req, intents.APIStateGet, body.Paths)
}

// forwardLogQuery sends a log.query of a path of another shard's board
// on to that shard: the log of the board's changes is its log.
func (s *Service) forwardLogQuery(req micro.Request) bool {
	var body struct {
		Path string `json:"path"`
	}
	if s.routing.Load() == nil || json.Unmarshal(req.Data(), &body) != nil || body.Path == "" {
		return false
	}
	return s.forwardByPaths(req, intents.APILogQuery, []string{body.Path})
}

// forwardByPaths sends req on to endpoint of the shard that owns the
// boards of paths, when that is another one, and says whether it did, or
// answered the refusal of paths of two shards' boards.
func (s *Service) forwardByPaths(req micro.Request, endpoint string, paths []string) bool {
	r := s.routing.Load()
	if r == nil || req.Reply() == "" || slices.Contains(paths, "") {
		return false // nowhere to answer, or the whole tree: this shard's part of it
	}
	n, ok := hops(req.Headers())
	if !ok {
		return false
	}
	to, mixed := r.target(paths)
	switch {
	case mixed != nil:
		replyError(req, intents.ReasonOutOfScope, "%s: the paths are of %s; a read is of one shard's boards: ask each shard (--shard), or read through the SDK, which does",
			endpoint, strings.Join(mixed, " and "))
		return true
	case to == "":
		return false
	}
	return s.sendOn(r.base.Shard(to).API(endpoint), req.Reply(), req.Headers(), req.Data(),
		func(m nats.Header) { m.Set(HeaderHops, strconv.Itoa(n+1)) })
}

// sendOn publishes a request's body and headers to subject with its own
// reply subject, so that whoever answers there answers the client, and
// with set's header changes.
func (s *Service) sendOn(subject, reply string, h micro.Headers, data []byte, set func(nats.Header)) bool {
	m := &nats.Msg{Subject: subject, Reply: reply, Data: data, Header: nats.Header{}}
	for k, v := range h {
		m.Header[k] = v
	}
	set(m.Header)
	return s.nc.PublishMsg(m) == nil
}

// forward sends a submit on to the shard that owns its boards, and says
// whether it did; else it returns the transaction a commit, abort or
// renew names, for the loop to send round the shards if this one does not
// know it (forwardTxn). An intent of two shards' boards is decided here
// if one of them is this shard's (a cross-shard apply, coordinated here),
// else where its first board is.
func (s *Service) forward(req micro.Request, agent, lane string) (sent bool, txn string) {
	r := s.routing.Load()
	if r == nil || req.Reply() == "" {
		return false, ""
	}
	n, ok := hops(req.Headers())
	var in struct {
		Kind   intents.Kind            `json:"kind"`
		Txn    string                  `json:"txn"`
		Reads  []struct{ Path string } `json:"reads"`
		Writes []struct{ Path string } `json:"writes"`
	}
	if !ok || json.Unmarshal(req.Data(), &in) != nil {
		return false, ""
	}
	if in.Kind.Transactional() {
		txn = in.Txn
	}
	paths := make([]string, 0, 1+len(in.Writes)+len(in.Reads))
	if lane != "" {
		paths = append(paths, lane)
	}
	for _, w := range in.Writes {
		paths = append(paths, w.Path)
	}
	for _, rd := range in.Reads {
		paths = append(paths, rd.Path)
	}
	to, mixed := r.target(paths)
	if mixed != nil && !r.involved(paths) {
		// A cross-shard intent is coordinated by a shard of its boards:
		// the first one's.
		to = r.owner(intents.Board(paths[0]))
	}
	if to == "" {
		return false, txn
	}
	if !s.sendOn(r.base.Shard(to).Submit(agent), req.Reply(), req.Headers(), req.Data(),
		func(m nats.Header) { m.Set(HeaderHops, strconv.Itoa(n+1)) }) {
		s.log.Warn("a submit for another shard was not sent on; deciding it here", "shard", to)
		return false, txn
	}
	s.metrics.routed(to)
	return true, ""
}
