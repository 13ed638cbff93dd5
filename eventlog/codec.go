package eventlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/coagent/coagent/intents"
)

// The record encoding of an event: what the log stores under e<seq>, and, for
// a lone decision, under d<intent id>. It is a compact, deterministic binary
// form of intents.Event (the same event always gives the same bytes), under
// half the size of its JSON and 5–10× faster to encode and to decode
// (BenchmarkEncode, BenchmarkJSONEncode and the like in codec_test.go).
//
// A record is its version byte, SchemaVersion (1) or SchemaVersion2 (2), then:
//
//	envelope  seq uvarint · id 16 bytes · time · type 1 byte · agent, intent, txn strings
//	payloads  the mask: one byte in version 1; two in version 2, the second
//	          right after the first. Bit i of the first byte is set when
//	          payload i is present, in the order Received, Decision, Change,
//	          Grant, Release, Wait, Notice, Resolution; bits 0–2 of the
//	          second are Rules, Trace (Event.Trace, a string), TraceError
//	          (Received.TraceError, a string, only beside a Received),
//	          NoticeFence (Notice.Fence, a uvarint, only beside a Notice),
//	          Vote, and Gate (Wait.Gate: rule and quorum uvarints, path,
//	          by, fallback, review, refusal, and the pointer Ask: question,
//	          schema as raw bytes, by, timeout_ms varint; only beside a
//	          Wait; Vote: case, agent, verdict, rationale, answer as raw
//	          bytes, and the pointer Resolution, as the Resolution payload),
//	          and Panel (Wait.Panel: quorum uvarint, of; only beside a
//	          Wait), and its other bits are
//	          unused (ErrCorrupt). Then each present
//	          payload in that order, fields in struct order; Trace and
//	          TraceError are set only when not empty (an empty one is
//	          ErrCorrupt), so each event has one encoding
//
// and nothing after. The versions differ in nothing else. An event takes the
// lowest version that holds it: version 1 when no payload of the second mask
// byte is present (every event without Rules or a trace, byte for byte as
// before version 2 existed), version 2 otherwise. A type normally has one payload
// (intent→Received, decision→Decision, change→Change, grant and
// renew→Grant, expire and release→Release, wait and escalate→Wait,
// notice→Notice, resolve→Resolution, rules→Rules), but the mask lets any
// combination round-trip. The fields are built from:
//
//	string      uvarint length, bytes
//	raw bytes   uvarint length+1, bytes; 0 is nil, so nil and empty stay apart
//	            (Write.Value, Applied.Value, Intent.Meta, Rules.File: an absent
//	            value is not "null")
//	slice, map  uvarint count+1, elements; 0 is nil. Map entries in increasing key order.
//	enum        uvarint tag: 1 + the index in the value's frozen table below, or
//	            0 and a string for a value the table lacks
//	time        tag byte: 0 nil (pointers only), 1 the zero time, 2 unix nanoseconds
//	            as a varint, 3 (past the nanoseconds' range, 1677–2262) unix seconds
//	            varint, nanoseconds uvarint
//	pointer     presence byte 0 or 1, then the value
//	bool        Decision's Retryable and Duplicate share a flags byte
//	integers    uvarint (uint64), varint (int64)
//
// An idempotency record (AppendDecision) is the version byte and a Decision
// payload. It has no mask, so it reads the same under both versions;
// AppendDecision writes version 1.
//
// Decoding gives back an equal event except for times, which come back in
// UTC without a monotonic reading: DecodeEvent(AppendEvent(nil, ev)) is
// reflect.DeepEqual to ev once every time in ev is replaced by its UTC().
// Decoded strings and byte slices are copies: they never alias the input, so
// a caller may decode straight from a buffer it reuses (a Pebble value).
// Those of the payloads share one copy of the record, made at the first of
// them, which keeping any of them keeps (the envelope's strings have their
// own: see envelopeString); each byte slice is capped at its own end, so
// that appending to it or writing through it cannot reach another.
//
// Compatibility: the tables and the layout are part of the on-disk format.
// Never reorder or remove table entries. A change that makes bytes already
// written read differently (a new field in a payload, a new encoding of a
// field, a renumbered code or tag) comes with a new version, so that an
// older binary reports ErrVersion, and the decoder then keeps reading the
// older versions too.
//
// Appending an entry to a table or giving a new payload the next free mask
// bit is not such a change, and keeps the version: no record written before
// it uses the new code or bit, and every one decodes exactly as it did, so
// this build reads old logs unchanged. The cost is on the other side: an
// older binary given a record that uses the new code or bit rejects it as
// ErrCorrupt ("unknown event type code", "unknown tag", "payload mask:
// unknown bits"), not ErrVersion; it never misreads it. The resolve type
// (code 11) and the Resolution payload (bit 7) were added this way, under
// version 1, and so was the rules type (code 12).
//
// The Rules payload was not: the one mask byte of version 1 was full, so it
// took a second mask byte, and version 2. Writing the lowest version that
// holds an event keeps every record without Rules in version 1, so a log
// mixes the two versions, and a binary from before version 2 reads all of it
// but the records that carry Rules, which it rejects as ErrVersion. (It
// rejects a rules event without a Rules payload, a version 1 record, as
// ErrCorrupt: "unknown event type code 12".) This build reads both
// versions. It also reads a version 2 record whose second mask byte is 0,
// which it never writes but a later build might, and re-encodes it as
// version 1.
//
// Trace and TraceError took bits 1 and 2 of the second byte, under version
// 2, by the rule above: every record written before them decodes as it did
// (no version 1 record has a second mask byte, and no version 2 one had
// those bits), and a binary from before them rejects a traced record as
// ErrCorrupt ("payload mask: unknown bits"), never misreading it. The next
// payloads take bits 3–7: NoticeFence took bit 3, and Vote (the vote
// type's payload, code 13) and Gate (Wait.Gate, only beside a Wait) bits 4
// and 5, by the same rule, and Panel bit 6. Bit 7 says a third mask byte
// follows: Shadow (the shadow type's payload, code 14) took its bit 0, and
// Rules' shadow file its bit 1, Handoff (the board type's payload,
// code 15) its bit 2, and XShard (the xshard type's payload, code 16) its
// bit 3. A record without them has no third byte
// and decodes as before; a binary from before them rejects one as
// ErrCorrupt ("payload mask: unknown bits 0x80").
//
// The fuzz seeds in testdata/fuzz/FuzzDecodeEvent are golden files:
// TestCodecSeedCorpus fails if the encoding of their fixtures changes.

