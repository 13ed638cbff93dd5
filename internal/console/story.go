package console

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/coagent/coagent/intents"
	"github.com/oklog/ulid/v2"
)

// storyPages bounds how much of the log one story reads per query.
const storyPages = 50

// maxQuery bounds the story's q: a whole traceparent (55 characters) is the
// longest thing it takes, and an answer never quotes more than that back.
const maxQuery = 64

// traceID matches a W3C trace id (32 hex digits) or a whole traceparent.
var traceID = regexp.MustCompile(`^([0-9a-f]{2}-)?[0-9a-f]{32}(-[0-9a-f]{16}-[0-9a-f]{2})?$`)

// story answers every event of one intent, in log order (?q=ID): an
// intent id, or a trace id found by log.query's trace filter.
//
// An intent's events are those log.query's intent filter finds (its own,
// the notices sent to the agents it waits on, the arbiter's resolution of
// its case) and those of the transactions it opened or committed, found by
// txn: their renewals, notices and end.
func (b *backend) story(ctx context.Context, r *http.Request) (any, error) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	switch {
	case q == "":
		return nil, badRequest("q: give an intent id (a ULID) or a trace id")
	case len(q) > maxQuery:
		return nil, badRequest("q %q: %d bytes, longer than any intent id (26) or traceparent (55)", intents.Clip(q, 40), len(q))
	case traceID.MatchString(strings.ToLower(q)):
		return b.traceStory(ctx, strings.ToLower(q))
	}
	id := strings.ToUpper(q)
	if _, err := ulid.ParseStrict(id); err != nil {
		return nil, badRequest("q %q: neither an intent id (a ULID) nor a trace id (32 hex digits): %v", q, err)
	}
	var d intents.Decision
	if err := b.request(ctx, intents.APIDecisionGet, map[string]string{"intent": id}, &d); err != nil {
		return nil, err
	}
	found := map[uint64]*intents.Event{}
	txns := map[string]bool{}
	if d.Txn != "" {
		txns[d.Txn] = true
	}
	complete, err := b.scanLog(ctx, logQuery{Intent: id}, storyPages, func(ev *intents.Event) bool {
		found[ev.Seq] = ev
		// A waiting notice names the holder's transaction, not its own.
		if ev.Txn != "" && ev.Type != intents.EventNotice {
			txns[ev.Txn] = true
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	for txn := range txns {
		done, err := b.scanLog(ctx, logQuery{Txn: txn}, storyPages, func(ev *intents.Event) bool {
			found[ev.Seq] = ev
			return true
		})
		if err != nil {
			return nil, err
		}
		complete = complete && done
	}
	return storyAnswer(id, "", &d, found, complete), nil
}

// traceStory answers the events log.query finds by trace id. A
// coordinator without the trace filter answers invalid, which the page
// shows as it is.
func (b *backend) traceStory(ctx context.Context, trace string) (any, error) {
	if parts := strings.Split(trace, "-"); len(parts) == 4 {
		trace = parts[1]
	}
	found := map[uint64]*intents.Event{}
	complete, err := b.scanLog(ctx, logQuery{Trace: trace}, storyPages, func(ev *intents.Event) bool {
		found[ev.Seq] = ev
		return true
	})
	if err != nil {
		return nil, err
	}
	return storyAnswer("", trace, nil, found, complete), nil
}

func storyAnswer(id, trace string, d *intents.Decision, found map[uint64]*intents.Event, complete bool) map[string]any {
	evs := make([]json.RawMessage, 0, len(found))
	seqs := make([]uint64, 0, len(found))
	for seq := range found {
		seqs = append(seqs, seq)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, seq := range seqs {
		// Marshalled again as the coordinator sent it; an event that does
		// not encode is not one the coordinator could have sent.
		data, err := json.Marshal(found[seq])
		if err == nil {
			evs = append(evs, data)
		}
	}
	out := map[string]any{"events": evs, "complete": complete}
	if id != "" {
		out["intent"] = id
	}
	if trace != "" {
		out["trace"] = trace
	}
	if d != nil {
		out["decision"] = d
	}
	return out
}
