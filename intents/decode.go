package intents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"
)

// Limits on one intent beyond its encoded size.
const (
	MaxReads      = 1024
	MaxWrites     = 1024
	MaxConditions = 64
	MaxExprLen    = 4096
	MaxActionLen  = 256
	MaxTxnLen     = 128
)

// ValidationError says which field of an intent is wrong, the value it had
// and why. Callers branch on it with errors.As; it becomes an `invalid`
// decision whose detail is Error().
type ValidationError struct {
	Field  string // JSON path of the field: "writes[2].op"; empty for the document itself
	Value  string // the offending value, quoted or abbreviated
	Reason string
}

func (e *ValidationError) Error() string {
	switch {
	case e.Field == "":
		return "intent: " + e.Reason
	case e.Value == "":
		return fmt.Sprintf("intent field %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("intent field %s = %s: %s", e.Field, e.Value, e.Reason)
}

func invalid(field, value, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// quote shortens and quotes a value for an error message.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strconv.Quote(s)
}

// Decode parses one intent strictly — unknown fields, wrong types and
// trailing data are errors — and validates it. Every error is a
// *ValidationError.
func Decode(data []byte) (*Intent, error) {
	if len(data) > MaxIntentSize {
		return nil, invalid("", "", "%d bytes is larger than the %d-byte limit", len(data), MaxIntentSize)
	}
	in := new(Intent)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(in); err != nil {
		return nil, decodeError(err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, invalid("", "", "trailing data after the intent object")
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return in, nil
}

// decodeError turns encoding/json's errors into ValidationErrors that name
// the field.
func decodeError(err error) *ValidationError {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return invalid("", "", "a JSON %s, not an object", typeErr.Value)
		}
		return invalid(field, "", "a JSON %s where %s is wanted", typeErr.Value, typeErr.Type)
	case errors.As(err, &syntaxErr):
		return invalid("", "", "not JSON: %v at byte %d", syntaxErr, syntaxErr.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "", "not JSON: unexpected end of input")
	}
	// encoding/json reports an unknown field only as text; its form has been
	// stable since Go 1.10.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return invalid(strings.Trim(name, `"`), "", "unknown field")
	}
	return invalid("", "", "not a valid intent: %v", err)
}

// Validate checks the intent against SPEC §1–2 and returns the first problem
// as a *ValidationError.
func (in *Intent) Validate() error {
	if in.ID == "" {
		return invalid("id", "", "missing; want a ULID")
	}
	if _, err := ulid.ParseStrict(in.ID); err != nil {
		return invalid("id", quote(in.ID), "not a ULID: %v", err)
	}
	// One intent, one key: a lowercase spelling of the same ULID would be
	// another idempotency key (and another Nats-Msg-Id).
	if strings.ToUpper(in.ID) != in.ID {
		return invalid("id", quote(in.ID), "not in canonical upper case")
	}
	if in.Agent == "" {
		return invalid("agent", "", "missing")
	}
	if !ValidSegment(in.Agent) {
		return invalid("agent", quote(in.Agent), "not 1–%d letters, digits, '_' or '-'", MaxSegmentLen)
	}
	switch in.Kind {
	case "":
		return invalid("kind", "", "missing; want one of %s", names(Kinds))
	case KindApply, KindPropose, KindCommit, KindAbort, KindRenew:
	default:
		return invalid("kind", quote(string(in.Kind)), "want one of %s", names(Kinds))
	}
	if in.Kind.Transactional() {
		if in.Txn == "" {
			return invalid("txn", "", "missing; a %s names the transaction of its grant", in.Kind)
		}
		if len(in.Txn) > MaxTxnLen {
			return invalid("txn", quote(in.Txn), "longer than %d bytes", MaxTxnLen)
		}
		if in.Fence == 0 {
			return invalid("fence", "", "missing; a %s carries the fencing token of its grant", in.Kind)
		}
	} else {
		if in.Txn != "" {
			return invalid("txn", quote(in.Txn), "only commit, abort and renew name a transaction")
		}
		if in.Fence != 0 {
			return invalid("fence", strconv.FormatUint(in.Fence, 10), "only commit, abort and renew carry a fence")
		}
	}
	if len(in.Action) > MaxActionLen {
		return invalid("action", quote(in.Action), "longer than %d bytes", MaxActionLen)
	}
	if err := in.validateReads(); err != nil {
		return err
	}
	if err := in.validateWrites(); err != nil {
		return err
	}
	if err := validateConditions("pre", in.Pre); err != nil {
		return err
	}
	if err := validateConditions("post", in.Post); err != nil {
		return err
	}
	if in.LeaseMS < 0 {
		return invalid("lease_ms", strconv.FormatInt(in.LeaseMS, 10), "negative")
	}
	if in.LeaseMS != 0 && in.Kind != KindPropose && in.Kind != KindRenew {
		return invalid("lease_ms", strconv.FormatInt(in.LeaseMS, 10), "only propose and renew take a lease")
	}
	switch in.OnConflict {
	case "", OnConflictReject, OnConflictWait, OnConflictEscalate:
	default:
		return invalid("on_conflict", quote(string(in.OnConflict)), "want one of reject, wait, escalate")
	}
	if in.WaitMS < 0 {
		return invalid("wait_ms", strconv.FormatInt(in.WaitMS, 10), "negative")
	}
	if len(in.Meta) > 0 && firstByte(in.Meta) != '{' {
		return invalid("meta", quote(string(in.Meta)), "not a JSON object")
	}
	return nil
}

func (in *Intent) validateReads() error {
	if len(in.Reads) > MaxReads {
		return invalid("reads", strconv.Itoa(len(in.Reads)), "more than %d reads", MaxReads)
	}
	for i, r := range in.Reads {
		if err := CheckPath(r.Path); err != nil {
			return invalid(fmt.Sprintf("reads[%d].path", i), quote(r.Path), "%v", err)
		}
	}
	return nil
}

func (in *Intent) validateWrites() error {
	switch {
	case len(in.Writes) > MaxWrites:
		return invalid("writes", strconv.Itoa(len(in.Writes)), "more than %d writes", MaxWrites)
	case len(in.Writes) == 0 && (in.Kind == KindApply || in.Kind == KindPropose):
		return invalid("writes", "", "empty; %s must write at least one path", in.Kind)
	case len(in.Writes) > 0 && (in.Kind == KindAbort || in.Kind == KindRenew):
		return invalid("writes", "", "%s takes no writes", in.Kind)
	}
	// Values are required wherever they will be applied; a propose only
	// declares its write set.
	needValues := in.Kind != KindPropose
	for i, w := range in.Writes {
		if err := CheckPath(w.Path); err != nil {
			return invalid(fmt.Sprintf("writes[%d].path", i), quote(w.Path), "%v", err)
		}
		if err := checkValue(i, w, needValues); err != nil {
			return err
		}
	}
	// Writes of one intent must not overlap: their order would matter and
	// the post-state would depend on it.
	if i, j, ok := overlapping(in.Writes); ok {
		return invalid(fmt.Sprintf("writes[%d].path", i), quote(in.Writes[i].Path),
			"overlaps writes[%d].path %q", j, in.Writes[j].Path)
	}
	return nil
}

// overlapping finds a write whose path overlaps an earlier one's: i is the
// later, j the earlier.
func overlapping(ws []Write) (i, j int, ok bool) {
	if len(ws) <= 16 {
		for i := range ws {
			for j := range i {
				if Overlaps(ws[i].Path, ws[j].Path) {
					return i, j, true
				}
			}
		}
		return 0, 0, false
	}
	// exact holds each write's path, under each strict prefix of one; both
	// map to indexes into ws.
	exact := make(map[string]int, len(ws))
	under := make(map[string]int, len(ws))
	for i, w := range ws {
		j, clash := exact[w.Path]
		if !clash {
			j, clash = under[w.Path]
		}
		for p := w.Path; !clash; {
			k := strings.LastIndexByte(p, '.')
			if k < 0 {
				break
			}
			p = p[:k]
			j, clash = exact[p]
			if !clash {
				under[p] = i
			}
		}
		if clash {
			return i, j, true
		}
		exact[w.Path] = i
	}
	return 0, 0, false
}

func checkValue(i int, w Write, needValues bool) error {
	field := func() string { return fmt.Sprintf("writes[%d]", i) }
	has := len(w.Value) > 0
	switch w.Op {
	case "":
		return invalid(field()+".op", "", "missing; want one of %s", names(Ops))
	case OpDelete:
		if has {
			return invalid(field()+".value", quote(string(w.Value)), "delete takes no value")
		}
		return nil
	case OpSet, OpAppend:
		if !has && needValues {
			return invalid(field()+".value", "", "missing; %s needs a value", w.Op)
		}
	case OpMerge:
		if !has && needValues {
			return invalid(field()+".value", "", "missing; merge needs an object")
		}
		if has && firstByte(w.Value) != '{' {
			return invalid(field()+".value", quote(string(w.Value)), "merge needs a JSON object")
		}
	case OpIncr:
		if has {
			if _, err := strconv.ParseFloat(string(bytes.TrimSpace(w.Value)), 64); err != nil {
				return invalid(field()+".value", quote(string(w.Value)), "incr needs a number")
			}
		}
		return nil
	default:
		return invalid(field()+".op", quote(string(w.Op)), "want one of %s", names(Ops))
	}
	if has && w.Op != OpAppend {
		// Object keys in set and merge values become paths in the state tree,
		// so they must be legal segments and stay within the depth limit.
		if err := checkKeys(w.Value, strings.Count(w.Path, ".")+1); err != nil {
			return invalid(field()+".value", quote(string(w.Value)), "%v", err)
		}
	}
	return nil
}

// checkKeys verifies that every object key in the JSON value v, which stands
// at a path of the given depth, is a legal path segment within MaxDepth.
// Arrays are leaves of the state tree, so their contents are not checked.
func checkKeys(v json.RawMessage, depth int) error {
	if firstByte(v) != '{' {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err != nil {
		return err
	}
	for k, sub := range obj {
		if depth+1 > MaxDepth {
			return fmt.Errorf("key %q would make a path deeper than %d segments", k, MaxDepth)
		}
		if !ValidSegment(k) {
			return fmt.Errorf("key %q is not a legal path segment", k)
		}
		if err := checkKeys(sub, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func validateConditions(field string, exprs []string) error {
	if len(exprs) > MaxConditions {
		return invalid(field, strconv.Itoa(len(exprs)), "more than %d expressions", MaxConditions)
	}
	for i, x := range exprs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if strings.TrimSpace(x) == "" {
			return invalid(f, quote(x), "empty expression")
		}
		if len(x) > MaxExprLen {
			return invalid(f, quote(x), "longer than %d bytes", MaxExprLen)
		}
	}
	return nil
}

func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func names[T ~string](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}