// The record versions: the byte every encoded event or decision starts
// with. DecodeEvent and DecodeDecision read both; any other is ErrVersion.
const (
	// SchemaVersion is the version of every idempotency record and of every
	// event record without a payload of the second mask byte (Rules): one
	// mask byte.
	SchemaVersion = 1
	// SchemaVersion2 is the newest version, of event records that carry a
	// payload of the second mask byte: two mask bytes.
	SchemaVersion2 = 2
)

var (
	// ErrCorrupt is wrapped by every decoding error about the bytes
	// themselves: a truncated or malformed record, trailing bytes, a length
	// or count past the end, an unknown event type, tag or payload mask bit.
	ErrCorrupt = errors.New("eventlog: corrupt record")
	// ErrVersion is wrapped when a record starts with a schema version this
	// build cannot read.
	ErrVersion = errors.New("eventlog: unknown schema version")
)

// Payload mask bits, in encoding order. All eight of the first mask byte
// are taken, so every first mask byte is a valid one (see Compatibility
// above).
const (
	hasReceived byte = 1 << iota
	hasDecision
	hasChange
	hasGrant
	hasRelease
	hasWait
	hasNotice
	hasResolution // added with the resolve type; still SchemaVersion 1
)

// Bits of the second payload mask byte, in encoding order after those of
// the first; present in SchemaVersion2 only.
const (
	hasRules       byte = 1 << iota // SchemaVersion2
	hasTrace                        // Event.Trace, a string; added under SchemaVersion2
	hasTraceError                   // Received.TraceError, a string, with Received only
	hasNoticeFence                  // Notice.Fence, a uvarint, with Notice only
	hasVote                         // Vote, the vote type's payload
	hasGate                         // Wait.Gate, with Wait only
	hasPanel                        // Wait.Panel, with Wait only
	hasMask3                        // a third mask byte follows

	mask2All = 1<<iota - 1
)

// Bits of the third payload mask byte, present when the second has
// hasMask3 (SchemaVersion2). A record without them has no third byte, so
// every record written before it decodes as it did.
const (
	hasShadow      byte = 1 << iota // Shadow, the shadow type's payload
	hasRulesShadow                  // Rules.Shadow, ShadowHash and ShadowMode, with Rules only
	hasHandoff                      // Handoff, the board type's payload
	hasXShard                       // XShard, the xshard type's payload

	mask3All = 1<<iota - 1
)

// Decision flags.
const (
	flagRetryable byte = 1 << iota
	flagDuplicate
	flagAll = 1<<iota - 1
)

// Time tags.
const (
	timeNil   = 0
	timeZero  = 1
	timeNanos = 2
	timeSecs  = 3
)

// The frozen tables. An event type's code is its index+1; codes 0 and past
// the end are rejected. An enum's tag is its index+1 and tag 0 carries the
// value as a string, so every value round-trips and the known ones take one
// byte. Append only (see Compatibility above): an entry's position is its
// code on disk.
var (
	eventTypeCodes = [...]intents.EventType{intents.EventIntent, intents.EventDecision,
		intents.EventChange, intents.EventGrant, intents.EventRenew, intents.EventExpire,
		intents.EventRelease, intents.EventWait, intents.EventEscalate, intents.EventNotice,
		intents.EventResolve, // 11, added under SchemaVersion 1
		intents.EventRules,   // 12, added under SchemaVersion 1; its payload needs SchemaVersion2
		intents.EventVote,    // 13; its payload needs SchemaVersion2
		intents.EventShadow,  // 14; its payload needs SchemaVersion2 and a third mask byte
		intents.EventBoard,   // 15; as the shadow type
		intents.EventXShard,  // 16; as the shadow type
	}

	kindTags       = []string{"", "apply", "propose", "commit", "abort", "renew"}
	opTags         = []string{"", "set", "delete", "merge", "append", "incr"}
	onConflictTags = []string{"", "reject", "wait", "escalate"}
	outcomeTags    = []string{"", "applied", "granted", "committed", "aborted", "renewed",
		"rejected", "queued", "escalated"}
	reasonTags = []string{"", "invalid", "unauthorized", "precondition_failed",
		"postcondition_failed", "conflict", "stale_read", "out_of_scope", "fenced",
		"lease_expired", "wait_timeout", "arbiter_rejected", "deadlock", "rate_limited",
		"illegal_transition"}
	conflictKindTags = []string{"", "write-write", "read-write", "write-read", "stale"}
	causeTags        = []string{"", "committed", "aborted", "expired", "preempted"}
	noticeKindTags   = []string{"", "waiting", "lease_expiring", "lease_expired"}
)

// eventTypeCode returns t's code, or 0 if t has none.
func eventTypeCode(t intents.EventType) byte {
	for i, u := range eventTypeCodes {
		if u == t {
			return byte(i + 1)
		}
	}
	return 0
}

