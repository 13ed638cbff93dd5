package intents

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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

func (e *ValidationError) Error() string { return e.describe("intent") }

// describe words the error for a document of the given name.
func (e *ValidationError) describe(doc string) string {
	switch {
	case e.Field == "":
		return doc + ": " + e.Reason
	case e.Value == "":
		return fmt.Sprintf("%s field %s: %s", doc, e.Field, e.Reason)
	}
	return fmt.Sprintf("%s field %s = %s: %s", doc, e.Field, e.Value, e.Reason)
}

func invalid(field, value, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// quote shortens and quotes a value for an error message.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		cut := max
		for cut > max-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
			cut-- // not inside a character
		}
		s = s[:cut] + "…"
	}
	return strconv.Quote(s)
}

// Decode parses one intent as strictly as schemas/intent.json reads it and
// validates it. Unknown fields, wrong types and trailing data are errors, and
// so, beyond what encoding/json checks, are a member name given twice
// anywhere in the document (write values included), a field name in another
// case, invalid UTF-8 (or an escaped lone surrogate) and a body that is not
// an object. Every error is a *ValidationError naming the field where there
// is one.
//
// The intents clients usually send are read by hand (plainReader), in
// half to two thirds of the time (BenchmarkDecode); an intent the
// hand-written reader does not take (a \u escape, a value nested deeper
// than 8 or an object of more than 16 members, anything wrong) is decoded
// by go-json-experiment from the start, which also words every error.
func Decode(data []byte) (*Intent, error) {
	if len(data) > MaxIntentSize {
		return nil, invalid("", "", "%d bytes is larger than the %d-byte limit", len(data), MaxIntentSize)
	}
	in := new(Intent)
	var r plainReader
	if !r.intent(data, in) {
		*in = Intent{}
		if err := strictUnmarshal(data, in); err != nil {
			return nil, decodeError(data, err)
		}
		if firstByte(data) != '{' {
			// Only a null unmarshals without error into something not an object.
			return nil, invalid("", "", "a JSON null, not an object")
		}
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return in, nil
}

// DecodeAll is Decode reporting every problem of the intent (Problems)
// rather than the first, for a tool that checks a document: in is the
// intent decoded, nil with the one problem that kept data from decoding
// (its size, its JSON, an unknown field).
func DecodeAll(data []byte) (in *Intent, problems []*ValidationError) {
	if len(data) > MaxIntentSize {
		return nil, []*ValidationError{invalid("", "", "%d bytes is larger than the %d-byte limit", len(data), MaxIntentSize)}
	}
	in = new(Intent)
	if err := strictUnmarshal(data, in); err != nil {
		return nil, []*ValidationError{decodeError(data, err)}
	}
	if firstByte(data) != '{' {
		return nil, []*ValidationError{invalid("", "", "a JSON null, not an object")}
	}
	return in, in.Problems()
}

// DecodeResolution parses an arbiter's resolution as strictly as Decode
// parses an intent, its replacement intent included: unknown fields, names
// given twice or in another case, invalid UTF-8, wrong types and trailing
// data are errors that name the field (replacement.writes[0].path). It does
// not validate the replacement: the engine does, as for every intent it
// decides.
func DecodeResolution(data []byte) (*Resolution, error) {
	res := new(Resolution)
	if err := strictUnmarshal(data, res); err != nil {
		return nil, errors.New(decodeError(data, err).describe("resolution"))
	}
	if firstByte(data) != '{' {
		return nil, errors.New("resolution: a JSON null, not an object")
	}
	return res, nil
}

// DecodeVote decodes a vote (case.vote) strictly, as DecodeResolution
// does a resolution; what it holds is checked by the coordinator.
func DecodeVote(data []byte) (*Vote, error) {
	v := new(Vote)
	if err := strictUnmarshal(data, v); err != nil {
		return nil, errors.New(decodeError(data, err).describe("vote"))
	}
	if firstByte(data) != '{' {
		return nil, errors.New("vote: a JSON null, not an object")
	}
	return v, nil
}

// strictUnmarshal decodes one JSON document into v with the defaults of
// encoding/json/v2 — names match exactly, a name given twice and invalid
// UTF-8 are errors, nothing may follow the value — and unknown fields
// refused.
func strictUnmarshal(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true))
}

