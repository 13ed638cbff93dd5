package eventlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

var codecRewriteSeeds = flag.Bool("codec-seeds", false,
	"rewrite the checked-in FuzzDecodeEvent seeds from the codec fixtures")

// codecSeedDir holds the fuzz seeds, which double as golden files: the
// encoding of the fixtures named in codecSeeds must not change silently.
const codecSeedDir = "testdata/fuzz/FuzzDecodeEvent"

var codecSeeds = []string{"intent", "decision", "change", "grant", "release", "escalate", "notice", "everything",
	"resolve", "rules", "nine-payloads", "intent-traced", "grant-traced", "rules-traced", "shadow", "rules-shadow", "board-release", "board-join", "xshard-begin", "xshard-commit"}

type codecCase struct {
	name string
	ev   *intents.Event
}

func codecU64(v uint64) *uint64 { return &v }

func codecTimePtr(t time.Time) *time.Time { return &t }

// codecBase is the fixtures' clock: a fixed instant with every nanosecond
// digit set.
var codecBase = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

func codecID(n byte) ulid.ULID {
	var id ulid.ULID
	for i := range id {
		id[i] = n + byte(i)
	}
	return id
}

// codecFullIntent sets every field of an intent.
func codecFullIntent() *intents.Intent {
	return &intents.Intent{
		ID:     "01JPA3Z4Y5X6W7V8T9S0R1Q2P3",
		Agent:  "writer-1",
		Kind:   intents.KindPropose,
		Txn:    "t-7",
		Fence:  42,
		Action: "draft the introduction",
		Reads: []intents.Read{
			{Path: "report.outline", Version: codecU64(3)},
			{Path: "report.style"},
			{Path: "report.zero", Version: codecU64(0)},
		},
		Writes: []intents.Write{
			{Path: "report.sections.intro", Op: intents.OpSet, Value: json.RawMessage(`{"text":"Once upon a time"}`)},
			{Path: "report.old", Op: intents.OpDelete},
			{Path: "report.nulled", Op: intents.OpSet, Value: json.RawMessage(`null`)},
			{Path: "report.log", Op: intents.OpAppend, Value: json.RawMessage(`"line"`)},
			{Path: "report.count", Op: intents.OpIncr, Value: json.RawMessage(`2`)},
			{Path: "report.meta", Op: intents.OpMerge, Value: json.RawMessage(`{"a":1,"b":null}`)},
		},
		Pre:        []string{`len(report.outline) > 0`, `report.style == "plain"`},
		Post:       []string{`report.count >= 2`},
		Priority:   -5,
		LeaseMS:    15000,
		OnConflict: intents.OnConflictWait,
		WaitMS:     60000,
		Meta:       json.RawMessage(`{"trace":"abc"}`),
	}
}

func codecFullDecision() *intents.Decision {
	return &intents.Decision{
		Intent:       "01JPA3Z4Y5X6W7V8T9S0R1Q2P3",
		Agent:        "writer-1",
		Outcome:      intents.OutcomeRejected,
		Reason:       intents.ReasonConflict,
		Detail:       "report.sections.intro is written by t-3",
		Txn:          "t-7",
		Fence:        42,
		LeaseExpires: codecTimePtr(codecBase.Add(15 * time.Second)),
		Conflicts: []intents.Conflict{
			{Path: "report.sections.intro", Kind: intents.ConflictWriteWrite, WithTxn: "t-3", WithAgent: "writer-2"},
			{Path: "report.outline", Kind: intents.ConflictStale},
		},
		Versions:   map[string]uint64{"report.sections.intro": 7, "report.outline": 3, "a": 0},
		Rev:        1234567,
		Retryable:  true,
		MergedWith: []string{"01JPA3Z4Y5X6W7V8T9S0R1Q2P4", "01JPA3Z4Y5X6W7V8T9S0R1Q2P5"},
		Duplicate:  true,
	}
}

func codecFullChange() *intents.Change {
	return &intents.Change{
		Writes: []intents.Applied{
			{Path: "report.sections.intro", Op: intents.OpSet, Value: json.RawMessage(`{"text":"Once upon a time"}`), OldVersion: 6, NewVersion: 7},
			{Path: "report.old", Op: intents.OpDelete, OldVersion: 2, NewVersion: 3},
			{Path: "report.nulled", Op: intents.OpSet, Value: json.RawMessage(`null`), NewVersion: 1},
			{Path: "report.count", Op: intents.OpIncr, Value: json.RawMessage(`2`), OldVersion: math.MaxUint64 - 1, NewVersion: math.MaxUint64},
		},
		MergedWith: []string{"01JPA3Z4Y5X6W7V8T9S0R1Q2P4"},
	}
}

func codecFullGrant() *intents.Grant {
	return &intents.Grant{
		Txn:     "t-7",
		Agent:   "writer-1",
		Fence:   42,
		LeaseMS: 15000,
		Expires: codecBase.Add(15 * time.Second),
		Reads:   []intents.Read{{Path: "report.outline", Version: codecU64(3)}, {Path: "report.style"}},
		Propose: codecFullIntent(),
	}
}

func codecFullWait() *intents.Wait {
	return &intents.Wait{
		Intent:   codecFullIntent(),
		Deadline: codecBase.Add(time.Minute),
		Conflicts: []intents.Conflict{
			{Path: "report.sections.intro", Kind: intents.ConflictReadWrite, WithTxn: "t-3", WithAgent: "writer-2"},
		},
	}
}

func codecFullNotice() *intents.Notice {
	return &intents.Notice{
		Kind:   intents.NoticeWaiting,
		Txn:    "t-3",
		Intent: "01JPA3Z4Y5X6W7V8T9S0R1Q2P3",
		From:   "writer-1",
		Detail: "an intent waits on your transaction",
	}
}

// codecRulesFile is a rules file as coordinator/rules reads it.
const codecRulesFile = `{"agents":{"alice":{"roles":["coder"]}},"rules":[{"pattern":"tasks.*.status",` +
	`"transitions":{"PENDING":["CLAIMED"],"CLAIMED":["DONE"]},"initial":["PENDING"],"writers":["role:coder"]},` +
	`{"pattern":"queue.**","on_conflict":"wait"}],"invariants":[{"name":"wip","expr":"len(state.queue) <= 10"}],` +
	`"quotas":{"role:coder":{"intents_per_second":10,"burst":5}}}`

// codecRules returns a Rules payload for file, with its hash.
func codecRules(file json.RawMessage, source string) *intents.Rules {
	sum := sha256.Sum256(file)
	return &intents.Rules{File: file, Hash: hex.EncodeToString(sum[:]), Source: source}
}

func codecFullResolution() *intents.Resolution {
	return &intents.Resolution{
		Escalation:  "01JPA3Z4Y5X6W7V8T9S0R1Q2P3",
		Arbiter:     "arbiter-1",
		Winners:     []string{"01JPA3Z4Y5X6W7V8T9S0R1Q2P3"},
		Losers:      []string{"01JPA3Z4Y5X6W7V8T9S0R1Q2P4", "01JPA3Z4Y5X6W7V8T9S0R1Q2P5"},
		Replacement: codecFullIntent(),
		Rationale:   "the merge keeps both introductions",
	}
}