// AppendEvent appends the binary encoding of ev to dst and returns it. The
// encoding depends only on ev's contents. ev.Type must be one of
// intents.EventTypes: AppendEvent panics otherwise, since the log must never
// hold a record it cannot read back.
func AppendEvent(dst []byte, ev *intents.Event) []byte {
	code := eventTypeCode(ev.Type)
	if code == 0 {
		panic(fmt.Sprintf("eventlog: AppendEvent: event %d has unknown type %q", ev.Seq, ev.Type))
	}
	var mask2 byte
	if ev.Rules != nil {
		mask2 |= hasRules
	}
	if ev.Trace != "" {
		mask2 |= hasTrace
	}
	if ev.Received != nil && ev.Received.TraceError != "" {
		mask2 |= hasTraceError
	}
	if ev.Notice != nil && ev.Notice.Fence != 0 {
		mask2 |= hasNoticeFence
	}
	if ev.Vote != nil {
		mask2 |= hasVote
	}
	if ev.Wait != nil && ev.Wait.Gate != nil {
		mask2 |= hasGate
	}
	if ev.Wait != nil && ev.Wait.Panel != nil {
		mask2 |= hasPanel
	}
	var mask3 byte
	if ev.Shadow != nil {
		mask3 |= hasShadow
	}
	if ev.Rules != nil && (ev.Rules.Shadow != nil || ev.Rules.ShadowHash != "" || ev.Rules.ShadowMode != "") {
		mask3 |= hasRulesShadow
	}
	if ev.Handoff != nil {
		mask3 |= hasHandoff
	}
	if ev.XShard != nil {
		mask3 |= hasXShard
	}
	if mask3 != 0 {
		mask2 |= hasMask3
	}
	if mask2 == 0 {
		dst = append(dst, SchemaVersion) // the lowest version that holds ev
	} else {
		dst = append(dst, SchemaVersion2)
	}
	dst = binary.AppendUvarint(dst, ev.Seq)
	dst = append(dst, ev.ID[:]...)
	dst = appendTime(dst, ev.Time)
	dst = append(dst, code)
	dst = appendString(dst, ev.Agent)
	dst = appendString(dst, ev.Intent)
	dst = appendString(dst, ev.Txn)

	var mask byte
	if ev.Received != nil {
		mask |= hasReceived
	}
	if ev.Decision != nil {
		mask |= hasDecision
	}
	if ev.Change != nil {
		mask |= hasChange
	}
	if ev.Grant != nil {
		mask |= hasGrant
	}
	if ev.Release != nil {
		mask |= hasRelease
	}
	if ev.Wait != nil {
		mask |= hasWait
	}
	if ev.Notice != nil {
		mask |= hasNotice
	}
	if ev.Resolution != nil {
		mask |= hasResolution
	}
	dst = append(dst, mask)
	if mask2 != 0 {
		dst = append(dst, mask2)
	}
	if mask3 != 0 {
		dst = append(dst, mask3)
	}
	if p := ev.Received; p != nil {
		dst = appendIntentPtr(dst, p.Intent)
		dst = appendRaw(dst, p.Raw)
		dst = appendString(dst, p.Error)
	}
	if p := ev.Decision; p != nil {
		dst = appendDecisionBody(dst, p)
	}
	if p := ev.Change; p != nil {
		dst = appendCount(dst, len(p.Writes), p.Writes == nil)
		for i := range p.Writes {
			w := &p.Writes[i]
			dst = appendString(dst, w.Path)
			dst = appendEnum(dst, opTags, string(w.Op))
			dst = appendRaw(dst, w.Value)
			dst = binary.AppendUvarint(dst, w.OldVersion)
			dst = binary.AppendUvarint(dst, w.NewVersion)
		}
		dst = appendStrings(dst, p.MergedWith)
	}
	if p := ev.Grant; p != nil {
		dst = appendString(dst, p.Txn)
		dst = appendString(dst, p.Agent)
		dst = binary.AppendUvarint(dst, p.Fence)
		dst = binary.AppendVarint(dst, p.LeaseMS)
		dst = appendTime(dst, p.Expires)
		dst = appendReads(dst, p.Reads)
		dst = appendIntentPtr(dst, p.Propose)
	}
	if p := ev.Release; p != nil {
		dst = appendString(dst, p.Txn)
		dst = appendString(dst, p.Agent)
		dst = appendEnum(dst, causeTags, string(p.Cause))
	}
	if p := ev.Wait; p != nil {
		dst = appendIntentPtr(dst, p.Intent)
		dst = appendTime(dst, p.Deadline)
		dst = appendConflicts(dst, p.Conflicts)
	}
	if p := ev.Notice; p != nil {
		dst = appendEnum(dst, noticeKindTags, string(p.Kind))
		dst = appendString(dst, p.Txn)
		dst = appendString(dst, p.Intent)
		dst = appendString(dst, p.From)
		dst = appendString(dst, p.Detail)
	}
	if p := ev.Resolution; p != nil {
		dst = appendResolution(dst, p)
	}
	if p := ev.Rules; p != nil {
		dst = appendRaw(dst, p.File)
		dst = appendString(dst, p.Hash)
		dst = appendString(dst, p.Source)
	}
	if mask2&hasTrace != 0 {
		dst = appendString(dst, ev.Trace)
	}
	if mask2&hasTraceError != 0 {
		dst = appendString(dst, ev.Received.TraceError)
	}
	if mask2&hasNoticeFence != 0 {
		dst = binary.AppendUvarint(dst, ev.Notice.Fence)
	}
	if p := ev.Vote; p != nil {
		dst = appendString(dst, p.Case)
		dst = appendString(dst, p.Agent)
		dst = appendString(dst, p.Verdict)
		dst = appendString(dst, p.Rationale)
		dst = appendRaw(dst, p.Answer)
		if r := p.Resolution; r == nil {
			dst = append(dst, 0)
		} else {
			dst = append(dst, 1)
			dst = appendResolution(dst, r)
		}
	}
	if mask2&hasGate != 0 {
		g := ev.Wait.Gate
		dst = binary.AppendUvarint(dst, uint64(g.Rule))
		dst = appendString(dst, g.Path)
		dst = appendStrings(dst, g.By)
		dst = binary.AppendUvarint(dst, uint64(g.Quorum))
		dst = appendString(dst, g.Fallback)
		dst = appendString(dst, string(g.Review))
		dst = appendString(dst, g.Refusal)
		if a := g.Ask; a == nil {
			dst = append(dst, 0)
		} else {
			dst = append(dst, 1)
			dst = appendString(dst, a.Question)
			dst = appendRaw(dst, a.Schema)
			dst = appendStrings(dst, a.By)
			dst = binary.AppendVarint(dst, a.TimeoutMS)
		}
	}
	if mask2&hasPanel != 0 {
		dst = binary.AppendUvarint(dst, uint64(ev.Wait.Panel.Quorum))
		dst = appendString(dst, ev.Wait.Panel.Of)
	}
	if p := ev.Shadow; p != nil {
		dst = appendString(dst, p.Kind)
		dst = appendString(dst, p.Mode)
		dst = appendString(dst, p.Rule)
		dst = appendString(dst, p.Decided)
		dst = appendEnum(dst, outcomeTags, string(p.WouldBe))
		dst = appendEnum(dst, reasonTags, string(p.Reason))
		dst = appendString(dst, p.Detail)
	}
	if mask3&hasRulesShadow != 0 {
		dst = appendRaw(dst, ev.Rules.Shadow)
		dst = appendString(dst, ev.Rules.ShadowHash)
		dst = appendString(dst, ev.Rules.ShadowMode)
	}
	if p := ev.Handoff; p != nil {
		dst = appendString(dst, p.Kind)
		dst = appendString(dst, p.Board)
		dst = appendString(dst, p.Shard)
		dst = appendRaw(dst, p.Nodes)
		dst = binary.AppendUvarint(dst, p.Seq)
	}
	if p := ev.XShard; p != nil {
		dst = appendString(dst, p.Phase)
		dst = appendString(dst, p.Intent)
		dst = appendString(dst, p.Coord)
		dst = appendCount(dst, len(p.Parts), p.Parts == nil)
		for _, part := range p.Parts {
			dst = appendString(dst, part.Shard)
			dst = appendIntentPtr(dst, part.Intent)
		}
		if p.Decision == nil {
			dst = append(dst, 0)
		} else {
			dst = append(dst, 1)
			dst = appendDecisionBody(dst, p.Decision)
		}
	}
	return dst
}