// decodeError turns the errors of strictUnmarshal on data into
// ValidationErrors that name the field.
func decodeError(data []byte, err error) *ValidationError {
	var synErr *jsontext.SyntacticError
	var semErr *jsonv2.SemanticError
	switch {
	case errors.As(err, &synErr):
		field, inside := fieldOf(synErr.JSONPointer)
		// Text that ends a complete value where the error is found trails it.
		if off := synErr.ByteOffset; field == "" && off > 0 && off <= int64(len(data)) &&
			jsontext.Value(data[:off]).IsValid() {
			return invalid("", "", "trailing data after the object")
		}
		if errors.Is(synErr.Err, io.ErrUnexpectedEOF) {
			return invalid("", "", "not JSON: unexpected end of input")
		}
		return invalid(field, "", "%s", syntaxReason(data, synErr, inside, ""))
	case errors.As(err, &semErr):
		field, _ := fieldOf(semErr.JSONPointer)
		switch {
		case errors.Is(semErr.Err, jsonv2.ErrUnknownName):
			return invalid(field, "", "unknown field")
		case field == "":
			return invalid("", "", "a JSON %s, not an object", kindName(semErr.JSONKind))
		case semErr.JSONKind == '0' && semErr.GoType != nil:
			if lo, hi, ok := integerRange(semErr.GoType); ok {
				return invalid(field, abbreviate(string(semErr.JSONValue)), "not an integer from %s to %s", lo, hi)
			}
		}
		if semErr.GoType != nil {
			return invalid(field, "", "a JSON %s where %s is wanted", kindName(semErr.JSONKind), semErr.GoType)
		}
		return invalid(field, "", "not a valid value: %v", semErr.Err)
	}
	return invalid("", "", "not a valid document: %v", err)
}

// syntaxReason says what a strict JSON decoder found wrong with data, for
// a message. inside is where in a write's value or in meta, if there; of
// follows a byte offset to say what it counts in ("" for the document).
func syntaxReason(data []byte, e *jsontext.SyntacticError, inside, of string) string {
	off := e.ByteOffset
	switch {
	case errors.Is(e.Err, jsontext.ErrDuplicateName) && inside != "":
		return "duplicate member name at " + inside
	case errors.Is(e.Err, jsontext.ErrDuplicateName):
		return "duplicate member name"
	case errors.Is(e.Err, io.ErrUnexpectedEOF):
		return "not JSON: unexpected end of input"
	case badUTF8At(data, off):
		// The decoder's sentinel for this is internal; the byte it stopped
		// at says it as surely.
		return fmt.Sprintf("invalid UTF-8 at byte %d%s", off, of)
	case loneSurrogateAt(data, off):
		return fmt.Sprintf("%s at byte %d%s escapes half of a UTF-16 surrogate pair, not a character", data[off:off+6], off, of)
	}
	return fmt.Sprintf("not JSON: %v at byte %d%s", e.Err, off, of)
}

func badUTF8At(data []byte, off int64) bool {
	if off < 0 || off >= int64(len(data)) {
		return false
	}
	r, size := utf8.DecodeRune(data[off:])
	return r == utf8.RuneError && size <= 1
}

// loneSurrogateAt reports whether data holds at off an escape (\ud800) of
// a UTF-16 surrogate, which the decoder stops at when no other half follows.
func loneSurrogateAt(data []byte, off int64) bool {
	if off < 0 || off+6 > int64(len(data)) || data[off] != '\\' || data[off+1] != 'u' {
		return false
	}
	r, err := strconv.ParseUint(string(data[off+2:off+6]), 16, 16)
	return err == nil && utf16.IsSurrogate(rune(r))
}