// codecFixtures returns hand-built events, new on every call: every type
// with every field set, minimal ones, and odd ones.
func codecFixtures() []codecCase {
	env := func(seq uint64, typ intents.EventType) *intents.Event {
		return &intents.Event{Seq: seq, ID: codecID(byte(seq)), Time: codecBase, Type: typ,
			Agent: "writer-1", Intent: "01JPA3Z4Y5X6W7V8T9S0R1Q2P3", Txn: "t-7"}
	}
	var cs []codecCase
	add := func(name string, ev *intents.Event) { cs = append(cs, codecCase{name, ev}) }

	ev := env(1, intents.EventIntent)
	ev.Received = &intents.Received{Intent: codecFullIntent(), Raw: []byte(`{"id":"x"}`), Error: "raw and error beside a decoded intent"}
	add("intent", ev)

	ev = env(2, intents.EventIntent)
	ev.Received = &intents.Received{Raw: []byte("{not json"), Error: "invalid: unexpected end of input"}
	add("intent-invalid", ev)

	ev = env(3, intents.EventDecision)
	ev.Decision = codecFullDecision()
	add("decision", ev)

	// Traced: the trace id, and a traceparent that could not be used.
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	ev = env(1, intents.EventIntent)
	ev.Trace = trace
	ev.Received = &intents.Received{Intent: codecFullIntent(),
		TraceError: `header traceparent = "00-zz": not a W3C traceparent: 5 characters, a traceparent has 55 (version-traceid-parentid-flags)`}
	add("intent-traced", ev)
	ev = env(4, intents.EventIntent)
	ev.Received = &intents.Received{Raw: []byte(`{"meta":{"traceparent":1}}`), Error: "invalid", TraceError: "meta.traceparent = 1: not a string"}
	add("intent-trace-error-only", ev)
	ev = env(5, intents.EventGrant)
	ev.Trace = trace
	ev.Grant = &intents.Grant{Txn: "t-7", Agent: "writer-1", Fence: 3, LeaseMS: 30000, Expires: codecBase.Add(30 * time.Second),
		Propose: &intents.Intent{ID: "01JPA3Z4Y5X6W7V8T9S0R1Q2P3", Agent: "writer-1", Kind: intents.KindPropose}}
	add("grant-traced", ev)
	ev = env(6, intents.EventRules)
	ev.Trace = trace // no event the engine writes, but the bits combine
	ev.Rules = &intents.Rules{File: []byte(`{}`), Hash: "h", Source: "api"}
	add("rules-traced", ev)

	ev = env(4, intents.EventChange)
	ev.Change = codecFullChange()
	add("change", ev)

	ev = env(5, intents.EventGrant)
	ev.Grant = codecFullGrant()
	add("grant", ev)

	ev = env(6, intents.EventRenew)
	ev.Grant = &intents.Grant{Txn: "t-7", Agent: "writer-1", Fence: 42, LeaseMS: 30000, Expires: codecBase.Add(30 * time.Second)}
	add("renew", ev)

	ev = env(7, intents.EventExpire)
	ev.Release = &intents.Release{Txn: "t-7", Agent: "writer-1", Cause: intents.CauseExpired}
	add("expire", ev)

	ev = env(8, intents.EventRelease)
	ev.Release = &intents.Release{Txn: "t-7", Agent: "writer-1", Cause: intents.CauseCommitted}
	add("release", ev)

	ev = env(9, intents.EventWait)
	ev.Wait = codecFullWait()
	add("wait", ev)

	ev = env(10, intents.EventEscalate)
	ev.Wait = codecFullWait()
	ev.Wait.Conflicts[0].Kind = intents.ConflictWriteRead
	add("escalate", ev)

	ev = env(11, intents.EventNotice)
	ev.Notice = codecFullNotice()
	add("notice", ev)

	ev = env(math.MaxUint64, intents.EventDecision)
	ev.Received = &intents.Received{Intent: codecFullIntent(), Raw: []byte{0, 1, 0xff}, Error: "e"}
	ev.Decision = codecFullDecision()
	ev.Change = codecFullChange()
	ev.Grant = codecFullGrant()
	ev.Release = &intents.Release{Txn: "t-7", Agent: "writer-1", Cause: intents.CausePreempted}
	ev.Wait = codecFullWait()
	ev.Notice = codecFullNotice()
	add("everything", ev) // a golden seed from before Resolution: leave it as it is

	ev = env(12, intents.EventResolve)
	ev.Resolution = codecFullResolution()
	add("resolve", ev)

	ev = env(13, intents.EventResolve)
	ev.Resolution = &intents.Resolution{Escalation: "01JPA3Z4Y5X6W7V8T9S0R1Q2P3", Arbiter: "arbiter-1",
		Losers: []string{"01JPA3Z4Y5X6W7V8T9S0R1Q2P3"}, Rationale: "rejected: the holder has priority"}
	add("resolve-losers-only", ev)

	// Every payload, Resolution included: all eight mask bits.
	ev = env(math.MaxUint64-1, intents.EventResolve)
	withEightPayloads(ev)
	add("all-payloads", ev)

	// The rules type, whose payload takes the second mask byte: SchemaVersion2.
	ev = env(14, intents.EventRules)
	ev.Agent, ev.Intent, ev.Txn = "", "", ""
	ev.Rules = codecRules(json.RawMessage(codecRulesFile), "/etc/coagent/rules.json")
	add("rules", ev)

	ev = env(15, intents.EventRules)
	ev.Agent, ev.Intent, ev.Txn = "", "", ""
	ev.Rules = codecRules(nil, "api") // the rules dropped
	add("rules-no-file", ev)

	ev = env(16, intents.EventRules)
	ev.Rules = codecRules(json.RawMessage{}, "api") // empty but not nil
	add("rules-empty-file", ev)

	// Every payload, Rules included: both mask bytes.
	ev = env(math.MaxUint64-2, intents.EventRules)
	withEightPayloads(ev)
	ev.Rules = codecRules(json.RawMessage(codecRulesFile), "api")
	add("nine-payloads", ev)

	// An approval case's escalate event carries its gate, and a vote its
	// payload: bits 4 and 5 of the second mask byte.
	ev = env(17, intents.EventEscalate)
	ev.Wait = codecFullWait()
	ev.Wait.Conflicts = []intents.Conflict{{Path: "deploy.web", Kind: intents.ConflictApproval}}
	ev.Wait.Gate = &intents.Gate{Rule: 3, Path: "deploy.web", By: []string{"role:lead", "ana"}, Quorum: 2, Fallback: intents.FallbackReject}
	add("approval-case", ev)

	ev = env(19, intents.EventEscalate)
	ev.Wait = codecFullWait()
	ev.Wait.Gate = &intents.Gate{Path: "tasks.t1.status", By: []string{"lead"}, Quorum: 1, Fallback: intents.FallbackReject,
		Review: intents.ReasonIllegalTransition, Refusal: "tasks.t1.status: DONE → PENDING is not a transition of rules[0]"}
	add("review-case", ev)

	ev = env(20, intents.EventEscalate)
	ev.Wait = codecFullWait()
	ev.Wait.Gate = &intents.Gate{Path: "plan.budget", Quorum: 1, Fallback: intents.FallbackReject,
		Ask: &intents.Ask{Question: "What budget?", Schema: json.RawMessage(`{"type":"number"}`), By: []string{"role:lead"}, TimeoutMS: 60000}}
	add("input-case", ev)

	ev = env(21, intents.EventVote)
	ev.Vote = &intents.Vote{Case: "01JPA3Z4Y5X6W7V8T9S0R1Q2P3", Agent: "ana", Verdict: intents.VerdictAnswer, Answer: json.RawMessage(`12000`)}
	add("answer", ev)

	ev = env(22, intents.EventEscalate)
	ev.Wait = codecFullWait()
	ev.Wait.Panel = &intents.Panel{Quorum: 2, Of: "role:reviewer"}
	add("panel-case", ev)

	ev = env(23, intents.EventVote)
	ev.Vote = &intents.Vote{Case: "01JPA3Z4Y5X6W7V8T9S0R1Q2P3", Agent: "rev-1", Verdict: intents.VerdictResolve, Rationale: "holder first",
		Resolution: codecFullResolution()}
	add("panel-vote", ev)

	ev = env(18, intents.EventVote)
	ev.Vote = &intents.Vote{Case: "01JPA3Z4Y5X6W7V8T9S0R1Q2P3", Agent: "ana", Verdict: intents.VerdictDeny, Rationale: "not before the freeze ends"}
	add("vote", ev)

	// A shadow event and a rules event with a shadow file: the third mask
	// byte.
	ev = env(24, intents.EventShadow)
	ev.Shadow = &intents.Shadow{Kind: intents.ShadowChange, Mode: intents.ModeWarn, Rule: "rules[2]", Decided: "applied",
		WouldBe: intents.OutcomeRejected, Reason: intents.ReasonUnauthorized, Detail: "agent w2 may not write docs.a: rules[2] (docs.**) lets only w1 write there"}
	add("shadow", ev)

	ev = env(25, intents.EventShadow)
	ev.Shadow = &intents.Shadow{Kind: intents.ShadowError, Mode: intents.ModeAudit, Decided: "rejected:conflict", Detail: "the expression budget ran out"}
	add("shadow-error", ev)

	ev = env(26, intents.EventRules)
	ev.Rules = codecRules(json.RawMessage(codecRulesFile), "api")
	ev.Rules.Shadow, ev.Rules.ShadowHash = json.RawMessage(`{"rules":[{"pattern":"docs.**","writers":["w1"]}]}`), "abc"
	ev.Rules.ShadowMode = intents.ModeWarn
	add("rules-shadow", ev)

	// A board leaving the shard with its state, and a shard joining: the
	// third mask byte's bit 2.
	ev = env(27, intents.EventBoard)
	ev.Handoff = &intents.Handoff{Kind: intents.HandoffRelease, Board: "report", Shard: "s2",
		Nodes: json.RawMessage(`[{"path":"report","kind":"object","version":3,"mod_rev":9},{"path":"report.s1","kind":"leaf","value":"draft","version":2,"mod_rev":9}]`)}
	add("board-release", ev)

	ev = env(1, intents.EventBoard)
	ev.Handoff = &intents.Handoff{Kind: intents.HandoffJoin, Shard: "s2"}
	add("board-join", ev)

	ev = env(28, intents.EventBoard)
	ev.Handoff = &intents.Handoff{Kind: intents.HandoffAdopt, Board: "report", Shard: "default", Seq: 27,
		Nodes: json.RawMessage(`[{"path":"report","kind":"absent","version":1,"mod_rev":2}]`)}
	add("board-adopt", ev)

	// A cross-shard apply's steps: the third mask byte's bit 3.
	ev = env(29, intents.EventXShard)
	ev.XShard = &intents.XShard{Phase: intents.XShardBegin, Intent: "01JDQ9000000000000000000X1", Coord: "default",
		Parts: []intents.XPart{
			{Shard: "default", Intent: &intents.Intent{ID: "01JDQ9000000000000000000X1", Agent: "w1", Kind: intents.KindApply,
				Writes: []intents.Write{{Path: "tasks.t1.status", Op: intents.OpSet, Value: json.RawMessage(`"done"`)}}}},
			{Shard: "s2", Intent: &intents.Intent{ID: "01JDQ9000000000000000000X1", Agent: "w1", Kind: intents.KindApply,
				Writes: []intents.Write{{Path: "report.done", Op: intents.OpIncr}}, Pre: []string{"state.report.open == true"}}},
		}}
	add("xshard-begin", ev)

	ev = env(30, intents.EventXShard)
	ev.XShard = &intents.XShard{Phase: intents.XShardCommit, Intent: "01JDQ9000000000000000000X1", Coord: "default",
		Decision: &intents.Decision{Intent: "01JDQ9000000000000000000X1", Agent: "w1", Outcome: intents.OutcomeApplied, Rev: 30,
			Versions: map[string]uint64{"tasks.t1.status": 4}}}
	add("xshard-commit", ev)

	// Minimal: only the type, then each payload present but empty.
	for _, typ := range intents.EventTypes {
		add("minimal-"+string(typ), &intents.Event{Type: typ})
	}
	add("empty-payloads", &intents.Event{Type: intents.EventNotice,
		Received: &intents.Received{}, Decision: &intents.Decision{}, Change: &intents.Change{},
		Grant: &intents.Grant{}, Release: &intents.Release{}, Wait: &intents.Wait{}, Notice: &intents.Notice{},
		Resolution: &intents.Resolution{}, Rules: &intents.Rules{}})
	add("empty-intents", &intents.Event{Type: intents.EventWait,
		Received:   &intents.Received{Intent: &intents.Intent{}},
		Grant:      &intents.Grant{Propose: &intents.Intent{}},
		Wait:       &intents.Wait{Intent: &intents.Intent{}},
		Resolution: &intents.Resolution{Replacement: &intents.Intent{}}})

	// Empty but not nil: every slice, map and raw value present with nothing in it.
	in := &intents.Intent{Reads: []intents.Read{}, Writes: []intents.Write{{Path: "a", Op: intents.OpSet, Value: json.RawMessage{}}},
		Pre: []string{}, Post: []string{}, Meta: json.RawMessage{}}
	add("empty-not-nil", &intents.Event{Type: intents.EventDecision,
		Received: &intents.Received{Intent: in, Raw: []byte{}},
		Decision: &intents.Decision{Conflicts: []intents.Conflict{}, Versions: map[string]uint64{}, MergedWith: []string{},
			LeaseExpires: &time.Time{}},
		Change:     &intents.Change{Writes: []intents.Applied{{Value: json.RawMessage{}}}, MergedWith: []string{}},
		Grant:      &intents.Grant{Reads: []intents.Read{}},
		Wait:       &intents.Wait{Conflicts: []intents.Conflict{}},
		Resolution: &intents.Resolution{Winners: []string{}, Losers: []string{}, Replacement: in}})
	add("null-values", &intents.Event{Type: intents.EventChange,
		Received: &intents.Received{Intent: &intents.Intent{Meta: json.RawMessage("null"),
			Writes: []intents.Write{{Path: "a", Op: intents.OpSet, Value: json.RawMessage("null")}}}},
		Change: &intents.Change{Writes: []intents.Applied{{Path: "a", Op: intents.OpSet, Value: json.RawMessage("null")}}}})

	// Odd: values outside the tables, times outside the int64-nanosecond
	// range and in other zones, extreme integers, bytes that are not UTF-8.
	east := time.FixedZone("UTC+13:45", 13*3600+45*60)
	add("odd", &intents.Event{Seq: 1 << 63, ID: codecID(0xf0), Type: intents.EventGrant,
		Time:  time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), // one nanosecond after the zero time
		Agent: "\xff\xfe\x00", Intent: strings.Repeat("é", 300), Txn: "世界",
		Decision: &intents.Decision{Outcome: "pondered", Reason: "whim", LeaseExpires: codecTimePtr(time.Date(9999, 12, 31, 23, 59, 59, 999999999, east)),
			Conflicts: []intents.Conflict{{Kind: "sideways"}}, Versions: map[string]uint64{"": math.MaxUint64}},
		Grant: &intents.Grant{LeaseMS: math.MinInt64, Expires: time.Date(1600, 2, 29, 12, 0, 0, 5, east),
			Propose: &intents.Intent{Kind: "ponder", OnConflict: "sulk", Priority: math.MaxInt64, WaitMS: math.MinInt64,
				Writes: []intents.Write{{Op: "scramble"}}}},
		Release: &intents.Release{Cause: "boredom"},
		Wait:    &intents.Wait{Deadline: time.Unix(0, math.MinInt64)},
		Notice:  &intents.Notice{Kind: "rumour"},
		Change:  &intents.Change{Writes: []intents.Applied{{Op: "rot13"}}},
		Resolution: &intents.Resolution{Escalation: "\xff", Arbiter: strings.Repeat("仲裁", 100),
			Winners: []string{"", "\x00"}, Replacement: &intents.Intent{Kind: "decree", OnConflict: "shrug"}},
		Rules: &intents.Rules{File: []byte("\xff\x00 not JSON"), Hash: "not hex", Source: strings.Repeat("\xfe", 200)}})
	add("nanos-edges", &intents.Event{Type: intents.EventWait, Time: time.Unix(0, math.MaxInt64),
		Wait:  &intents.Wait{Deadline: time.Unix(0, math.MinInt64)},
		Grant: &intents.Grant{Expires: time.Unix(0, math.MinInt64).Add(-1)}})
	add("zoned", &intents.Event{Type: intents.EventGrant, Time: codecBase.In(east),
		Grant: &intents.Grant{Expires: codecBase.In(time.FixedZone("", -7*3600))}})
	return cs
}

