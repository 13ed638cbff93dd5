package intents

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// The coordinator encodes a decision for every answer and a change for
// every write it puts on the feed; an agent's client encodes every intent
// it sends. encoding/json finds each field by reflection every time, which
// made these the largest encodings of an intent's path; the functions
// below write the same bytes by hand. Their output is encoding/json's,
// byte for byte (TestMarshalMatchesJSON and FuzzMarshalMatchesJSON hold
// them to it): wherever a value is unusual (a string that needs escaping,
// a raw value that is not already compact ASCII, a time outside RFC 3339's
// years), the value alone is handed to encoding/json, which encodes a
// value the same wherever it stands.

// AppendDecisionJSON appends d encoded as json.Marshal encodes it.
func AppendDecisionJSON(dst []byte, d *Decision) ([]byte, error) {
	if d == nil {
		return append(dst, "null"...), nil
	}
	dst = slices.Grow(dst, 160) // a usual decision's size: one allocation
	var err error
	dst = append(dst, `{"intent":`...)
	dst = appendJSONString(dst, d.Intent)
	dst = append(dst, `,"agent":`...)
	dst = appendJSONString(dst, d.Agent)
	dst = append(dst, `,"outcome":`...)
	dst = appendJSONString(dst, string(d.Outcome))
	dst = appendOmitEmpty(dst, `,"reason":`, string(d.Reason))
	dst = appendOmitEmpty(dst, `,"detail":`, d.Detail)
	dst = appendOmitEmpty(dst, `,"txn":`, d.Txn)
	if d.Fence != 0 {
		dst = append(dst, `,"fence":`...)
		dst = strconv.AppendUint(dst, d.Fence, 10)
	}
	if d.LeaseExpires != nil {
		dst = append(dst, `,"lease_expires":`...)
		if dst, err = appendJSONTime(dst, *d.LeaseExpires); err != nil {
			return nil, err
		}
	}
	if len(d.Conflicts) > 0 {
		dst = append(dst, `,"conflicts":[`...)
		for i, c := range d.Conflicts {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"path":`...)
			dst = appendJSONString(dst, c.Path)
			dst = append(dst, `,"kind":`...)
			dst = appendJSONString(dst, string(c.Kind))
			dst = appendOmitEmpty(dst, `,"with_txn":`, c.WithTxn)
			dst = appendOmitEmpty(dst, `,"with_agent":`, c.WithAgent)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if len(d.Versions) > 0 {
		dst = append(dst, `,"versions":{`...)
		keys := make([]string, 0, len(d.Versions))
		for k := range d.Versions {
			keys = append(keys, k)
		}
		slices.Sort(keys) // as encoding/json orders a map's keys
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			dst = strconv.AppendUint(dst, d.Versions[k], 10)
		}
		dst = append(dst, '}')
	}
	if d.Rev != 0 {
		dst = append(dst, `,"rev":`...)
		dst = strconv.AppendUint(dst, d.Rev, 10)
	}
	dst = append(dst, `,"retryable":`...)
	dst = strconv.AppendBool(dst, d.Retryable)
	if len(d.MergedWith) > 0 {
		dst = append(dst, `,"merged_with":`...)
		dst = appendJSONStrings(dst, d.MergedWith)
	}
	if d.Duplicate {
		dst = append(dst, `,"duplicate":true`...)
	}
	if len(d.Warnings) > 0 {
		dst = append(dst, `,"warnings":[`...)
		for i, w := range d.Warnings {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"rule":`...)
			dst = appendJSONString(dst, w.Rule)
			dst = append(dst, `,"would_be":`...)
			dst = appendJSONString(dst, w.WouldBe)
			dst = appendOmitEmpty(dst, `,"detail":`, w.Detail)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

// AppendEventJSON appends ev encoded as json.Marshal encodes it. Written
// by hand are the envelope and what a change or a decision event carries,
// the events the coordinator sends most; any other event is handed to
// encoding/json whole.
func AppendEventJSON(dst []byte, ev *Event) ([]byte, error) {
	if ev == nil {
		return append(dst, "null"...), nil
	}
	if ev.Received != nil || ev.Grant != nil || ev.Release != nil || ev.Wait != nil || ev.Notice != nil ||
		ev.Resolution != nil || ev.Rules != nil || ev.Vote != nil || ev.Shadow != nil || ev.Handoff != nil || ev.XShard != nil {
		data, err := json.Marshal(ev)
		if dst == nil {
			return data, err // nothing to append to: no copy
		}
		return append(dst, data...), err
	}
	var err error
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, ev.Seq, 10)
	dst = append(dst, `,"id":"`...)
	dst = append(dst, ev.ID.String()...) // Crockford base32: nothing to escape
	dst = append(dst, `","time":`...)
	if dst, err = appendJSONTime(dst, ev.Time); err != nil {
		return nil, err
	}
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, string(ev.Type))
	dst = appendOmitEmpty(dst, `,"agent":`, ev.Agent)
	dst = appendOmitEmpty(dst, `,"intent":`, ev.Intent)
	dst = appendOmitEmpty(dst, `,"txn":`, ev.Txn)
	dst = appendOmitEmpty(dst, `,"trace":`, ev.Trace)
	if ev.Decision != nil {
		dst = append(dst, `,"decision":`...)
		if dst, err = AppendDecisionJSON(dst, ev.Decision); err != nil {
			return nil, err
		}
	}
	if c := ev.Change; c != nil {
		dst = append(dst, `,"change":{"writes":`...)
		if c.Writes == nil {
			dst = append(dst, "null"...)
		} else {
			dst = append(dst, '[')
			for i := range c.Writes {
				if i > 0 {
					dst = append(dst, ',')
				}
				if dst, err = appendApplied(dst, &c.Writes[i]); err != nil {
					return nil, err
				}
			}
			dst = append(dst, ']')
		}
		if len(c.MergedWith) > 0 {
			dst = append(dst, `,"merged_with":`...)
			dst = appendJSONStrings(dst, c.MergedWith)
		}
		if len(c.Redacted) > 0 {
			dst = append(dst, `,"redacted":`...)
			dst = appendJSONStrings(dst, c.Redacted)
		}
		dst = append(dst, '}')
	}
	return append(dst, '}'), nil
}

// AppendIntentJSON appends in encoded as json.Marshal encodes it: what an
// agent's client sends for every intent.
func AppendIntentJSON(dst []byte, in *Intent) ([]byte, error) {
	if in == nil {
		return append(dst, "null"...), nil
	}
	dst = slices.Grow(dst, 192) // a usual intent's size: one allocation
	var err error
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, in.ID)
	dst = append(dst, `,"agent":`...)
	dst = appendJSONString(dst, in.Agent)
	dst = append(dst, `,"kind":`...)
	dst = appendJSONString(dst, string(in.Kind))
	dst = appendOmitEmpty(dst, `,"txn":`, in.Txn)
	if in.Fence != 0 {
		dst = append(dst, `,"fence":`...)
		dst = strconv.AppendUint(dst, in.Fence, 10)
	}
	dst = appendOmitEmpty(dst, `,"action":`, in.Action)
	if len(in.Reads) > 0 {
		dst = append(dst, `,"reads":[`...)
		for i, r := range in.Reads {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"path":`...)
			dst = appendJSONString(dst, r.Path)
			if r.Version != nil {
				dst = append(dst, `,"version":`...)
				dst = strconv.AppendUint(dst, *r.Version, 10)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if len(in.Writes) > 0 {
		dst = append(dst, `,"writes":[`...)
		for i, w := range in.Writes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"path":`...)
			dst = appendJSONString(dst, w.Path)
			dst = append(dst, `,"op":`...)
			dst = appendJSONString(dst, string(w.Op))
			if len(w.Value) > 0 {
				dst = append(dst, `,"value":`...)
				if dst, err = appendRaw(dst, w.Value); err != nil {
					return nil, err
				}
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if len(in.Pre) > 0 {
		dst = append(dst, `,"pre":`...)
		dst = appendJSONStrings(dst, in.Pre)
	}
	if len(in.Post) > 0 {
		dst = append(dst, `,"post":`...)
		dst = appendJSONStrings(dst, in.Post)
	}
	if in.Priority != 0 {
		dst = append(dst, `,"priority":`...)
		dst = strconv.AppendInt(dst, in.Priority, 10)
	}
	if in.LeaseMS != 0 {
		dst = append(dst, `,"lease_ms":`...)
		dst = strconv.AppendInt(dst, in.LeaseMS, 10)
	}
	dst = appendOmitEmpty(dst, `,"on_conflict":`, string(in.OnConflict))
	if in.WaitMS != 0 {
		dst = append(dst, `,"wait_ms":`...)
		dst = strconv.AppendInt(dst, in.WaitMS, 10)
	}
	if len(in.Meta) > 0 {
		dst = append(dst, `,"meta":`...)
		if dst, err = appendRaw(dst, in.Meta); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

func appendApplied(dst []byte, w *Applied) ([]byte, error) {
	dst = append(dst, `{"path":`...)
	dst = appendJSONString(dst, w.Path)
	dst = append(dst, `,"op":`...)
	dst = appendJSONString(dst, string(w.Op))
	if len(w.Value) > 0 {
		dst = append(dst, `,"value":`...)
		var err error
		if dst, err = appendRaw(dst, w.Value); err != nil {
			return nil, err
		}
	}
	dst = append(dst, `,"old_version":`...)
	dst = strconv.AppendUint(dst, w.OldVersion, 10)
	dst = append(dst, `,"new_version":`...)
	dst = strconv.AppendUint(dst, w.NewVersion, 10)
	return append(dst, '}'), nil
}

// appendRaw appends a raw value as encoding/json writes it.
func appendRaw(dst []byte, v json.RawMessage) ([]byte, error) {
	if plainJSON(v) {
		return append(dst, v...), nil
	}
	// encoding/json compacts a raw value, escapes its HTML characters and
	// U+2028/2029, and refuses one that is not JSON.
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst, data...), nil
}

// appendJSONString appends s quoted as encoding/json quotes it.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			data, _ := json.Marshal(s) // a string always encodes
			return append(dst, data...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendOmitEmpty appends member (`,"name":`) and s quoted, unless s is
// empty: a field tagged omitempty.
func appendOmitEmpty(dst []byte, member, s string) []byte {
	if s == "" {
		return dst
	}
	dst = append(dst, member...)
	return appendJSONString(dst, s)
}

func appendJSONStrings(dst []byte, ss []string) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, s)
	}
	return append(dst, ']')
}

// appendJSONTime appends t as its MarshalJSON writes it: RFC 3339 with
// nanoseconds, and an error for a year RFC 3339 cannot write.
func appendJSONTime(dst []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		data, err := json.Marshal(t)
		return append(dst, data...), err
	}
	if _, off := t.Zone(); off <= -24*60*60 || off >= 24*60*60 {
		data, err := json.Marshal(t)
		return append(dst, data...), err
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), nil
}

// plainJSON reports whether a raw value is one encoding/json would copy
// as it is: printable ASCII with nothing to escape and no white space,
// and JSON.
func plainJSON(v []byte) bool {
	for _, c := range v {
		if c <= ' ' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return json.Valid(v)
}