// fieldOf renders a JSON pointer into an intent (/writes/2/op) as the field
// it names (writes[2].op). Where it points inside a write's value or the
// meta object, whose members are the agent's own, the field ends there and
// the rest of the pointer is returned as inside (/a/0).
func fieldOf(ptr jsontext.Pointer) (field, inside string) {
	if ptr == "" {
		return "", ""
	}
	var b strings.Builder
	parts := strings.Split(string(ptr)[1:], "/")
	for i, raw := range parts {
		tok := strings.ReplaceAll(strings.ReplaceAll(raw, "~1", "/"), "~0", "~")
		index := i > 0 && isIndex(tok)
		switch {
		case index:
			b.WriteString("[" + tok + "]")
		case i > 0:
			b.WriteString("." + tok)
		default:
			b.WriteString(tok)
		}
		free := tok == "value" && i > 0 && isIndex(parts[i-1]) ||
			tok == "meta" && (i == 0 || parts[i-1] == "replacement")
		if free {
			if i+1 < len(parts) {
				inside = "/" + strings.Join(parts[i+1:], "/")
			}
			break
		}
	}
	return b.String(), inside
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 0:
		return "value"
	}
	return k.String()
}

// integerRange returns the bounds of an integer type, in decimal.
func integerRange(t reflect.Type) (lo, hi string, ok bool) {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return strconv.FormatInt(-1<<(bits-1), 10), strconv.FormatInt(1<<(bits-1)-1, 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "0", strconv.FormatUint(1<<t.Bits()-1, 10), true
	}
	return "", "", false
}

// abbreviate shortens a number for an error message.
func abbreviate(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s… (%d characters)", s[:max-8], len(s))
}

// Validate checks the intent against SPEC §1–2 and returns the first problem
// as a *ValidationError.
func (in *Intent) Validate() error {
	var first *ValidationError
	in.check(func(e *ValidationError) bool {
		first = e
		return false
	})
	if first != nil {
		return first
	}
	return nil
}

// Problems checks the intent as Validate does and returns every problem,
// in the order Validate meets them (Validate's error is the first): a tool
// that checks a document tells all that is wrong with it at once. A field
// whose problem makes the checks that depend on it meaningless (a kind
// that is none, a write's path) is reported once, not once for each.
func (in *Intent) Problems() []*ValidationError {
	var all []*ValidationError
	in.check(func(e *ValidationError) bool {
		all = append(all, e)
		return true
	})
	return all
}

// check reports each problem of the intent to report, in order, as long
// as report returns true.
func (in *Intent) check(report func(*ValidationError) bool) {
	switch {
	case in.ID == "":
		if !report(invalid("id", "", "missing; want a ULID")) {
			return
		}
	case !validULID(in.ID):
		_, err := ulid.ParseStrict(in.ID)
		if !report(invalid("id", quote(in.ID), "not a ULID: %v", err)) {
			return
		}
	// One intent, one key: a lowercase spelling of the same ULID would be
	// another idempotency key (and another Nats-Msg-Id).
	case strings.ToUpper(in.ID) != in.ID:
		if !report(invalid("id", quote(in.ID), "not in canonical upper case")) {
			return
		}
	}
	switch {
	case in.Agent == "":
		if !report(invalid("agent", "", "missing")) {
			return
		}
	case !ValidSegment(in.Agent):
		if !report(invalid("agent", quote(in.Agent), "not 1–%d letters, digits, '_' or '-'", MaxSegmentLen)) {
			return
		}
	}
	kindKnown := false
	switch in.Kind {
	case "":
		if !report(invalid("kind", "", "missing; want one of %s", names(Kinds))) {
			return
		}
	case KindApply, KindPropose, KindCommit, KindAbort, KindRenew:
		kindKnown = true
	default:
		if !report(invalid("kind", quote(string(in.Kind)), "want one of %s", names(Kinds))) {
			return
		}
	}
	if kindKnown && !in.checkTxn(report) {
		return
	}
	switch {
	case len(in.Action) > MaxActionLen:
		if !report(invalid("action", quote(in.Action), "longer than %d bytes", MaxActionLen)) {
			return
		}
	// Decode refuses invalid UTF-8; an intent built in Go could carry it,
	// and encoding it for the log would change it.
	case !utf8.ValidString(in.Action):
		if !report(invalid("action", quote(in.Action), "not valid UTF-8")) {
			return
		}
	}
	if !in.checkReads(report) || kindKnown && !in.checkWrites(report) ||
		!checkConditions("pre", in.Pre, report) || !checkConditions("post", in.Post, report) {
		return
	}
	switch {
	case in.LeaseMS < 0:
		if !report(invalid("lease_ms", strconv.FormatInt(in.LeaseMS, 10), "negative")) {
			return
		}
	case in.LeaseMS != 0 && kindKnown && in.Kind != KindPropose && in.Kind != KindRenew:
		if !report(invalid("lease_ms", strconv.FormatInt(in.LeaseMS, 10), "only propose and renew take a lease")) {
			return
		}
	}
	switch in.OnConflict {
	case "", OnConflictReject, OnConflictWait, OnConflictEscalate:
	default:
		if !report(invalid("on_conflict", quote(string(in.OnConflict)), "want one of reject, wait, escalate")) {
			return
		}
	}
	if in.WaitMS < 0 {
		if !report(invalid("wait_ms", strconv.FormatInt(in.WaitMS, 10), "negative")) {
			return
		}
	}
	switch {
	case len(in.Meta) > 0 && firstByte(in.Meta) != '{':
		report(invalid("meta", quote(string(in.Meta)), "not a JSON object"))
	// Meta is recorded as given, so it must encode: an intent built in Go
	// has not been through Decode.
	case len(in.Meta) > 0 && !jsontext.Value(in.Meta).IsValid():
		report(invalid("meta", quote(string(in.Meta)), "not valid JSON (a name twice, invalid UTF-8 or a syntax error)"))
	}
}