// codecNormalize puts every time of ev in UTC without a monotonic reading,
// in place: the form in which DecodeEvent returns times. Only times change;
// nil and empty slices, maps and raw values are kept apart by the codec, so
// the test keeps them apart too.
func codecNormalize(ev *intents.Event) *intents.Event {
	ev.Time = ev.Time.UTC()
	if d := ev.Decision; d != nil {
		codecNormalizeDecision(d)
	}
	if g := ev.Grant; g != nil {
		g.Expires = g.Expires.UTC()
	}
	if w := ev.Wait; w != nil {
		w.Deadline = w.Deadline.UTC()
	}
	return ev
}

func codecNormalizeDecision(d *intents.Decision) {
	if d.LeaseExpires != nil {
		t := d.LeaseExpires.UTC()
		d.LeaseExpires = &t
	}
}

// codecDiff describes how two events differ, for failure messages.
func codecDiff(got, want any) string {
	g, _ := json.MarshalIndent(got, "", "  ")
	w, _ := json.MarshalIndent(want, "", "  ")
	if bytes.Equal(g, w) {
		return fmt.Sprintf("same JSON, different Go values (nil vs empty? times?):\n got %#v\nwant %#v", got, want)
	}
	return fmt.Sprintf("got:\n%s\nwant:\n%s", g, w)
}

// codecRoundTrip checks one event: encoding is deterministic, decoding
// gives the normalized event back, and re-encoding gives the same bytes.
func codecRoundTrip(t *testing.T, name string, ev *intents.Event) {
	t.Helper()
	enc := AppendEvent(nil, ev)
	if again := AppendEvent([]byte("prefix"), ev); !bytes.Equal(again[6:], enc) || string(again[:6]) != "prefix" {
		t.Fatalf("%s: encoding twice (once after a prefix) differs", name)
	}
	got, err := DecodeEvent(enc)
	if err != nil {
		t.Fatalf("%s: DecodeEvent: %v", name, err)
	}
	want := codecNormalize(ev)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: round trip differs: %s", name, codecDiff(got, want))
	}
	if re := AppendEvent(nil, got); !bytes.Equal(re, enc) {
		t.Fatalf("%s: re-encoding the decoded event gives other bytes:\n% x\n% x", name, re, enc)
	}
	if ev.Decision != nil {
		dec := AppendDecision(nil, ev.Decision)
		d, err := DecodeDecision(dec)
		if err != nil {
			t.Fatalf("%s: DecodeDecision: %v", name, err)
		}
		if !reflect.DeepEqual(d, ev.Decision) {
			t.Fatalf("%s: decision round trip differs: %s", name, codecDiff(d, ev.Decision))
		}
	}
}

func TestCodecRoundTripFixtures(t *testing.T) {
	for _, c := range codecFixtures() {
		codecRoundTrip(t, c.name, c.ev)
	}
}

// codecGen makes random events. Strings include empty, long and non-UTF-8
// ones; enums are mostly known values; slices, maps and raw values are nil,
// empty or filled; times are zero, ordinary, in other zones or far off.
type codecGen struct{ r *rand.Rand }

func (g codecGen) str() string {
	switch g.r.IntN(10) {
	case 0, 1:
		return ""
	case 2:
		b := make([]byte, g.r.IntN(12))
		for i := range b {
			b[i] = byte(g.r.UintN(256))
		}
		return string(b)
	case 3:
		return strings.Repeat("xé", 60+g.r.IntN(100)) // lengths past one varint byte
	default:
		const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_-.é世"
		rs := []rune(alphabet)
		b := make([]rune, 1+g.r.IntN(24))
		for i := range b {
			b[i] = rs[g.r.IntN(len(rs))]
		}
		return string(b)
	}
}

func codecPick[T ~string](g codecGen, known []T) T {
	switch g.r.IntN(8) {
	case 0:
		return ""
	case 1:
		return T(g.str())
	default:
		return known[g.r.IntN(len(known))]
	}
}

func (g codecGen) u64() uint64 {
	switch g.r.IntN(4) {
	case 0:
		return 0
	case 1:
		return g.r.Uint64()
	default:
		return g.r.Uint64N(1000)
	}
}

func (g codecGen) i64() int64 {
	switch g.r.IntN(4) {
	case 0:
		return 0
	case 1:
		return int64(g.r.Uint64())
	default:
		return g.r.Int64N(200000) - 1000
	}
}

// n returns a length, or -1 for nil.
func (g codecGen) n() int {
	switch g.r.IntN(10) {
	case 0, 1:
		return -1
	case 2:
		return 0
	case 3:
		if g.r.IntN(20) == 0 {
			return 130 // a count past one varint byte
		}
		fallthrough
	default:
		return 1 + g.r.IntN(4)
	}
}

func codecSlice[T any](g codecGen, elem func() T) []T {
	n := g.n()
	if n < 0 {
		return nil
	}
	s := make([]T, n)
	for i := range s {
		s[i] = elem()
	}
	return s
}