// appendResolution appends a Resolution's fields, in struct order.
func appendResolution(dst []byte, p *intents.Resolution) []byte {
	dst = appendString(dst, p.Escalation)
	dst = appendString(dst, p.Arbiter)
	dst = appendStrings(dst, p.Winners)
	dst = appendStrings(dst, p.Losers)
	dst = appendIntentPtr(dst, p.Replacement)
	return appendString(dst, p.Rationale)
}

// AppendDecision appends the encoding of a lone decision (the idempotency
// record) to dst and returns it: the version byte (always SchemaVersion),
// then the decision as AppendEvent encodes a Decision payload.
func AppendDecision(dst []byte, d *intents.Decision) []byte {
	dst = append(dst, SchemaVersion)
	return appendDecisionBody(dst, d)
}

func appendDecisionBody(dst []byte, d *intents.Decision) []byte {
	dst = appendString(dst, d.Intent)
	dst = appendString(dst, d.Agent)
	dst = appendEnum(dst, outcomeTags, string(d.Outcome))
	dst = appendEnum(dst, reasonTags, string(d.Reason))
	dst = appendString(dst, d.Detail)
	dst = appendString(dst, d.Txn)
	dst = binary.AppendUvarint(dst, d.Fence)
	if d.LeaseExpires == nil {
		dst = append(dst, timeNil)
	} else {
		dst = appendTime(dst, *d.LeaseExpires)
	}
	dst = appendConflicts(dst, d.Conflicts)
	dst = appendCount(dst, len(d.Versions), d.Versions == nil)
	if len(d.Versions) > 0 {
		var small [16]string // most decisions read or write a few paths
		keys := small[:0]
		for k := range d.Versions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			dst = appendString(dst, k)
			dst = binary.AppendUvarint(dst, d.Versions[k])
		}
	}
	dst = binary.AppendUvarint(dst, d.Rev)
	var flags byte
	if d.Retryable {
		flags |= flagRetryable
	}
	if d.Duplicate {
		flags |= flagDuplicate
	}
	dst = append(dst, flags)
	return appendStrings(dst, d.MergedWith)
}

func appendIntentPtr(dst []byte, in *intents.Intent) []byte {
	if in == nil {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = appendString(dst, in.ID)
	dst = appendString(dst, in.Agent)
	dst = appendEnum(dst, kindTags, string(in.Kind))
	dst = appendString(dst, in.Txn)
	dst = binary.AppendUvarint(dst, in.Fence)
	dst = appendString(dst, in.Action)
	dst = appendReads(dst, in.Reads)
	dst = appendCount(dst, len(in.Writes), in.Writes == nil)
	for i := range in.Writes {
		w := &in.Writes[i]
		dst = appendString(dst, w.Path)
		dst = appendEnum(dst, opTags, string(w.Op))
		dst = appendRaw(dst, w.Value)
	}
	dst = appendStrings(dst, in.Pre)
	dst = appendStrings(dst, in.Post)
	dst = binary.AppendVarint(dst, in.Priority)
	dst = binary.AppendVarint(dst, in.LeaseMS)
	dst = appendEnum(dst, onConflictTags, string(in.OnConflict))
	dst = binary.AppendVarint(dst, in.WaitMS)
	return appendRaw(dst, in.Meta)
}

func appendReads(dst []byte, rs []intents.Read) []byte {
	dst = appendCount(dst, len(rs), rs == nil)
	for i := range rs {
		dst = appendString(dst, rs[i].Path)
		if v := rs[i].Version; v == nil {
			dst = append(dst, 0)
		} else {
			dst = append(dst, 1)
			dst = binary.AppendUvarint(dst, *v)
		}
	}
	return dst
}

func appendConflicts(dst []byte, cs []intents.Conflict) []byte {
	dst = appendCount(dst, len(cs), cs == nil)
	for i := range cs {
		c := &cs[i]
		dst = appendString(dst, c.Path)
		dst = appendEnum(dst, conflictKindTags, string(c.Kind))
		dst = appendString(dst, c.WithTxn)
		dst = appendString(dst, c.WithAgent)
	}
	return dst
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = appendCount(dst, len(ss), ss == nil)
	for _, s := range ss {
		dst = appendString(dst, s)
	}
	return dst
}

// appendCount writes a slice or map length as count+1, or 0 for nil.
func appendCount(dst []byte, n int, isNil bool) []byte {
	if isNil {
		return append(dst, 0)
	}
	return binary.AppendUvarint(dst, uint64(n)+1)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// appendRaw writes bytes as length+1, or 0 for nil.
func appendRaw(dst []byte, b []byte) []byte {
	if b == nil {
		return append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b))+1)
	return append(dst, b...)
}

func appendEnum(dst []byte, table []string, s string) []byte {
	for i, v := range table {
		if v == s {
			return binary.AppendUvarint(dst, uint64(i)+1)
		}
	}
	dst = append(dst, 0)
	return appendString(dst, s)
}

// appendTime writes a time by its instant; the location and any monotonic
// reading are dropped.
func appendTime(dst []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(dst, timeZero)
	}
	if n := t.UnixNano(); time.Unix(0, n).Equal(t) {
		dst = append(dst, timeNanos)
		return binary.AppendVarint(dst, n)
	}
	dst = append(dst, timeSecs)
	dst = binary.AppendVarint(dst, t.Unix())
	return binary.AppendUvarint(dst, uint64(t.Nanosecond()))
}

// The shapes most events take, each allocated as one object rather than
// one per struct: an event with its one payload (and the intent received,
// or the one write applied). A receivedEvent is also the shell Log.Fold
// decodes every event into.
type (
	changePayload struct {
		p intents.Change
		w [1]intents.Applied
	}
	receivedEvent struct {
		ev intents.Event
		p  intents.Received
		in intents.Intent
	}
	decisionEvent struct {
		ev intents.Event
		p  intents.Decision
	}
	changeEvent struct {
		ev intents.Event
		p  intents.Change
		w  [1]intents.Applied
	}
)