// validULID reports whether id is a ULID, in any case.
func validULID(id string) bool {
	_, err := ulid.ParseStrict(id)
	return err == nil
}

// checkTxn reports the problems of txn and fence for the intent's kind;
// false when report said to stop.
func (in *Intent) checkTxn(report func(*ValidationError) bool) bool {
	if in.Kind.Transactional() {
		switch {
		case in.Txn == "":
			if !report(invalid("txn", "", "missing; a %s names the transaction of its grant", in.Kind)) {
				return false
			}
		case len(in.Txn) > MaxTxnLen:
			if !report(invalid("txn", quote(in.Txn), "longer than %d bytes", MaxTxnLen)) {
				return false
			}
		case !utf8.ValidString(in.Txn):
			if !report(invalid("txn", quote(in.Txn), "not valid UTF-8")) {
				return false
			}
		}
		if in.Fence == 0 {
			return report(invalid("fence", "", "missing; a %s carries the fencing token of its grant", in.Kind))
		}
		return true
	}
	if in.Txn != "" {
		if !report(invalid("txn", quote(in.Txn), "only commit, abort and renew name a transaction")) {
			return false
		}
	}
	if in.Fence != 0 && in.Kind != KindApply {
		// An apply carries the fence of the task claim it writes under
		// (a task rule with a lease).
		return report(invalid("fence", strconv.FormatUint(in.Fence, 10), "only commit, abort, renew and an apply that writes a claimed task carry a fence"))
	}
	return true
}

// checkReads reports the problems of the reads; false when report said to
// stop.
func (in *Intent) checkReads(report func(*ValidationError) bool) bool {
	if len(in.Reads) > MaxReads {
		return report(invalid("reads", strconv.Itoa(len(in.Reads)), "more than %d reads", MaxReads))
	}
	for i, r := range in.Reads {
		if err := CheckPath(r.Path); err != nil {
			if !report(invalid(fmt.Sprintf("reads[%d].path", i), quote(r.Path), "%v", err)) {
				return false
			}
		}
	}
	return true
}

// checkWrites reports the problems of the writes for the intent's kind, a
// known one; false when report said to stop.
func (in *Intent) checkWrites(report func(*ValidationError) bool) bool {
	switch {
	case len(in.Writes) > MaxWrites:
		return report(invalid("writes", strconv.Itoa(len(in.Writes)), "more than %d writes", MaxWrites))
	case len(in.Writes) == 0 && (in.Kind == KindApply || in.Kind == KindPropose):
		return report(invalid("writes", "", "empty; %s must write at least one path", in.Kind))
	case len(in.Writes) > 0 && (in.Kind == KindAbort || in.Kind == KindRenew):
		return report(invalid("writes", "", "%s takes no writes", in.Kind))
	}
	// Values are required wherever they will be applied; a propose only
	// declares its write set.
	needValues := in.Kind != KindPropose
	var vc valueChecker
	paths := true
	for i, w := range in.Writes {
		if err := CheckPath(w.Path); err != nil {
			paths = false
			if !report(invalid(fmt.Sprintf("writes[%d].path", i), quote(w.Path), "%v", err)) {
				return false
			}
			continue
		}
		if err := checkValue(i, w, needValues, &vc); err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				ve = invalid(fmt.Sprintf("writes[%d]", i), "", "%v", err)
			}
			if !report(ve) {
				return false
			}
		}
	}
	// Writes of one intent must not overlap: their order would matter and
	// the post-state would depend on it. (Only paths that are paths can.)
	if i, j, ok := overlapping(in.Writes); paths && ok {
		return report(invalid(fmt.Sprintf("writes[%d].path", i), quote(in.Writes[i].Path),
			"overlaps writes[%d].path %q", j, in.Writes[j].Path))
	}
	return true
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