func (g codecGen) raw() []byte {
	switch g.r.IntN(6) {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		return []byte("null")
	case 3:
		return []byte(strconv.Quote(g.str()))
	default:
		return []byte(fmt.Sprintf(`{"n":%d,"s":%q}`, g.r.Int64(), g.str()))
	}
}

func (g codecGen) time() time.Time {
	var t time.Time
	switch g.r.IntN(10) {
	case 0:
		return time.Time{}
	case 1:
		t = time.Unix(g.r.Int64N(1<<42)-1<<41, g.r.Int64N(1e9)) // mostly outside 1678–2262
	case 2:
		t = time.Unix(0, int64(g.r.Uint64()))
	default:
		t = codecBase.Add(time.Duration(g.r.Int64N(int64(1000 * time.Hour))))
	}
	if g.r.IntN(3) == 0 {
		t = t.In(time.FixedZone("z", (g.r.IntN(28)-14)*3600))
	}
	return t
}

func (g codecGen) reads() []intents.Read {
	return codecSlice(g, func() intents.Read {
		r := intents.Read{Path: g.str()}
		if g.r.IntN(2) == 0 {
			v := g.u64()
			r.Version = &v
		}
		return r
	})
}

func (g codecGen) conflicts() []intents.Conflict {
	kinds := []intents.ConflictKind{intents.ConflictWriteWrite, intents.ConflictReadWrite,
		intents.ConflictWriteRead, intents.ConflictStale}
	return codecSlice(g, func() intents.Conflict {
		return intents.Conflict{Path: g.str(), Kind: codecPick(g, kinds), WithTxn: g.str(), WithAgent: g.str()}
	})
}

func (g codecGen) strs() []string { return codecSlice(g, g.str) }

func (g codecGen) intent() *intents.Intent {
	if g.r.IntN(4) == 0 {
		return nil
	}
	return &intents.Intent{
		ID: g.str(), Agent: g.str(), Kind: codecPick(g, intents.Kinds), Txn: g.str(), Fence: g.u64(),
		Action: g.str(), Reads: g.reads(),
		Writes: codecSlice(g, func() intents.Write {
			return intents.Write{Path: g.str(), Op: codecPick(g, intents.Ops), Value: g.raw()}
		}),
		Pre: g.strs(), Post: g.strs(), Priority: g.i64(), LeaseMS: g.i64(),
		OnConflict: codecPick(g, []intents.OnConflict{intents.OnConflictReject, intents.OnConflictWait, intents.OnConflictEscalate}),
		WaitMS:     g.i64(), Meta: g.raw(),
	}
}

func (g codecGen) decision() *intents.Decision {
	d := &intents.Decision{
		Intent: g.str(), Agent: g.str(), Outcome: codecPick(g, intents.Outcomes), Reason: codecPick(g, intents.Reasons),
		Detail: g.str(), Txn: g.str(), Fence: g.u64(), Conflicts: g.conflicts(), Rev: g.u64(),
		Retryable: g.r.IntN(2) == 0, MergedWith: g.strs(), Duplicate: g.r.IntN(2) == 0,
	}
	if g.r.IntN(2) == 0 {
		t := g.time()
		d.LeaseExpires = &t
	}
	if n := g.n(); n >= 0 {
		d.Versions = make(map[string]uint64, n)
		for range n {
			d.Versions[g.str()] = g.u64()
		}
	}
	return d
}

func (g codecGen) event() *intents.Event {
	ev := &intents.Event{Seq: g.u64(), Time: g.time(), Type: intents.EventTypes[g.r.IntN(len(intents.EventTypes))],
		Agent: g.str(), Intent: g.str(), Txn: g.str()}
	for i := range ev.ID {
		ev.ID[i] = byte(g.r.UintN(256))
	}
	var mask, mask2, mask3 byte
	switch p := g.r.IntN(20); {
	case p == 0:
	case p < 5:
		mask = byte(g.r.UintN(256))
		mask2 = byte(g.r.UintN(mask2All + 1))
		mask3 = byte(g.r.UintN(mask3All + 1))
	default:
		switch ev.Type {
		case intents.EventRules:
			mask2 = hasRules
		case intents.EventVote:
			mask2 = hasVote
		case intents.EventShadow:
			mask3 = hasShadow
		case intents.EventBoard:
			mask3 = hasHandoff
		case intents.EventXShard:
			mask3 = hasXShard
		case intents.EventEscalate:
			mask2 = []byte{0, hasGate, hasPanel}[g.r.IntN(3)]
		}
		mask = map[intents.EventType]byte{
			intents.EventIntent: hasReceived, intents.EventDecision: hasDecision, intents.EventChange: hasChange,
			intents.EventGrant: hasGrant, intents.EventRenew: hasGrant, intents.EventExpire: hasRelease,
			intents.EventRelease: hasRelease, intents.EventWait: hasWait, intents.EventEscalate: hasWait,
			intents.EventNotice: hasNotice, intents.EventResolve: hasResolution,
		}[ev.Type]
	}
	if mask&hasReceived != 0 {
		ev.Received = &intents.Received{Intent: g.intent(), Raw: g.raw(), Error: g.str()}
	}
	if mask&hasDecision != 0 {
		ev.Decision = g.decision()
	}
	if mask&hasChange != 0 {
		ev.Change = &intents.Change{
			Writes: codecSlice(g, func() intents.Applied {
				return intents.Applied{Path: g.str(), Op: codecPick(g, intents.Ops), Value: g.raw(),
					OldVersion: g.u64(), NewVersion: g.u64()}
			}),
			MergedWith: g.strs(),
		}
	}
	if mask&hasGrant != 0 {
		ev.Grant = &intents.Grant{Txn: g.str(), Agent: g.str(), Fence: g.u64(), LeaseMS: g.i64(),
			Expires: g.time(), Reads: g.reads(), Propose: g.intent()}
	}
	if mask&hasRelease != 0 {
		ev.Release = &intents.Release{Txn: g.str(), Agent: g.str(), Cause: codecPick(g, []intents.ReleaseCause{
			intents.CauseCommitted, intents.CauseAborted, intents.CauseExpired, intents.CausePreempted})}
	}
	if mask&hasWait != 0 {
		ev.Wait = &intents.Wait{Intent: g.intent(), Deadline: g.time(), Conflicts: g.conflicts()}
	}
	if mask&hasNotice != 0 {
		ev.Notice = &intents.Notice{Kind: codecPick(g, []intents.NoticeKind{intents.NoticeWaiting,
			intents.NoticeLeaseExpiring, intents.NoticeLeaseExpired, intents.NoticeAssigned}),
			Txn: g.str(), Intent: g.str(), From: g.str(), Detail: g.str(), Fence: g.u64()}
	}
	if mask&hasResolution != 0 {
		ev.Resolution = &intents.Resolution{Escalation: g.str(), Arbiter: g.str(), Winners: g.strs(),
			Losers: g.strs(), Replacement: g.intent(), Rationale: g.str()}
	}
	if mask2&hasRules != 0 {
		ev.Rules = &intents.Rules{File: g.raw(), Hash: g.str(), Source: g.str()}
	}
	if mask3&hasShadow != 0 {
		ev.Shadow = &intents.Shadow{Kind: g.str(), Mode: g.str(), Rule: g.str(), Decided: g.str(),
			WouldBe: codecPick(g, []intents.Outcome{intents.OutcomeApplied, intents.OutcomeRejected, intents.OutcomeEscalated, "x"}),
			Reason:  codecPick(g, []intents.Reason{"", intents.ReasonConflict, "y"}), Detail: g.str()}
	}
	if mask3&hasHandoff != 0 {
		ev.Handoff = &intents.Handoff{Kind: g.str(), Board: g.str(), Shard: g.str(), Nodes: g.raw(), Seq: g.u64()}
	}
	if mask3&hasXShard != 0 {
		ev.XShard = &intents.XShard{Phase: g.str(), Intent: g.str(), Coord: g.str()}
		if g.r.IntN(2) == 0 {
			ev.XShard.Parts = []intents.XPart{{Shard: g.str()}, {Shard: g.str(), Intent: &intents.Intent{ID: g.str(), Kind: intents.KindApply}}}
		} else {
			ev.XShard.Decision = &intents.Decision{Intent: g.str(), Outcome: intents.OutcomeApplied, Rev: g.u64()}
		}
	}
	if ev.Rules != nil && mask3&hasRulesShadow != 0 {
		ev.Rules.Shadow, ev.Rules.ShadowHash, ev.Rules.ShadowMode = g.raw(), g.str(), g.str()
	}
	if mask2&hasVote != 0 {
		ev.Vote = &intents.Vote{Case: g.str(), Agent: g.str(), Verdict: g.str(), Rationale: g.str(), Answer: g.raw()}
		if g.r.IntN(2) == 0 {
			ev.Vote.Resolution = &intents.Resolution{Escalation: g.str(), Arbiter: g.str(), Winners: g.strs(),
				Losers: g.strs(), Replacement: g.intent(), Rationale: g.str()}
		}
	}
	if ev.Wait != nil && mask2&hasPanel != 0 {
		ev.Wait.Panel = &intents.Panel{Quorum: g.r.IntN(200), Of: g.str()}
	}
	if ev.Wait != nil && mask2&hasGate != 0 {
		ev.Wait.Gate = &intents.Gate{Rule: int(g.r.IntN(1 << 20)), Path: g.str(), By: g.strs(), Quorum: g.r.IntN(200), Fallback: g.str(),
			Review: intents.Reason(g.str()), Refusal: g.str()}
		if g.r.IntN(2) == 0 {
			ev.Wait.Gate.Ask = &intents.Ask{Question: g.str(), Schema: g.raw(), By: g.strs(), TimeoutMS: g.i64()}
		}
	}
	if mask2&hasTrace != 0 || g.r.IntN(8) == 0 {
		ev.Trace = "t" + g.str() // never empty: the codec writes no empty trace
	}
	if ev.Received != nil && (mask2&hasTraceError != 0 || g.r.IntN(8) == 0) {
		ev.Received.TraceError = "e" + g.str()
	}
	return ev
}