// DecodeEvent decodes one record written by AppendEvent, of version
// SchemaVersion or SchemaVersion2. Errors wrap ErrCorrupt (a truncated or
// malformed record, trailing bytes, a length or count past the end, an
// unknown event type, tag or payload mask bit) or ErrVersion (a schema
// version this build cannot read), and name the field and the byte offset at
// fault. DecodeEvent never panics, whatever data holds, and checks every
// length and count against the bytes left before allocating, so it never
// allocates more than a small multiple of len(data) (under 32×, which a test
// checks). The event does not alias data. Times come back in UTC.
func DecodeEvent(data []byte) (*intents.Event, error) {
	return decodeEvent(data, nil)
}

// decodeEvent is DecodeEvent, or with a shell, Log.Fold's thin decoding: the
// event is decoded into the shell, and so is the Received payload of an
// intent event, whose intent keeps its ID, Agent, Kind and Txn only (the
// rest of it is checked as DecodeEvent checks it, but not kept). The other
// payloads are allocated as DecodeEvent allocates them.
func decodeEvent(data []byte, shell *receivedEvent) (*intents.Event, error) {
	r := recordReader{data: data}
	version, err := r.version()
	if err != nil {
		return nil, err
	}
	var env intents.Event
	env.Seq = r.uvarint("seq")
	if r.need("id", len(env.ID)) {
		r.off += copy(env.ID[:], r.data[r.off:])
	}
	env.Time = r.time("time")
	env.Type = r.eventType()
	env.Agent = r.envelopeString("agent")
	env.Intent = r.envelopeString("intent")
	env.Txn = r.envelopeString("txn")
	r.shared = [...]string{env.Agent, env.Intent, env.Txn}

	mask := r.byte("payload mask") // every bit is a known payload
	var mask2 byte
	if version == SchemaVersion2 {
		at := r.off
		mask2 = r.byte("payload mask")
		if mask2&^mask2All != 0 {
			r.failAt(at, "payload mask", "unknown bits %#02x", mask2&^mask2All)
		}
	}
	var mask3 byte
	if mask2&hasMask3 != 0 {
		at := r.off
		mask3 = r.byte("payload mask")
		switch {
		case mask3&^mask3All != 0:
			r.failAt(at, "payload mask", "unknown bits %#02x of the third byte", mask3&^mask3All)
		case mask3 == 0:
			// Its encoding has no third byte: it would not round-trip.
			r.failAt(at, "payload mask", "a third byte of no bits")
		}
	}
	var (
		ev       *intents.Event
		received *intents.Received
		in       *intents.Intent
		decision *intents.Decision
		change   *intents.Change
		applied  []intents.Applied
	)
	switch {
	case r.err != nil:
		return nil, r.err
	case shell != nil:
		*shell = receivedEvent{}
		ev, received, in = &shell.ev, &shell.p, &shell.in
		if mask == hasChange {
			x := &changePayload{}
			change, applied = &x.p, x.w[:]
		}
	case mask2&hasRules != 0:
		ev = &intents.Event{}
	case mask == hasReceived:
		x := &receivedEvent{}
		ev, received, in = &x.ev, &x.p, &x.in
	case mask == hasDecision:
		x := &decisionEvent{}
		ev, decision = &x.ev, &x.p
	case mask == hasChange:
		x := &changeEvent{}
		ev, change, applied = &x.ev, &x.p, x.w[:]
	default:
		ev = &intents.Event{}
	}
	*ev = env
	if mask&hasReceived != 0 {
		r.scope = "received"
		p := received
		if p == nil {
			p = &intents.Received{}
		}
		r.skip = shell != nil
		p.Intent = r.intentPtr("intent", "received.intent", in)
		r.skip = false
		p.Raw = r.raw("raw")
		p.Error = r.string("error")
		ev.Received = p
	}
	if mask&hasDecision != 0 {
		ev.Decision = r.decision(decision)
	}
	if mask&hasChange != 0 {
		r.scope = "change"
		p := change
		if p == nil {
			p = &intents.Change{}
		}
		// path, op, value, old and new version: at least a byte each.
		if n, ok := r.count("writes", 5); ok {
			if n == 1 && applied != nil {
				p.Writes = applied[:n:n]
			} else {
				p.Writes = make([]intents.Applied, n)
			}
			for i := range p.Writes {
				w := &p.Writes[i]
				w.Path = r.string("writes.path")
				w.Op = intents.Op(r.enum("writes.op", opTags))
				w.Value = r.raw("writes.value")
				w.OldVersion = r.uvarint("writes.old_version")
				w.NewVersion = r.uvarint("writes.new_version")
			}
		}
		p.MergedWith = r.strings("merged_with")
		ev.Change = p
	}
	if mask&hasGrant != 0 {
		r.scope = "grant"
		p := &intents.Grant{}
		p.Txn = r.string("txn")
		p.Agent = r.string("agent")
		p.Fence = r.uvarint("fence")
		p.LeaseMS = r.varint("lease_ms")
		p.Expires = r.time("expires")
		p.Reads = r.reads()
		p.Propose = r.intentPtr("propose", "grant.propose", nil)
		ev.Grant = p
	}
	if mask&hasRelease != 0 {
		r.scope = "release"
		p := &intents.Release{}
		p.Txn = r.string("txn")
		p.Agent = r.string("agent")
		p.Cause = intents.ReleaseCause(r.enum("cause", causeTags))
		ev.Release = p
	}
	if mask&hasWait != 0 {
		r.scope = "wait"
		p := &intents.Wait{}
		p.Intent = r.intentPtr("intent", "wait.intent", nil)
		p.Deadline = r.time("deadline")
		p.Conflicts = r.conflicts()
		ev.Wait = p
	}
	if mask&hasNotice != 0 {
		r.scope = "notice"
		p := &intents.Notice{}
		p.Kind = intents.NoticeKind(r.enum("kind", noticeKindTags))
		p.Txn = r.string("txn")
		p.Intent = r.string("intent")
		p.From = r.string("from")
		p.Detail = r.string("detail")
		ev.Notice = p
	}
	if mask&hasResolution != 0 {
		r.scope = "resolution"
		ev.Resolution = r.resolution("resolution")
	}
	if mask2&hasRules != 0 {
		r.scope = "rules"
		p := &intents.Rules{}
		p.File = r.raw("file")
		p.Hash = r.string("hash")
		p.Source = r.string("source")
		ev.Rules = p
	}
	if mask2&hasTrace != 0 {
		r.scope = ""
		// Its own allocation, as the envelope's strings: the engine keeps
		// it on a transaction or a parked intent.
		at := r.off
		if ev.Trace = r.envelopeString("trace"); ev.Trace == "" {
			r.failAt(at, "trace", "empty, with its mask bit set")
		}
	}
	if mask2&hasTraceError != 0 {
		r.scope = "received"
		at := r.off
		msg := r.string("trace_error")
		switch {
		case msg == "":
			r.failAt(at, "trace_error", "empty, with its mask bit set")
		case ev.Received == nil:
			r.failAt(at, "trace_error", "set on an event without a received payload")
		default:
			ev.Received.TraceError = msg
		}
	}
	if mask2&hasNoticeFence != 0 {
		r.scope = "notice"
		at := r.off
		fence := r.uvarint("fence")
		switch {
		case fence == 0:
			r.failAt(at, "fence", "0, with its mask bit set")
		case ev.Notice == nil:
			r.failAt(at, "fence", "set on an event without a notice payload")
		default:
			ev.Notice.Fence = fence
		}
	}
	if mask2&hasVote != 0 {
		r.scope = "vote"
		p := &intents.Vote{}
		p.Case = r.string("case")
		p.Agent = r.string("agent")
		p.Verdict = r.string("verdict")
		p.Rationale = r.string("rationale")
		p.Answer = r.raw("answer")
		if r.presence("resolution") {
			p.Resolution = r.resolution("vote.resolution")
		}
		ev.Vote = p
	}
	if mask2&hasGate != 0 {
		r.scope = "wait"
		at := r.off
		g := &intents.Gate{}
		g.Rule = int(min(r.uvarint("gate.rule"), 1<<31))
		g.Path = r.string("gate.path")
		g.By = r.strings("gate.by")
		g.Quorum = int(min(r.uvarint("gate.quorum"), 1<<31))
		g.Fallback = r.string("gate.fallback")
		g.Review = intents.Reason(r.string("gate.review"))
		g.Refusal = r.string("gate.refusal")
		if r.presence("gate.ask") {
			a := &intents.Ask{}
			a.Question = r.string("gate.ask.question")
			a.Schema = r.raw("gate.ask.schema")
			a.By = r.strings("gate.ask.by")
			a.TimeoutMS = r.varint("gate.ask.timeout_ms")
			g.Ask = a
		}
		if ev.Wait == nil {
			r.failAt(at, "gate", "set on an event without a wait payload")
		} else {
			ev.Wait.Gate = g
		}
	}
	if mask2&hasPanel != 0 {
		r.scope = "wait"
		at := r.off
		pn := &intents.Panel{}
		pn.Quorum = int(min(r.uvarint("panel.quorum"), 1<<31))
		pn.Of = r.string("panel.of")
		if ev.Wait == nil {
			r.failAt(at, "panel", "set on an event without a wait payload")
		} else {
			ev.Wait.Panel = pn
		}
	}
	if mask3&hasShadow != 0 {
		r.scope = "shadow"
		p := &intents.Shadow{}
		p.Kind = r.string("kind")
		p.Mode = r.string("mode")
		p.Rule = r.string("rule")
		p.Decided = r.string("decided")
		p.WouldBe = intents.Outcome(r.enum("would_be", outcomeTags))
		p.Reason = intents.Reason(r.enum("reason", reasonTags))
		p.Detail = r.string("detail")
		ev.Shadow = p
	}
	if mask3&hasRulesShadow != 0 {
		r.scope = "rules"
		at := r.off
		file, hash, mode := r.raw("shadow"), r.string("shadow_hash"), r.string("shadow_mode")
		if ev.Rules == nil {
			r.failAt(at, "shadow", "set on an event without a rules payload")
		} else {
			ev.Rules.Shadow, ev.Rules.ShadowHash, ev.Rules.ShadowMode = file, hash, mode
		}
	}
	if mask3&hasHandoff != 0 {
		r.scope = "handoff"
		p := &intents.Handoff{}
		p.Kind = r.string("kind")
		p.Board = r.string("board")
		p.Shard = r.string("shard")
		p.Nodes = r.raw("nodes")
		p.Seq = r.uvarint("seq")
		ev.Handoff = p
	}
	if mask3&hasXShard != 0 {
		r.scope = "xshard"
		p := &intents.XShard{}
		p.Phase = r.string("phase")
		p.Intent = r.string("intent")
		p.Coord = r.string("coord")
		if n, ok := r.count("parts", 2); ok {
			p.Parts = make([]intents.XPart, n)
			for i := range p.Parts {
				p.Parts[i].Shard = r.string("parts.shard")
				p.Parts[i].Intent = r.intentPtr("parts.intent", "xshard.parts.intent", nil)
				r.scope = "xshard"
			}
		}
		if r.presence("decision") {
			p.Decision = r.decision(nil)
		}
		ev.XShard = p
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return ev, nil
}

// DecodeDecision decodes a record written by AppendDecision, with the same
// errors and guarantees as DecodeEvent. It reads SchemaVersion2 records as
// well, which lay a decision out the same way (only an event's payload mask
// differs), though AppendDecision never writes one.
func DecodeDecision(data []byte) (*intents.Decision, error) {
	r := recordReader{data: data}
	if _, err := r.version(); err != nil {
		return nil, err
	}
	d := r.decision(nil)
	if err := r.end(); err != nil {
		return nil, err
	}
	return d, nil
}

// recordReader decodes a record. The first failure sticks: later reads
// return zero values and consume nothing, so decoding code checks r.err once,
// at the end. Field names are constants, qualified by scope only when an
// error is built, so that decoding allocates nothing for them. A payload
// string equal to one of the envelope's shares its memory.
type recordReader struct {
	data   []byte
	off    int
	scope  string    // the payload or intent being read: "grant", "grant.propose"
	shared [3]string // the envelope's agent, intent and txn, which payloads repeat
	arena  []byte    // a copy of data, made at the first string or bytes read (see copied)
	skip   bool      // fields are checked and passed over, not kept
	err    error
}

func (r *recordReader) failAt(off int, field, format string, args ...any) {
	if r.err != nil {
		return
	}
	if r.scope != "" {
		field = r.scope + "." + field
	}
	r.err = fmt.Errorf("%w: byte %d: %s: %s", ErrCorrupt, off, field, fmt.Sprintf(format, args...))
}

func (r *recordReader) left() int { return len(r.data) - r.off }

// need reports whether n more bytes are there, failing if not.
func (r *recordReader) need(field string, n int) bool {
	if r.err != nil {
		return false
	}
	if r.left() < n {
		r.failAt(r.off, field, "truncated: need %d bytes, %d left", n, r.left())
		return false
	}
	return true
}

// version reads the version byte, SchemaVersion or SchemaVersion2.
func (r *recordReader) version() (byte, error) {
	if len(r.data) == 0 {
		return 0, fmt.Errorf("%w: byte 0: empty record, no schema version", ErrCorrupt)
	}
	v := r.data[0]
	if v != SchemaVersion && v != SchemaVersion2 {
		return 0, fmt.Errorf("%w %d at byte 0 (this build reads %d and %d)", ErrVersion, v, SchemaVersion, SchemaVersion2)
	}
	r.off = 1
	return v, nil
}

func (r *recordReader) end() error {
	r.scope = ""
	if r.err == nil && r.off != len(r.data) {
		r.failAt(r.off, "end", "%d trailing bytes", r.left())
	}
	return r.err
}

func (r *recordReader) byte(field string) byte {
	if !r.need(field, 1) {
		return 0
	}
	b := r.data[r.off]
	r.off++
	return b
}

func (r *recordReader) uvarint(field string) uint64 {
	if r.err != nil {
		return 0
	}
	if r.off < len(r.data) && r.data[r.off] < 0x80 { // one byte: most lengths, counts and tags
		r.off++
		return uint64(r.data[r.off-1])
	}
	v, n := binary.Uvarint(r.data[r.off:])
	if !r.advance(field, n) {
		return 0
	}
	return v
}

func (r *recordReader) varint(field string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.data[r.off:])
	if !r.advance(field, n) {
		return 0
	}
	return v
}