func checkValue(i int, w Write, needValues bool, vc *valueChecker) error {
	field := func() string { return fmt.Sprintf("writes[%d]", i) }
	has := len(w.Value) > 0
	keyDepth := 0 // the depth of the path the value's keys extend; 0: its keys are not paths
	switch w.Op {
	case "":
		return invalid(field()+".op", "", "missing; want one of %s", names(Ops))
	case OpDelete:
		if has {
			return invalid(field()+".value", quote(string(w.Value)), "delete takes no value")
		}
		return nil
	case OpSet:
		if !has && needValues {
			return invalid(field()+".value", "", "missing; set needs a value")
		}
		keyDepth = strings.Count(w.Path, ".") + 1
	case OpAppend:
		if !has && needValues {
			return invalid(field()+".value", "", "missing; append needs a value")
		}
	case OpMerge:
		if !has && needValues {
			return invalid(field()+".value", "", "missing; merge needs an object")
		}
		if has && firstByte(w.Value) != '{' {
			return invalid(field()+".value", quote(string(w.Value)), "merge needs a JSON object")
		}
		keyDepth = strings.Count(w.Path, ".") + 1
	case OpIncr:
		if has && !JSONNumber(trimSpace(w.Value)) {
			return invalid(field()+".value", quote(string(w.Value)), "incr needs a number")
		}
	default:
		return invalid(field()+".op", quote(string(w.Op)), "want one of %s", names(Ops))
	}
	if !has {
		return nil
	}
	// Object keys in set and merge values become paths in the state tree, so
	// they must be legal segments and stay within the depth limit. Every
	// number anywhere must be one the state can hold.
	if err := vc.check(w.Value, keyDepth); err != nil {
		return valueError(field()+".value", w.Value, err)
	}
	return nil
}

// valueError words what valueChecker.check found wrong with the value of
// field.
func valueError(field string, value []byte, err error) *ValidationError {
	var numErr *numberError
	var synErr *jsontext.SyntacticError
	switch {
	case errors.As(err, &numErr):
		where := ""
		if numErr.at != "" {
			where = " at " + numErr.at
		}
		return invalid(field, abbreviate(numErr.number),
			"the number%s is beyond ±%g, the range of a 64-bit float", where, math.MaxFloat64)
	case err == io.EOF:
		return invalid(field, quote(string(value)), "not JSON: no value")
	case errors.As(err, &synErr):
		return invalid(field, quote(string(value)), "%s", syntaxReason(value, synErr, string(synErr.JSONPointer), " of the value"))
	}
	return invalid(field, quote(string(value)), "%v", err)
}

// valueChecker checks the JSON of write values, with one decoder for all
// the values of an intent that need more than a glance.
type valueChecker struct {
	dec *jsontext.Decoder
}

// numberError is a number in a value that no 64-bit float holds.
type numberError struct {
	number string
	at     string // JSON pointer within the value; "" for the value itself
}

func (e *numberError) Error() string {
	return fmt.Sprintf("the number %s at %q is beyond the range of a 64-bit float", abbreviate(e.number), e.at)
}