func newCodecGen(seed uint64) codecGen { return codecGen{rand.New(rand.NewPCG(seed, 0x636f646563))} }

func TestCodecRoundTripRandom(t *testing.T) {
	const perSeed = 5000
	for seed := range uint64(4) {
		g := newCodecGen(seed)
		for i := range perSeed {
			codecRoundTrip(t, fmt.Sprintf("seed %d event %d", seed, i), g.event())
		}
	}
}

func TestCodecDecisionRoundTrip(t *testing.T) {
	g := newCodecGen(99)
	for i := range 2000 {
		d := g.decision()
		enc := AppendDecision(nil, d)
		got, err := DecodeDecision(enc)
		if err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
		codecNormalizeDecision(d)
		if !reflect.DeepEqual(got, d) {
			t.Fatalf("decision %d: %s", i, codecDiff(got, d))
		}
		if !bytes.Equal(AppendDecision(nil, got), enc) {
			t.Fatalf("decision %d: re-encoding differs", i)
		}
	}
	// A decision record is not an event record, nor the other way round.
	enc := AppendDecision(nil, codecFullDecision())
	if _, err := DecodeEvent(enc); !errors.Is(err, ErrCorrupt) {
		t.Errorf("DecodeEvent(a decision record) = %v, want ErrCorrupt", err)
	}
}

func TestCodecDeterministic(t *testing.T) {
	keys := []string{"report.a", "report.b", "z", "", "report.sections.intro", "é", "a.b.c", "m"}
	var first []byte
	for i := range 50 {
		perm := slices.Clone(keys)
		rand.New(rand.NewPCG(uint64(i), 1)).Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		d := codecFullDecision()
		d.Versions = map[string]uint64{}
		for _, k := range perm {
			d.Versions[k] = uint64(len(k))
		}
		ev := &intents.Event{Seq: 9, Time: codecBase, Type: intents.EventDecision, Decision: d}
		enc := AppendEvent(nil, ev)
		if first == nil {
			first = enc
		} else if !bytes.Equal(enc, first) {
			t.Fatalf("insertion order %v changes the encoding", perm)
		}
	}
	// Zone and monotonic reading do not reach the bytes.
	now := time.Now() // carries a monotonic reading
	a := &intents.Event{Type: intents.EventGrant, Time: now, Grant: &intents.Grant{Expires: now.In(time.FixedZone("x", 3600))}}
	b := &intents.Event{Type: intents.EventGrant, Time: now.UTC(), Grant: &intents.Grant{Expires: now.Round(0)}}
	if !bytes.Equal(AppendEvent(nil, a), AppendEvent(nil, b)) {
		t.Error("the same instants in other zones or with a monotonic reading encode differently")
	}
	codecRoundTrip(t, "monotonic", a)
}

// TestCodecTimes pins the time tags: zero, nanoseconds, seconds outside the
// nanosecond range, and nil for a pointer.
func TestCodecTimes(t *testing.T) {
	for _, c := range []struct {
		t   time.Time
		tag byte
	}{
		{time.Time{}, timeZero},
		{time.Time{}.In(time.FixedZone("x", 3600)), timeZero},
		{time.Unix(0, 0), timeNanos},
		{codecBase, timeNanos},
		{time.Unix(0, math.MaxInt64), timeNanos},
		{time.Unix(0, math.MinInt64), timeNanos},
		{time.Unix(0, math.MaxInt64).Add(1), timeSecs},
		{time.Unix(0, math.MinInt64).Add(-1), timeSecs},
		{time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), timeSecs},
		{time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), timeSecs},
	} {
		enc := appendTime(nil, c.t)
		if enc[0] != c.tag {
			t.Errorf("%v: tag %d, want %d", c.t, enc[0], c.tag)
		}
		r := recordReader{data: enc}
		got := r.time("t")
		if err := r.end(); err != nil || !reflect.DeepEqual(got, c.t.UTC()) {
			t.Errorf("%v: decoded %v, %v", c.t, got, err)
		}
	}
}

// TestCodecTables checks that every value the intents package names has a
// one-byte code, so none falls back to a string. A value missing here still
// round-trips; add it to the end of its table (see Compatibility in
// codec.go).
func TestCodecTables(t *testing.T) {
	for _, typ := range intents.EventTypes {
		if eventTypeCode(typ) == 0 {
			t.Errorf("event type %q has no code", typ)
		}
	}
	if len(eventTypeCodes) != len(intents.EventTypes) {
		t.Errorf("%d event type codes for %d types", len(eventTypeCodes), len(intents.EventTypes))
	}
	check := func(name string, table []string, known ...string) {
		if len(table) == 0 || table[0] != "" || len(table) > 127 {
			t.Errorf("%s table must start with \"\" and have at most 127 entries", name)
		}
		for i, v := range table {
			if slices.Index(table, v) != i {
				t.Errorf("%s table has %q twice", name, v)
			}
		}
		for _, v := range known {
			if !slices.Contains(table, v) {
				t.Errorf("%s %q has no tag", name, v)
			}
		}
	}
	check("kind", kindTags, codecStrings(intents.Kinds...)...)
	check("op", opTags, codecStrings(intents.Ops...)...)
	check("outcome", outcomeTags, codecStrings(intents.Outcomes...)...)
	check("reason", reasonTags, codecStrings(intents.Reasons...)...)
	check("on_conflict", onConflictTags, codecStrings(intents.OnConflictReject, intents.OnConflictWait, intents.OnConflictEscalate)...)
	check("conflict kind", conflictKindTags, codecStrings(intents.ConflictWriteWrite, intents.ConflictReadWrite,
		intents.ConflictWriteRead, intents.ConflictStale)...)
	check("cause", causeTags, codecStrings(intents.CauseCommitted, intents.CauseAborted, intents.CauseExpired, intents.CausePreempted)...)
	check("notice kind", noticeKindTags, codecStrings(intents.NoticeWaiting, intents.NoticeLeaseExpiring, intents.NoticeLeaseExpired)...)
}

// TestCodecFrozenCodes pins the event type codes and the payload mask bits,
// which are on disk: appending keeps every old record readable, renumbering
// would not.
func TestCodecFrozenCodes(t *testing.T) {
	want := []intents.EventType{"intent", "decision", "change", "grant", "renew", "expire", "release",
		"wait", "escalate", "notice", "resolve", "rules", "vote", "shadow", "board", "xshard"}
	for i, typ := range want {
		if got := eventTypeCode(typ); int(got) != i+1 {
			t.Errorf("event type %q has code %d, want %d", typ, got, i+1)
		}
	}
	if len(eventTypeCodes) != len(want) {
		t.Errorf("%d event type codes, want %d: a new type takes code %d, with tests pinning it here",
			len(eventTypeCodes), len(want), len(want)+1)
	}
	bits := []byte{hasReceived, hasDecision, hasChange, hasGrant, hasRelease, hasWait, hasNotice, hasResolution}
	for i, b := range bits {
		if b != 1<<i {
			t.Errorf("payload mask bit %d is %#02x", i, b)
		}
	}
	bits2 := []byte{hasRules, hasTrace, hasTraceError, hasNoticeFence, hasVote, hasGate, hasPanel, hasMask3}
	for i, b := range bits2 {
		if b != 1<<i {
			t.Errorf("second payload mask bit %d is %#02x", i, b)
		}
	}
	if mask2All != 1<<len(bits2)-1 {
		t.Errorf("mask2All is %#02x for %d bits", mask2All, len(bits2))
	}
	bits3 := []byte{hasShadow, hasRulesShadow, hasHandoff, hasXShard}
	for i, b := range bits3 {
		if b != 1<<i {
			t.Errorf("third payload mask bit %d is %#02x", i, b)
		}
	}
	if mask3All != 1<<len(bits3)-1 {
		t.Errorf("mask3All is %#02x for %d bits", mask3All, len(bits3))
	}
	// A resolve event with an empty Resolution, byte for byte.
	got := AppendEvent(nil, &intents.Event{Type: intents.EventResolve, Resolution: &intents.Resolution{}})
	wantBytes := slices.Concat([]byte{SchemaVersion, 0}, make([]byte, 16), []byte{timeZero, 11, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0})
	if !bytes.Equal(got, wantBytes) {
		t.Errorf("empty resolve event:\n got % x\nwant % x", got, wantBytes)
	}
	// A rules event with an empty Rules: version 2, two mask bytes, a nil file.
	got = AppendEvent(nil, &intents.Event{Type: intents.EventRules, Rules: &intents.Rules{}})
	wantBytes = slices.Concat([]byte{SchemaVersion2, 0}, make([]byte, 16), []byte{timeZero, 12, 0, 0, 0, 0, hasRules, 0, 0, 0})
	if !bytes.Equal(got, wantBytes) {
		t.Errorf("empty rules event:\n got % x\nwant % x", got, wantBytes)
	}
	// A rules event without its payload fits version 1.
	got = AppendEvent(nil, &intents.Event{Type: intents.EventRules})
	wantBytes = slices.Concat([]byte{SchemaVersion, 0}, make([]byte, 16), []byte{timeZero, 12, 0, 0, 0, 0})
	if !bytes.Equal(got, wantBytes) {
		t.Errorf("rules event without a payload:\n got % x\nwant % x", got, wantBytes)
	}
}