// advance moves past a varint of n bytes, as encoding/binary reports it:
// 0 when the bytes ran out, negative when the value overflows 64 bits.
func (r *recordReader) advance(field string, n int) bool {
	switch {
	case n == 0:
		r.failAt(r.off, field, "truncated varint")
		return false
	case n < 0:
		r.failAt(r.off, field, "varint overflows 64 bits")
		return false
	}
	r.off += n
	return true
}

// span passes over a string and returns where its bytes start; ok is
// false for the empty string, or on failure.
func (r *recordReader) span(field string) (start int, ok bool) {
	at := r.off
	n := r.uvarint(field)
	switch {
	case r.err != nil || n == 0:
		return 0, false
	case n > uint64(r.left()):
		r.failAt(at, field, "length %d past the end (%d bytes left)", n, r.left())
		return 0, false
	}
	start = r.off
	r.off += int(n)
	return start, true
}

func (r *recordReader) string(field string) string {
	start, ok := r.span(field)
	if !ok || r.skip {
		return ""
	}
	b := r.data[start:r.off]
	for _, s := range r.shared {
		if s == string(b) { // no allocation: the compiler compares in place
			return s
		}
	}
	return unsafe.String(&r.copied(start, r.off)[0], r.off-start)
}

// envelopeString reads a string of the envelope. It takes an allocation of
// its own rather than the record's copy: an intent event folded thin needs
// no other string, and the envelope's are the ones the engine keeps (agents
// and ids in its maps) long after the rest of the event is gone.
func (r *recordReader) envelopeString(field string) string {
	start, ok := r.span(field)
	if !ok {
		return ""
	}
	return string(r.data[start:r.off])
}