// check verifies that v is one strict JSON value — no name given twice, valid
// UTF-8, nothing after it — whose numbers are all finite 64-bit floats, and,
// when keyDepth is above 0, whose object keys (outside arrays, which are
// leaves of the state tree) are legal path segments that extend a path of
// keyDepth segments within MaxDepth. Numbers that round to zero (1e-400) are
// accepted: the state reads them as 0, as encoding/json does.
func (vc *valueChecker) check(v []byte, keyDepth int) error {
	// The scalars most writes carry need no decoder.
	switch b := trimSpace(v); {
	case string(b) == "true", string(b) == "false", string(b) == "null":
		return nil
	case len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9') && JSONNumber(b):
		if !finite(b) {
			return &numberError{number: string(b)}
		}
		return nil
	case len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && plainString(b[1:len(b)-1]):
		return nil
	}
	if vc.dec == nil {
		vc.dec = jsontext.NewDecoder(bytes.NewBuffer(v))
	} else {
		vc.dec.Reset(bytes.NewBuffer(v))
	}
	if err := vc.walk(keyDepth); err != nil {
		return err
	}
	switch _, err := vc.dec.ReadToken(); {
	case err == nil:
		return errors.New("trailing data after the value")
	case err != io.EOF:
		return err
	}
	return nil
}

// walk reads the next value, checking it as check describes.
func (vc *valueChecker) walk(keyDepth int) error {
	dec := vc.dec
	switch dec.PeekKind() {
	case '{':
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for dec.PeekKind() != '}' {
			name, err := dec.ReadValue()
			if err != nil {
				return err
			}
			next := 0
			if keyDepth > 0 {
				if err := checkKey(name, keyDepth); err != nil {
					return err
				}
				next = keyDepth + 1
			}
			if err := vc.walk(next); err != nil {
				return err
			}
		}
		_, err := dec.ReadToken()
		return err
	case '[':
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for dec.PeekKind() != ']' {
			if err := vc.walk(0); err != nil {
				return err
			}
		}
		_, err := dec.ReadToken()
		return err
	case '0':
		num, err := dec.ReadValue()
		if err != nil {
			return err
		}
		if !finite(num) {
			return &numberError{number: string(num), at: string(dec.StackPointer())}
		}
		return nil
	}
	_, err := dec.ReadValue()
	return err
}

// checkKey verifies that the object member name (a JSON string, quoted) is
// a legal segment for a path that extends one of depth segments.
func checkKey(name jsontext.Value, depth int) error {
	key := string(name[1 : len(name)-1])
	if bytes.IndexByte(name, '\\') >= 0 {
		unq, err := jsontext.AppendUnquote(nil, name)
		if err != nil {
			return err
		}
		key = string(unq)
	}
	if depth+1 > MaxDepth {
		return fmt.Errorf("key %q would make a path deeper than %d segments", key, MaxDepth)
	}
	if !ValidSegment(key) {
		return fmt.Errorf("key %q is not a legal path segment", key)
	}
	return nil
}

// finite reports whether the JSON number b is within the range of a
// float64. One of at most 308 characters without an exponent is below
// 10^308 in magnitude and needs no parsing.
func finite(b []byte) bool {
	if len(b) <= 308 && bytes.IndexAny(b, "eE") < 0 {
		return true
	}
	_, err := strconv.ParseFloat(string(b), 64)
	return err == nil
}

// JSONNumber reports whether b is exactly one JSON number:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// strconv.ParseFloat alone would also take "Inf", hex and "1.".
func JSONNumber(b []byte) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

// plainString reports whether a JSON string body is valid as it stands:
// no escapes, no control characters, valid UTF-8.
func plainString(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c == '"' || c < 0x20 {
			return false
		}
	}
	return utf8.Valid(b)
}

// trimSpace removes JSON whitespace around b.
func trimSpace(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }

// checkConditions reports the problems of the expressions of field (pre or
// post); false when report said to stop.
func checkConditions(field string, exprs []string, report func(*ValidationError) bool) bool {
	if len(exprs) > MaxConditions {
		return report(invalid(field, strconv.Itoa(len(exprs)), "more than %d expressions", MaxConditions))
	}
	for i, x := range exprs {
		f := fmt.Sprintf("%s[%d]", field, i)
		var e *ValidationError
		switch {
		case strings.TrimSpace(x) == "":
			e = invalid(f, quote(x), "empty expression")
		case len(x) > MaxExprLen:
			e = invalid(f, quote(x), "longer than %d bytes", MaxExprLen)
		case !utf8.ValidString(x):
			e = invalid(f, quote(x), "not valid UTF-8")
		}
		if e != nil && !report(e) {
			return false
		}
	}
	return true
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