func codecStrings[T ~string](xs ...T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

func TestEncodeUnknownTypePanics(t *testing.T) {
	for _, typ := range []intents.EventType{"", "bogus", "Decision"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AppendEvent with type %q did not panic", typ)
				}
			}()
			AppendEvent(nil, &intents.Event{Type: typ})
		}()
	}
}

// codecEncodings returns the encodings the error tests cut and bend: the
// fixtures and some random events.
func codecEncodings() [][]byte {
	var out [][]byte
	for _, c := range codecFixtures() {
		out = append(out, AppendEvent(nil, c.ev))
	}
	g := newCodecGen(7)
	for range 300 {
		out = append(out, AppendEvent(nil, g.event()))
	}
	return out
}

func TestDecodeTruncated(t *testing.T) {
	check := func(kind string, enc []byte, decode func([]byte) error) {
		for n := range len(enc) {
			err := decode(enc[:n])
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s cut to %d of %d bytes: err = %v, want ErrCorrupt", kind, n, len(enc), err)
			}
			if !strings.Contains(err.Error(), "byte ") {
				t.Fatalf("%s cut to %d bytes: %q names no offset", kind, n, err)
			}
		}
	}
	v2 := 0
	for _, enc := range codecEncodings() {
		check("event", enc, func(b []byte) error { _, err := DecodeEvent(b); return err })
		if enc[0] == SchemaVersion2 {
			v2++
		}
	}
	if v2 < 10 {
		t.Errorf("only %d version 2 records cut", v2)
	}
	for _, c := range codecFixtures() {
		if c.ev.Decision != nil {
			check("decision", AppendDecision(nil, c.ev.Decision),
				func(b []byte) error { _, err := DecodeDecision(b); return err })
		}
	}
}

func TestDecodeVersion(t *testing.T) {
	enc := AppendEvent(nil, codecFixtures()[0].ev)
	dec := AppendDecision(nil, codecFullDecision())
	for _, v := range []byte{0, SchemaVersion2 + 1, 0x7f, 0xff} {
		enc[0], dec[0] = v, v
		if _, err := DecodeEvent(enc); !errors.Is(err, ErrVersion) || errors.Is(err, ErrCorrupt) {
			t.Errorf("event with version %d: err = %v, want ErrVersion", v, err)
		}
		if _, err := DecodeDecision(dec); !errors.Is(err, ErrVersion) {
			t.Errorf("decision with version %d: err = %v, want ErrVersion", v, err)
		}
	}
	if _, err := DecodeEvent([]byte{SchemaVersion2 + 1}); !errors.Is(err, ErrVersion) {
		t.Errorf("a lone unknown version byte: err = %v, want ErrVersion", err)
	}
	// Version 2 is read.
	if _, err := DecodeEvent(AppendEvent(nil, &intents.Event{Type: intents.EventRules, Rules: &intents.Rules{}})); err != nil {
		t.Errorf("version 2: %v", err)
	}
	// A decision record reads the same under version 2.
	dec[0] = SchemaVersion2
	want := codecFullDecision()
	codecNormalizeDecision(want)
	if d, err := DecodeDecision(dec); err != nil || !reflect.DeepEqual(d, want) {
		t.Errorf("decision record as version 2: %+v, %v", d, err)
	}
}

// codecV2 says ev needs version 2: a payload of the second mask byte.
func codecV2(ev *intents.Event) bool {
	return ev.Rules != nil || ev.Trace != "" || ev.Received != nil && ev.Received.TraceError != "" || ev.Notice != nil && ev.Notice.Fence != 0 ||
		ev.Vote != nil || ev.Wait != nil && (ev.Wait.Gate != nil || ev.Wait.Panel != nil) || ev.Shadow != nil || ev.Handoff != nil || ev.XShard != nil
}

// TestCodecVersions checks that an event takes the lowest version that
// holds it: version 1 unless it carries a payload of the second mask byte,
// so every record without Rules is written as before version 2 existed.
func TestCodecVersions(t *testing.T) {
	check := func(name string, ev *intents.Event) {
		t.Helper()
		want := byte(SchemaVersion)
		if codecV2(ev) {
			want = SchemaVersion2
		}
		if got := AppendEvent(nil, ev)[0]; got != want {
			t.Fatalf("%s: version %d, want %d", name, got, want)
		}
	}
	v2 := 0
	for _, c := range codecFixtures() {
		check(c.name, c.ev)
		if codecV2(c.ev) {
			v2++
		}
	}
	g := newCodecGen(11)
	for i := range 2000 {
		ev := g.event()
		check(fmt.Sprintf("random event %d", i), ev)
		if codecV2(ev) {
			v2++
		}
	}
	if v2 < 100 {
		t.Errorf("only %d events of version 2 among the fixtures and random events", v2)
	}
	if got := AppendDecision(nil, codecFullDecision())[0]; got != SchemaVersion {
		t.Errorf("decision record version %d, want %d", got, SchemaVersion)
	}
}

// codecTypeOffset returns where the type code of an encoded event is.
func codecTypeOffset(ev *intents.Event) int {
	return 1 + len(binary.AppendUvarint(nil, ev.Seq)) + len(ev.ID) + len(appendTime(nil, ev.Time))
}

func TestDecodeTypeCode(t *testing.T) {
	for _, c := range codecFixtures() {
		enc := AppendEvent(nil, c.ev)
		off := codecTypeOffset(c.ev)
		if int(enc[off]) != int(eventTypeCode(c.ev.Type)) {
			t.Fatalf("%s: type code not at byte %d", c.name, off)
		}
		for _, code := range []byte{0, byte(len(eventTypeCodes) + 1), 0x80, 0xff} {
			bad := slices.Clone(enc)
			bad[off] = code
			_, err := DecodeEvent(bad)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s with type code %d: err = %v, want ErrCorrupt", c.name, code, err)
			}
			if want := fmt.Sprintf("byte %d: type: unknown event type code %d", off, code); !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: error %q does not say %q", c.name, err, want)
			}
		}
	}
}

func TestDecodeTrailing(t *testing.T) {
	for _, enc := range codecEncodings() {
		for _, tail := range [][]byte{{0}, {SchemaVersion}, []byte("garbage"), enc} {
			_, err := DecodeEvent(append(slices.Clone(enc), tail...))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%d trailing bytes: err = %v, want ErrCorrupt", len(tail), err)
			}
			if want := fmt.Sprintf("byte %d: end: %d trailing bytes", len(enc), len(tail)); !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not say %q", err, want)
			}
		}
	}
	dec := AppendDecision(nil, codecFullDecision())
	if _, err := DecodeDecision(append(dec, 1)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("decision with a trailing byte: err = %v, want ErrCorrupt", err)
	}
}

// codecEnvelope is a valid envelope of a decision event, without the
// payload mask.
func codecEnvelope() []byte {
	return AppendEvent(nil, &intents.Event{Type: intents.EventDecision})[:1+1+16+1+1+3]
}