// copied returns data[from:to] from a copy of the record made once, when
// first asked, so that a record's strings and bytes take one allocation
// between them. Its strings are safe from its byte slices: every slice it
// hands out is capped at its own end, and no two overlap, so no write
// through one can reach the bytes of another or of a string.
func (r *recordReader) copied(from, to int) []byte {
	if r.arena == nil {
		r.arena = bytes.Clone(r.data)
	}
	return r.arena[from:to:to]
}

// raw reads bytes written by appendRaw: nil, or a copy, possibly empty.
func (r *recordReader) raw(field string) []byte {
	at := r.off
	n := r.uvarint(field)
	if r.err != nil || n == 0 {
		return nil
	}
	n--
	if n > uint64(r.left()) {
		r.failAt(at, field, "length %d past the end (%d bytes left)", n, r.left())
		return nil
	}
	start := r.off
	r.off += int(n)
	if r.skip {
		return nil
	}
	if n == 0 {
		return []byte{} // no need to copy the record for it
	}
	return r.copied(start, r.off)
}

// count reads a slice or map length written by appendCount; ok is false
// for nil (or on failure). Every element takes at least minSize bytes, so a
// count the bytes left cannot hold is corrupt, and checking it bounds what
// the caller allocates.
func (r *recordReader) count(field string, minSize int) (n int, ok bool) {
	at := r.off
	c := r.uvarint(field)
	if r.err != nil || c == 0 {
		return 0, false
	}
	c--
	if c > uint64(r.left()/minSize) {
		r.failAt(at, field, "count %d past the end (%d bytes left)", c, r.left())
		return 0, false
	}
	return int(c), true
}

func (r *recordReader) enum(field string, table []string) string {
	at := r.off
	tag := r.uvarint(field)
	switch {
	case r.err != nil:
		return ""
	case tag == 0:
		return r.string(field)
	case tag > uint64(len(table)):
		r.failAt(at, field, "unknown tag %d", tag)
		return ""
	}
	return table[tag-1]
}

func (r *recordReader) eventType() intents.EventType {
	at := r.off
	c := r.byte("type")
	if r.err != nil {
		return ""
	}
	if c == 0 || int(c) > len(eventTypeCodes) {
		r.failAt(at, "type", "unknown event type code %d", c)
		return ""
	}
	return eventTypeCodes[c-1]
}

// resolution reads a Resolution's fields (appendResolution); scope names
// where, for a replacement's errors.
func (r *recordReader) resolution(scope string) *intents.Resolution {
	p := &intents.Resolution{}
	p.Escalation = r.string("escalation")
	p.Arbiter = r.string("arbiter")
	p.Winners = r.strings("winners")
	p.Losers = r.strings("losers")
	p.Replacement = r.intentPtr("replacement", scope+".replacement", nil)
	p.Rationale = r.string("rationale")
	return p
}