// TestDecodeMalformed feeds hand-made bad records and checks the error names
// the problem and where it is.
func TestDecodeMalformed(t *testing.T) {
	env := codecEnvelope()
	n := len(env)
	huge := binary.AppendUvarint(nil, 1<<40)
	cat := func(parts ...[]byte) []byte { return slices.Concat(append([][]byte{env}, parts...)...) }
	env2 := codecEnvelope2()
	cat2 := func(parts ...[]byte) []byte { return slices.Concat(append([][]byte{env2}, parts...)...) }
	decision := AppendDecision(nil, &intents.Decision{})[1:] // a minimal decision body
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "byte 0: empty record"},
		{"resolution cut short", cat([]byte{hasResolution}), fmt.Sprintf("byte %d: resolution.escalation: truncated varint", n+1)},
		{"huge winners count", cat([]byte{hasResolution, 0, 0}, huge),
			fmt.Sprintf("byte %d: resolution.winners: count %d past the end", n+3, 1<<40-1)},
		{"bad replacement presence", cat([]byte{hasResolution, 0, 0, 0, 0, 2}),
			fmt.Sprintf("byte %d: resolution.replacement: presence byte 2", n+5)},
		{"replacement field", cat([]byte{hasResolution, 0, 0, 0, 0, 1, 0, 0, 99}),
			fmt.Sprintf("byte %d: resolution.replacement.kind: unknown tag 99", n+8)},
		{"huge writes count", cat([]byte{hasChange}, huge), fmt.Sprintf("byte %d: change.writes: count %d past the end", n+1, 1<<40-1)},
		{"writes count one past", cat([]byte{hasChange}, []byte{3, 0, 1, 0, 0, 0}), "change.writes: count 2 past the end"},
		{"huge string", cat([]byte{hasNotice, 2}, huge), fmt.Sprintf("byte %d: notice.txn: length %d past the end", n+2, 1<<40)},
		{"huge raw", cat([]byte{hasReceived, 0}, huge), fmt.Sprintf("byte %d: received.raw: length %d past the end", n+2, 1<<40-1)},
		{"bad presence", cat([]byte{hasReceived, 2}), fmt.Sprintf("byte %d: received.intent: presence byte 2", n+1)},
		{"unknown enum tag", cat([]byte{hasRelease, 0, 0, 99}), fmt.Sprintf("byte %d: release.cause: unknown tag 99", n+3)},
		{"enum literal past end", cat([]byte{hasRelease, 0, 0, 0, 5, 'x'}), "release.cause: length 5 past the end"},
		{"varint overflow", cat([]byte{hasGrant, 0, 0}, bytes.Repeat([]byte{0xff}, 10), []byte{1}), fmt.Sprintf("byte %d: grant.fence: varint overflows 64 bits", n+3)},
		{"nil time", cat([]byte{hasWait, 0, timeNil}), fmt.Sprintf("byte %d: wait.deadline: nil tag", n+2)},
		{"unknown time tag", cat([]byte{hasWait, 0, 4}), fmt.Sprintf("byte %d: wait.deadline: unknown time tag 4", n+2)},
		{"nanoseconds out of range", cat([]byte{hasWait, 0, timeSecs, 0}, binary.AppendUvarint(nil, 1e9), []byte{0}),
			fmt.Sprintf("byte %d: wait.deadline: nanoseconds 1000000000 out of range", n+4)},
		{"version key order", cat([]byte{hasDecision}, decision[:9], []byte{3, 1, 'b', 0, 1, 'a', 0}, decision[10:]),
			fmt.Sprintf("byte %d: decision.versions.key: \"a\" out of order after \"b\"", n+1+9+4)},
		{"version key repeated", cat([]byte{hasDecision}, decision[:9], []byte{3, 1, 'a', 0, 1, 'a', 0}, decision[10:]),
			"decision.versions.key: \"a\" out of order after \"a\""},
		{"decision flags", cat([]byte{hasDecision}, decision[:11], []byte{4}, decision[12:]),
			fmt.Sprintf("byte %d: decision.flags: unknown bits 0x04", n+1+11)},
		{"read version truncated", cat([]byte{hasGrant, 0, 0, 0, 0, timeZero, 2, 0, 1}), "grant.reads.version: truncated"},
		// Version 2: a second mask byte, whose bit 0 is Rules.
		{"v2 without its second mask", cat2([]byte{0}), fmt.Sprintf("byte %d: payload mask: truncated", n+1)},
		{"v2 without any mask", cat2(), fmt.Sprintf("byte %d: payload mask: truncated", n)},
		{"v3 unknown mask bit", cat2([]byte{0, hasMask3, 0x80}), fmt.Sprintf("byte %d: payload mask: unknown bits 0x80 of the third byte", n+2)},
		{"v3 empty third mask byte", cat2([]byte{0, hasMask3, 0}), fmt.Sprintf("byte %d: payload mask: a third byte of no bits", n+2)},
		{"v3 rules shadow without rules", cat2([]byte{0, hasMask3, hasRulesShadow, 0, 0, 0}),
			fmt.Sprintf("byte %d: rules.shadow: set on an event without a rules payload", n+3)},
		// Bit 6: a panel, never without a wait.
		{"panel without wait", cat2([]byte{0, hasPanel, 2, 0}),
			fmt.Sprintf("byte %d: wait.panel: set on an event without a wait payload", n+2)},
		// Bit 5: an approval case's gate, never without a wait.
		{"gate without wait", cat2([]byte{0, hasGate, 0, 0, 1, 0, 0, 0, 0, 0}),
			fmt.Sprintf("byte %d: wait.gate: set on an event without a wait payload", n+2)},
		// Bit 3: a notice's fence, never 0 and never without a notice.
		{"notice fence without notice", cat2([]byte{0, hasNoticeFence, 1}),
			fmt.Sprintf("byte %d: notice.fence: set on an event without a notice payload", n+2)},
		{"notice fence zero", cat2([]byte{hasNotice, hasNoticeFence, 1, 0, 0, 0, 0, 0}),
			fmt.Sprintf("byte %d: notice.fence: 0, with its mask bit set", n+7)},
		// Bits 1 and 2 of the second mask byte: the trace and a received
		// payload's trace error.
		{"trace cut short", cat2([]byte{0, hasTrace}), fmt.Sprintf("byte %d: trace: truncated varint", n+2)},
		{"trace empty", cat2([]byte{0, hasTrace, 0}), fmt.Sprintf("byte %d: trace: empty, with its mask bit set", n+2)},
		{"trace one past", cat2([]byte{0, hasTrace, 3, 'a', 'b'}), "trace: length 3 past the end"},
		{"trace error without received", cat2([]byte{0, hasTraceError, 1, 'x'}),
			fmt.Sprintf("byte %d: received.trace_error: set on an event without a received payload", n+2)},
		{"trace error empty", cat2([]byte{hasReceived, hasTraceError, 0, 0, 0, 0}),
			fmt.Sprintf("byte %d: received.trace_error: empty, with its mask bit set", n+5)},
		{"trace trailing", cat2([]byte{0, hasTrace, 1, 'a', 9}), fmt.Sprintf("byte %d: end: 1 trailing bytes", n+4)},
		{"rules cut short", cat2([]byte{0, hasRules}), fmt.Sprintf("byte %d: rules.file: truncated varint", n+2)},
		{"huge rules file", cat2([]byte{0, hasRules}, huge), fmt.Sprintf("byte %d: rules.file: length %d past the end", n+2, 1<<40-1)},
		{"rules file one past", cat2([]byte{0, hasRules, 3, '{'}), "rules.file: length 2 past the end"},
		{"huge rules hash", cat2([]byte{0, hasRules, 0}, huge), fmt.Sprintf("byte %d: rules.hash: length %d past the end", n+3, 1<<40)},
		{"rules without source", cat2([]byte{0, hasRules, 1, 0}), fmt.Sprintf("byte %d: rules.source: truncated varint", n+4)},
		{"rules after a bad resolution", cat2([]byte{hasResolution, hasRules, 0, 0, 0, 0, 2}),
			fmt.Sprintf("byte %d: resolution.replacement: presence byte 2", n+6)},
		{"rules trailing", cat2([]byte{0, hasRules, 0, 0, 0, 7}), fmt.Sprintf("byte %d: end: 1 trailing bytes", n+5)},
		{"rules in version 1", cat([]byte{0, hasRules, 0, 0, 0}), fmt.Sprintf("byte %d: end: 4 trailing bytes", n+1)},
	} {
		_, err := DecodeEvent(c.data)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not say %q", c.name, err, c.want)
		}
	}
	// The versions cases above are well-formed once the keys are in order.
	ok := cat([]byte{hasDecision}, decision[:9], []byte{3, 1, 'a', 0, 1, 'b', 0}, decision[10:])
	if ev, err := DecodeEvent(ok); err != nil || len(ev.Decision.Versions) != 2 {
		t.Errorf("ordered versions: %v, %v", ev, err)
	}
	// A version 2 record with an empty second mask, which this build never
	// writes, reads as the version 1 record it re-encodes to.
	v1 := cat([]byte{hasNotice, 1, 0, 0, 0, 0})
	ev, err := DecodeEvent(cat2([]byte{hasNotice, 0, 1, 0, 0, 0, 0}))
	if err != nil {
		t.Fatalf("version 2 without rules: %v", err)
	}
	if enc := AppendEvent(nil, ev); !bytes.Equal(enc, v1) {
		t.Errorf("version 2 without rules re-encodes to\n% x\nwant\n% x", enc, v1)
	}
	// The Rules payload follows every other one.
	ev, err = DecodeEvent(cat2([]byte{hasNotice, hasRules, 1, 0, 0, 0, 0, 3, '{', '}', 1, 'h', 3, 'a', 'p', 'i'}))
	if err != nil || ev.Notice == nil || ev.Rules == nil || string(ev.Rules.File) != "{}" || ev.Rules.Hash != "h" || ev.Rules.Source != "api" {
		t.Errorf("notice and rules: %+v, %v", ev, err)
	}
}

// codecEnvelope2 is codecEnvelope as version 2.
func codecEnvelope2() []byte {
	env := codecEnvelope()
	env[0] = SchemaVersion2
	return env
}

// codecCheckDecode is the fuzz property: any input either fails with one of
// the two sentinels or decodes to an event that re-encodes to canonical
// bytes which decode to the same event.
func codecCheckDecode(t testing.TB, data []byte) {
	ev, err := DecodeEvent(data)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("DecodeEvent: error wraps neither sentinel: %v", err)
		}
	} else {
		enc := AppendEvent(nil, ev)
		again, err := DecodeEvent(enc)
		if err != nil {
			t.Fatalf("decoding the re-encoded event: %v", err)
		}
		if !reflect.DeepEqual(again, ev) {
			t.Fatalf("decode is not idempotent: %s", codecDiff(again, ev))
		}
		if re := AppendEvent(nil, again); !bytes.Equal(re, enc) {
			t.Fatalf("encoding is not canonical:\n% x\n% x", re, enc)
		}
	}
	// Fold's decoding refuses what DecodeEvent refuses, and otherwise gives
	// the same event but for the body of a received intent.
	var shell receivedEvent
	thin, thinErr := decodeEvent(data, &shell)
	switch {
	case (thinErr == nil) != (err == nil):
		t.Fatalf("DecodeEvent: %v; Fold's decoding: %v", err, thinErr)
	case err == nil && !reflect.DeepEqual(thin, thinned(ev)):
		t.Fatalf("Fold's decoding differs: %s", codecDiff(thin, thinned(ev)))
	}
	d, err := DecodeDecision(data)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("DecodeDecision: error wraps neither sentinel: %v", err)
		}
		return
	}
	enc := AppendDecision(nil, d)
	again, err := DecodeDecision(enc)
	if err != nil || !reflect.DeepEqual(again, d) {
		t.Fatalf("decision decode is not idempotent: %v %s", err, codecDiff(again, d))
	}
}