// presence reads a pointer's presence byte.
func (r *recordReader) presence(field string) bool {
	at := r.off
	switch b := r.byte(field); {
	case r.err != nil:
		return false
	case b > 1:
		r.failAt(at, field, "presence byte %d", b)
		return false
	default:
		return b == 1
	}
}

// time reads a time.Time, which cannot be nil.
func (r *recordReader) time(field string) time.Time {
	t, isNil := r.timeOrNil(field)
	if isNil {
		r.failAt(r.off-1, field, "nil tag for a time that cannot be nil")
	}
	return t
}

// timeOrNil reads a time that may be nil (a *time.Time).
func (r *recordReader) timeOrNil(field string) (t time.Time, isNil bool) {
	at := r.off
	switch tag := r.byte(field); {
	case r.err != nil:
		return time.Time{}, false
	case tag == timeNil:
		return time.Time{}, true
	case tag == timeZero:
		return time.Time{}, false
	case tag == timeNanos:
		return time.Unix(0, r.varint(field)).UTC(), false
	case tag == timeSecs:
		sec := r.varint(field)
		at := r.off
		nsec := r.uvarint(field)
		if nsec >= 1e9 {
			r.failAt(at, field, "nanoseconds %d out of range", nsec)
			return time.Time{}, false
		}
		return time.Unix(sec, int64(nsec)).UTC(), false
	default:
		r.failAt(at, field, "unknown time tag %d", tag)
		return time.Time{}, false
	}
}

func (r *recordReader) strings(field string) []string {
	n, ok := r.count(field, 1)
	if !ok {
		return nil
	}
	if r.skip {
		for range n {
			r.string(field)
		}
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = r.string(field)
	}
	return ss
}

func (r *recordReader) reads() []intents.Read {
	n, ok := r.count("reads", 2) // path, version presence
	if !ok {
		return nil
	}
	if r.skip {
		for range n {
			r.string("reads.path")
			if r.presence("reads.version") {
				r.uvarint("reads.version")
			}
		}
		return nil
	}
	rs := make([]intents.Read, n)
	for i := range rs {
		rs[i].Path = r.string("reads.path")
		if r.presence("reads.version") {
			v := r.uvarint("reads.version")
			rs[i].Version = &v
		}
	}
	return rs
}

func (r *recordReader) conflicts() []intents.Conflict {
	n, ok := r.count("conflicts", 4) // path, kind, with_txn, with_agent
	if !ok {
		return nil
	}
	cs := make([]intents.Conflict, n)
	for i := range cs {
		c := &cs[i]
		c.Path = r.string("conflicts.path")
		c.Kind = intents.ConflictKind(r.enum("conflicts.kind", conflictKindTags))
		c.WithTxn = r.string("conflicts.with_txn")
		c.WithAgent = r.string("conflicts.with_agent")
	}
	return cs
}

// intentPtr reads an *intents.Intent: field names its presence byte in the
// current scope, scope names the intent's fields. The intent is read into
// in if it is not nil.
func (r *recordReader) intentPtr(field, scope string, in *intents.Intent) *intents.Intent {
	if !r.presence(field) {
		return nil
	}
	outer := r.scope
	r.scope = scope
	if in == nil {
		in = &intents.Intent{}
	}
	skip := r.skip
	r.skip = false // the envelope is always kept
	in.ID = r.string("id")
	in.Agent = r.string("agent")
	in.Kind = intents.Kind(r.enum("kind", kindTags))
	in.Txn = r.string("txn")
	r.skip = skip
	in.Fence = r.uvarint("fence")
	in.Action = r.string("action")
	in.Reads = r.reads()
	if n, ok := r.count("writes", 3); ok && r.skip { // path, op, value
		for range n {
			r.string("writes.path")
			r.enum("writes.op", opTags)
			r.raw("writes.value")
		}
	} else if ok {
		in.Writes = make([]intents.Write, n)
		for i := range in.Writes {
			w := &in.Writes[i]
			w.Path = r.string("writes.path")
			w.Op = intents.Op(r.enum("writes.op", opTags))
			w.Value = r.raw("writes.value")
		}
	}
	in.Pre = r.strings("pre")
	in.Post = r.strings("post")
	in.Priority = r.varint("priority")
	in.LeaseMS = r.varint("lease_ms")
	in.OnConflict = intents.OnConflict(r.enum("on_conflict", onConflictTags))
	in.WaitMS = r.varint("wait_ms")
	in.Meta = r.raw("meta")
	if r.skip { // the numbers were read on the way; keep the envelope only
		*in = intents.Intent{ID: in.ID, Agent: in.Agent, Kind: in.Kind, Txn: in.Txn}
	}
	r.scope = outer
	return in
}

// decision reads a Decision payload, into d if it is not nil.
func (r *recordReader) decision(d *intents.Decision) *intents.Decision {
	r.scope = "decision"
	if d == nil {
		d = &intents.Decision{}
	}
	d.Intent = r.string("intent")
	d.Agent = r.string("agent")
	d.Outcome = intents.Outcome(r.enum("outcome", outcomeTags))
	d.Reason = intents.Reason(r.enum("reason", reasonTags))
	d.Detail = r.string("detail")
	d.Txn = r.string("txn")
	d.Fence = r.uvarint("fence")
	if t, isNil := r.timeOrNil("lease_expires"); !isNil && r.err == nil {
		d.LeaseExpires = &t
	}
	d.Conflicts = r.conflicts()
	if n, ok := r.count("versions", 2); ok { // key, value
		// Keys increase, so all but the first take at least 2 bytes:
		// size the map by that to keep the allocation a small multiple.
		d.Versions = make(map[string]uint64, min(n, (r.left()+1)/3))
		prev := ""
		for i := range n {
			at := r.off
			k := r.string("versions.key")
			v := r.uvarint("versions.value")
			if r.err != nil {
				break
			}
			if i > 0 && k <= prev {
				r.failAt(at, "versions.key", "%q out of order after %q", k, prev)
				break
			}
			d.Versions[k] = v
			prev = k
		}
	}
	d.Rev = r.uvarint("rev")
	at := r.off
	flags := r.byte("flags")
	if flags&^flagAll != 0 {
		r.failAt(at, "flags", "unknown bits %#02x", flags&^flagAll)
	}
	d.Retryable = flags&flagRetryable != 0
	d.Duplicate = flags&flagDuplicate != 0
	d.MergedWith = r.strings("merged_with")
	return d
}