// thinned returns what Fold hands over for ev: a copy whose received intent
// keeps only its ID, Agent, Kind and Txn.
func thinned(ev *intents.Event) *intents.Event {
	out := *ev
	if p := ev.Received; p != nil && p.Intent != nil {
		q := *p
		q.Intent = &intents.Intent{ID: p.Intent.ID, Agent: p.Intent.Agent, Kind: p.Intent.Kind, Txn: p.Intent.Txn}
		out.Received = &q
	}
	return &out
}

// A decoded event's strings and byte slices share one copy of the record:
// writing through a byte slice, or appending to it, changes nothing else.
func TestDecodedBytesStayApart(t *testing.T) {
	ev := &intents.Event{Seq: 7, Type: intents.EventChange, Agent: "w", Intent: "I",
		Change: &intents.Change{Writes: []intents.Applied{
			{Path: "a.b", Op: intents.OpSet, Value: json.RawMessage(`"one"`), NewVersion: 1},
			{Path: "a.c", Op: intents.OpSet, Value: json.RawMessage(`"two"`), NewVersion: 1},
		}}}
	enc := AppendEvent(nil, ev)
	got, err := DecodeEvent(enc)
	if err != nil {
		t.Fatal(err)
	}
	w := got.Change.Writes
	_ = append(w[0].Value, `XXXXXXXXXXXXXXXX`...)
	w[0].Value[1] = 'X'
	clear(enc)
	if w[0].Path != "a.b" || w[1].Path != "a.c" || string(w[1].Value) != `"two"` || string(w[0].Value) != `"Xne"` {
		t.Fatalf("writes after writing through the first value and clearing the input: %+v", w)
	}
}

// TestDecodeMutated runs the fuzz property over deterministic mutations, so
// plain `go test` covers some of what the fuzzer does.
func TestDecodeMutated(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, enc := range codecEncodings() {
		for range 20 {
			bad := slices.Clone(enc)
			for range 1 + r.IntN(3) {
				switch i := r.IntN(len(bad)); r.IntN(3) {
				case 0:
					bad[i] ^= byte(1 << r.IntN(8))
				case 1:
					bad[i] = byte(r.UintN(256))
				default:
					bad = slices.Delete(bad, i, i+1)
				}
				if len(bad) == 0 {
					break
				}
			}
			codecCheckDecode(t, bad)
		}
	}
}

// TestDecodeAllocBound checks that decoding never allocates more than a
// small multiple of the input, for valid records and for records that claim
// huge counts and lengths.
func TestDecodeAllocBound(t *testing.T) {
	inputs := codecEncodings()
	env, env2 := codecEnvelope(), codecEnvelope2()
	for _, c := range []int{1 << 20, 1 << 40, math.MaxInt32} {
		count := binary.AppendUvarint(nil, uint64(c))
		inputs = append(inputs,
			slices.Concat(env, []byte{hasChange}, count, make([]byte, 64)),
			slices.Concat(env, []byte{hasNotice, 1}, count, make([]byte, 64)),
			slices.Concat(env, []byte{hasReceived, 0}, count, make([]byte, 64)),
			slices.Concat(env, []byte{hasResolution, 0, 0}, count, make([]byte, 64)),
			slices.Concat(env2, []byte{0, hasRules}, count, make([]byte, 64)),
			slices.Concat(env2, []byte{0, hasRules, 0}, count, make([]byte, 64)),
			slices.Concat(env, []byte{hasDecision}, make([]byte, 9), count, make([]byte, 64)))
	}
	// The densest records: many tiny elements.
	dense := func(mask byte, body ...[]byte) []byte {
		return slices.Concat(append([][]byte{env, {mask}}, body...)...)
	}
	intent := func(nWrites int) []byte {
		b := []byte{1, 0, 0, 1, 0, 0, 0, 0}
		b = binary.AppendUvarint(b, uint64(nWrites)+1)
		b = append(b, bytes.Repeat([]byte{0, 2, 0}, nWrites)...)
		return append(b, 0, 0, 0, 0, 1, 0, 0)
	}
	inputs = append(inputs,
		dense(hasReceived, intent(1000), []byte{0, 0}),
		dense(hasNotice, []byte{1}, make([]byte, 4)),
		dense(hasResolution, []byte{0, 0}, binary.AppendUvarint(nil, 1001), make([]byte, 1000), []byte{0, 0, 0}),
		dense(hasWait, []byte{0, timeZero}, binary.AppendUvarint(nil, 1001), bytes.Repeat([]byte{0, 1, 0, 0}, 1000)))
	worst := 0.0
	for i, in := range inputs {
		if i < 3 || i >= len(inputs)-4 { // some valid records and the dense ones
			codecCheckDecode(t, in)
		}
		var before, after runtime.MemStats
		const runs = 20
		runtime.ReadMemStats(&before)
		for range runs {
			DecodeEvent(in)
		}
		runtime.ReadMemStats(&after)
		per := (after.TotalAlloc - before.TotalAlloc) / runs
		if limit := uint64(32*len(in) + 1024); per > limit {
			t.Errorf("input %d (%d bytes): %d bytes allocated per decode, over %d", i, len(in), per, limit)
		}
		if ratio := float64(per) / float64(len(in)); ratio > worst && len(in) >= 1000 {
			worst = ratio
		}
	}
	t.Logf("at most %.1f bytes allocated per input byte (inputs of 1000 bytes or more)", worst)
}

// codecReadSeed reads a file in the `go test fuzz v1` format holding one
// []byte.
func codecReadSeed(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" ||
		!strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
		return nil, fmt.Errorf("%s: not a go test fuzz v1 file with one []byte", path)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	return []byte(s), err
}

// TestCodecSeedCorpus checks the seeds against the fixtures byte for byte,
// which pins the format: if the encoding changes, give the change a new
// version when it is deliberate (see Compatibility in codec.go) and rewrite
// the seeds with
// `go test ./eventlog -run TestCodecSeedCorpus -codec-seeds`.
func TestCodecSeedCorpus(t *testing.T) {
	fixtures := map[string]*intents.Event{}
	for _, c := range codecFixtures() {
		fixtures[c.name] = c.ev
	}
	for _, name := range codecSeeds {
		enc := AppendEvent(nil, fixtures[name])
		path := filepath.Join(codecSeedDir, name)
		if *codecRewriteSeeds {
			if err := os.MkdirAll(codecSeedDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", enc), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		seed, err := codecReadSeed(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(seed, enc) {
			t.Errorf("%s: the encoding changed (a new version if deliberate, then rerun with -codec-seeds):\nseed % x\nnow  % x", name, seed, enc)
		}
		if _, err := DecodeEvent(seed); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, c := range codecFixtures() {
		f.Add(AppendEvent(nil, c.ev))
		if c.ev.Decision != nil {
			f.Add(AppendDecision(nil, c.ev.Decision))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { codecCheckDecode(t, data) })
}

// codecBenchEvents are a typical decision event (an applied intent) and a
// typical change event (the writes it committed).
func codecBenchEvents() []codecCase {
	at := time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)
	id := "01JPA3Z4Y5X6W7V8T9S0R1Q2P3"
	decision := &intents.Event{Seq: 18234, ID: codecID(1), Time: at, Type: intents.EventDecision,
		Agent: "writer-1", Intent: id,
		Decision: &intents.Decision{Intent: id, Agent: "writer-1", Outcome: intents.OutcomeApplied,
			Versions: map[string]uint64{"report.sections.intro": 7, "report.outline": 3}, Rev: 18235}}
	change := &intents.Event{Seq: 18235, ID: codecID(2), Time: at, Type: intents.EventChange,
		Agent: "writer-1", Intent: id,
		Change: &intents.Change{Writes: []intents.Applied{
			{Path: "report.sections.intro", Op: intents.OpSet,
				Value:      json.RawMessage(`{"title":"Introduction","text":"Agents coordinate through intents.","words":5}`),
				OldVersion: 6, NewVersion: 7},
			{Path: "report.stats.edits", Op: intents.OpIncr, Value: json.RawMessage(`1`), OldVersion: 40, NewVersion: 41},
		}}}
	return []codecCase{{"decision", decision}, {"change", change}}
}

func BenchmarkEncode(b *testing.B) {
	for _, c := range codecBenchEvents() {
		b.Run(c.name, func(b *testing.B) {
			buf := AppendEvent(nil, c.ev)
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendEvent(buf[:0], c.ev)
			}
			b.ReportMetric(float64(len(buf)), "bytes")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, c := range codecBenchEvents() {
		b.Run(c.name, func(b *testing.B) {
			enc := AppendEvent(nil, c.ev)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeEvent(enc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(enc)), "bytes")
		})
	}
}

func BenchmarkJSONEncode(b *testing.B) {
	for _, c := range codecBenchEvents() {
		b.Run(c.name, func(b *testing.B) {
			var enc []byte
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if enc, err = json.Marshal(c.ev); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(enc)), "bytes")
		})
	}
}

func BenchmarkJSONDecode(b *testing.B) {
	for _, c := range codecBenchEvents() {
		b.Run(c.name, func(b *testing.B) {
			enc, err := json.Marshal(c.ev)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				var ev intents.Event
				if err := json.Unmarshal(enc, &ev); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(enc)), "bytes")
		})
	}
}

// withEightPayloads fills every payload of the first mask byte.
func withEightPayloads(ev *intents.Event) {
	ev.Received = &intents.Received{Intent: codecFullIntent(), Raw: []byte{0, 1, 0xff}, Error: "e"}
	ev.Decision = codecFullDecision()
	ev.Change = codecFullChange()
	ev.Grant = codecFullGrant()
	ev.Release = &intents.Release{Txn: "t-7", Agent: "writer-1", Cause: intents.CauseAborted}
	ev.Wait = codecFullWait()
	ev.Notice = codecFullNotice()
	ev.Resolution = codecFullResolution()
}
