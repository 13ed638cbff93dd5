package schemas_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/schemas"
)

// The example documents live in testdata/<schema>/<dir>/*.json:
//
//	valid            the schema and the Go side both accept it
//	invalid          the schema and the Go side both reject it
//	invalid-go-only  (intent, rules) a rule JSON Schema cannot express: the
//	                 schema accepts it, intents.Decode (rules.Compile) rejects it
//	valid-go-only    (intent, rules) a non-canonical form intents.Decode
//	                 (rules.Compile) tolerates (explicit null or zero values)
//	                 that the schema rejects; for an intent, re-encoding the
//	                 decoded intent must give a schema-valid document
//
// For rules files the Go side is rules.Compile, as `coagent serve --rules`
// and rules.set run it.
//
// For decisions, events, escalations and resolutions the Go side is a strict
// decode (unknown fields and trailing data are errors) into intents.Decision,
// intents.Event, intents.Escalation or intents.Resolution, plus Validate for
// the intents they embed. The Go types do not validate enums and the like,
// so for them only the schema must reject invalid/.

// knownDecodeGaps lists invalid-go-only documents that intents.Decode
// accepts today although SPEC §1 rules them out. Each is logged, not failed;
// once Decode rejects one, the test asks for its entry to be removed.
var knownDecodeGaps = map[string]string{}

// knownRulesGaps lists invalid rules files (testdata/rules/invalid) that
// rules.Compile accepts today although the schema rightly refuses them. Each
// is logged, not failed; once Compile rejects one, the test asks for its
// entry to be removed.
var knownRulesGaps = map[string]string{}

// refuseLoader makes every $ref outside the embedded files an error, so the
// schemas are known to be self-contained as a set.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s is not one of the embedded files", url)
}

func newCompiler(t testing.TB) *jsonschema.Compiler {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.AssertContent()
	c.UseLoader(refuseLoader{})
	for _, name := range schemas.Names() {
		data, err := schemas.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.AddResource(schemas.BaseURL+name, doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return c
}

func compile(t testing.TB, c *jsonschema.Compiler, ref string) *jsonschema.Schema {
	t.Helper()
	sch, err := c.Compile(schemas.BaseURL + ref)
	if err != nil {
		t.Fatalf("compiling %s: %v", ref, err)
	}
	return sch
}

func validate(sch *jsonschema.Schema, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// strictDecode decodes data into v as intents.Decode does: unknown fields
// and trailing data are errors.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

// examples calls f for every *.json file in testdata/dir as a subtest, and
// returns how many there were.
func examples(t *testing.T, dir string, f func(t *testing.T, name string, data []byte)) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(file)
		t.Run(dir+"/"+name, func(t *testing.T) { f(t, name, data) })
	}
	return len(files)
}

// short shortens a validator's multi-line error for a test message.
func short(err error) string { return intents.Clip(intents.OneLine(err.Error()), 300) }

func TestSchemaFiles(t *testing.T) {
	want := []string{"decision.json", "escalation.json", "event.json", "intent.json", "resolution.json", "rules.json"}
	if got := schemas.Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
	titles := map[string]reflect.Type{
		"intent.json":     reflect.TypeFor[intents.Intent](),
		"decision.json":   reflect.TypeFor[intents.Decision](),
		"event.json":      reflect.TypeFor[intents.Event](),
		"escalation.json": reflect.TypeFor[intents.Escalation](),
		"resolution.json": reflect.TypeFor[intents.Resolution](),
		"rules.json":      reflect.TypeFor[rules.File](),
	}
	for _, name := range want {
		data, err := schemas.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		fromFS, err := fs.ReadFile(schemas.FS(), name)
		if err != nil || !bytes.Equal(data, fromFS) {
			t.Errorf("%s: FS() and Get disagree (%v)", name, err)
		}
		var head struct {
			Schema string `json:"$schema"`
			ID     string `json:"$id"`
			Title  string `json:"title"`
		}
		if err := json.Unmarshal(data, &head); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if head.Schema != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema = %q, want draft 2020-12", name, head.Schema)
		}
		if head.ID != schemas.BaseURL+name {
			t.Errorf("%s: $id = %q, want %q", name, head.ID, schemas.BaseURL+name)
		}
		if typ := titles[name]; head.Title != typ.Name() {
			t.Errorf("%s: title = %q, want the Go type's name %q", name, head.Title, typ.Name())
		}
	}
	if _, err := schemas.Get("nope.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Get(nope.json) = %v, want fs.ErrNotExist", err)
	}
	// Every schema compiles against the draft 2020-12 metaschema with only
	// the embedded files to resolve references.
	c := newCompiler(t)
	for _, name := range want {
		compile(t, c, name)
	}
}

func TestIntentExamples(t *testing.T) {
	sch := compile(t, newCompiler(t), "intent.json")

	n := examples(t, "intent/valid", func(t *testing.T, _ string, data []byte) {
		if err := validate(sch, data); err != nil {
			t.Errorf("schema rejects it: %s", short(err))
		}
		in, err := intents.Decode(data)
		if err != nil {
			t.Fatalf("intents.Decode rejects it: %v", err)
		}
		roundTrip(t, sch, in)
	})
	if n == 0 {
		t.Error("no valid intent examples")
	}

	n = examples(t, "intent/invalid", func(t *testing.T, _ string, data []byte) {
		if err := validate(sch, data); err == nil {
			t.Error("schema wrongly accepts it")
		}
		_, err := intents.Decode(data)
		var verr *intents.ValidationError
		switch {
		case err == nil:
			t.Error("intents.Decode wrongly accepts it")
		case !errors.As(err, &verr):
			t.Errorf("intents.Decode returned %T, want *intents.ValidationError: %v", err, err)
		}
	})
	if n < 25 {
		t.Errorf("only %d invalid intent examples", n)
	}

	examples(t, "intent/invalid-go-only", func(t *testing.T, name string, data []byte) {
		if err := validate(sch, data); err != nil {
			t.Errorf("schema rejects it (%s): move it to testdata/intent/invalid", short(err))
		}
		_, err := intents.Decode(data)
		gap, known := knownDecodeGaps[name]
		switch {
		case err == nil && known:
			t.Logf("known gap, intents.Decode accepts it: %s", gap)
		case err == nil:
			t.Error("intents.Decode wrongly accepts it")
		case known:
			t.Errorf("intents.Decode now rejects it (%v): remove it from knownDecodeGaps", err)
		}
	})

	examples(t, "intent/valid-go-only", func(t *testing.T, _ string, data []byte) {
		if err := validate(sch, data); err == nil {
			t.Error("schema accepts it: move it to testdata/intent/valid")
		}
		in, err := intents.Decode(data)
		if err != nil {
			t.Fatalf("intents.Decode rejects it (%v): move it to testdata/intent/invalid", err)
		}
		roundTrip(t, sch, in)
	})
}

func TestRulesExamples(t *testing.T) {
	sch := compile(t, newCompiler(t), "rules.json")
	comp := cond.NewCompiler(cond.Options{})
	// compileRules runs rules.Compile and checks that an error is a
	// *rules.Error, which rules.set answers as invalid.
	compileRules := func(t *testing.T, data []byte) error {
		t.Helper()
		_, err := rules.Compile(data, comp)
		var rerr *rules.Error
		if err != nil && !errors.As(err, &rerr) {
			t.Errorf("rules.Compile returned %T, want *rules.Error: %v", err, err)
		}
		return err
	}

	n := examples(t, "rules/valid", func(t *testing.T, _ string, data []byte) {
		if err := validate(sch, data); err != nil {
			t.Errorf("schema rejects it: %s", short(err))
		}
		if err := compileRules(t, data); err != nil {
			t.Fatalf("rules.Compile rejects it: %v", err)
		}
		// A file built in Go from rules.File encodes to a valid one.
		var f rules.File
		if err := strictDecode(data, &f); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(sch, out); err != nil {
			t.Errorf("schema rejects the re-encoded file %s: %s", out, short(err))
		}
		if err := compileRules(t, out); err != nil {
			t.Errorf("rules.Compile rejects the re-encoded file %s: %v", out, err)
		}
	})
	if n < 3 {
		t.Errorf("only %d valid rules examples", n)
	}

	n = examples(t, "rules/invalid", func(t *testing.T, name string, data []byte) {
		if err := validate(sch, data); err == nil {
			t.Error("schema wrongly accepts it")
		}
		err := compileRules(t, data)
		gap, known := knownRulesGaps[name]
		switch {
		case err == nil && known:
			t.Logf("known gap, rules.Compile accepts it: %s", gap)
		case err == nil:
			t.Error("rules.Compile wrongly accepts it")
		case known:
			t.Errorf("rules.Compile now rejects it (%v): remove it from knownRulesGaps", err)
		}
	})
	if n < 25 {
		t.Errorf("only %d invalid rules examples", n)
	}

	n = examples(t, "rules/invalid-go-only", func(t *testing.T, _ string, data []byte) {
		if err := validate(sch, data); err != nil {
			t.Errorf("schema rejects it (%s): move it to testdata/rules/invalid", short(err))
		}
		if err := compileRules(t, data); err == nil {
			t.Error("rules.Compile wrongly accepts it")
		}
	})
	if n == 0 {
		t.Error("no invalid-go-only rules examples")
	}

	// Unlike an intent, a rules.File does not always re-encode to a
	// schema-valid document: a final state given a nil list in Go
	// (final-state-null.json) marshals as null.
	examples(t, "rules/valid-go-only", func(t *testing.T, _ string, data []byte) {
		if err := validate(sch, data); err == nil {
			t.Error("schema accepts it: move it to testdata/rules/valid")
		}
		if err := compileRules(t, data); err != nil {
			t.Errorf("rules.Compile rejects it (%v): move it to testdata/rules/invalid", err)
		}
	})

	for name := range knownRulesGaps {
		if _, err := os.Stat(filepath.Join("testdata", "rules", "invalid", name)); err != nil {
			t.Errorf("knownRulesGaps: %v", err)
		}
	}
}

// roundTrip checks that an intent Decode accepted encodes to a document the
// schema accepts and that decodes to the same intent.
func roundTrip(t *testing.T, sch *jsonschema.Schema, in *intents.Intent) {
	t.Helper()
	out, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(sch, out); err != nil {
		t.Errorf("schema rejects the re-encoded intent %s: %s", out, short(err))
	}
	again, err := intents.Decode(out)
	if err != nil {
		t.Fatalf("intents.Decode rejects the re-encoded intent %s: %v", out, err)
	}
	if out2, _ := json.Marshal(again); !bytes.Equal(out, out2) {
		t.Errorf("round trip changed the intent:\n%s\n%s", out, out2)
	}
}

// messageExamples checks the examples of a message the Go side decodes
// strictly into T (testdata/<name>/valid and invalid, against <name>.json):
// a valid one passes the schema, decodes, embeds only intents that
// Validate accepts (embedded lists them; nil entries are skipped) and
// re-encodes to a document the schema accepts; an invalid one fails the
// schema. It returns the decoded valid examples.
func messageExamples[T any](t *testing.T, name string, embedded func(*T) []*intents.Intent) []*T {
	t.Helper()
	sch := compile(t, newCompiler(t), name+".json")
	typ := reflect.TypeFor[T]()
	var decoded []*T
	n := examples(t, name+"/valid", func(t *testing.T, _ string, data []byte) {
		if err := validate(sch, data); err != nil {
			t.Errorf("schema rejects it: %s", short(err))
		}
		v := new(T)
		if err := strictDecode(data, v); err != nil {
			t.Fatalf("does not decode into %s: %v", typ, err)
		}
		decoded = append(decoded, v)
		if embedded != nil {
			for _, in := range embedded(v) {
				if in == nil {
					continue
				}
				if err := in.Validate(); err != nil {
					t.Errorf("embedded intent %s is invalid: %v", in.ID, err)
				}
			}
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(sch, out); err != nil {
			t.Errorf("schema rejects the re-encoded %s %s: %s", typ, out, short(err))
		}
	})
	if n == 0 {
		t.Errorf("no valid %s examples", name)
	}
	n = examples(t, name+"/invalid", func(t *testing.T, _ string, data []byte) {
		if err := validate(sch, data); err == nil {
			t.Error("schema wrongly accepts it")
		}
	})
	if n == 0 {
		t.Errorf("no invalid %s examples", name)
	}
	return decoded
}

func TestDecisionExamples(t *testing.T) {
	messageExamples[intents.Decision](t, "decision", nil)
}

func TestEventExamples(t *testing.T) {
	evs := messageExamples(t, "event", func(e *intents.Event) []*intents.Intent {
		var in []*intents.Intent
		if e.Received != nil {
			in = append(in, e.Received.Intent)
		}
		if e.Grant != nil {
			in = append(in, e.Grant.Propose)
		}
		if e.Wait != nil {
			in = append(in, e.Wait.Intent)
		}
		if e.Resolution != nil {
			in = append(in, e.Resolution.Replacement)
		}
		return in
	})
	seen := map[intents.EventType]bool{}
	for _, e := range evs {
		seen[e.Type] = true
	}
	for _, typ := range intents.EventTypes {
		if !seen[typ] {
			t.Errorf("no valid example of event type %q", typ)
		}
	}
}

func TestEscalationExamples(t *testing.T) {
	escs := messageExamples(t, "escalation", func(e *intents.Escalation) []*intents.Intent { return e.Intents })
	var holder, absent bool
	for _, e := range escs {
		holder = holder || e.Holder != nil
		for _, st := range e.State {
			absent = absent || !st.Exists
		}
	}
	if !holder || !absent {
		t.Errorf("the valid escalations lack one with a holder (%v) or one with an absent path (%v)", holder, absent)
	}
}

func TestResolutionExamples(t *testing.T) {
	rs := messageExamples(t, "resolution", func(r *intents.Resolution) []*intents.Intent {
		return []*intents.Intent{r.Replacement}
	})
	// Each way to name an outcome appears alone in some valid example.
	var winners, losers, replacement bool
	for _, r := range rs {
		switch {
		case len(r.Losers) == 0 && r.Replacement == nil:
			winners = true
		case len(r.Winners) == 0 && r.Replacement == nil:
			losers = true
		case len(r.Winners) == 0 && len(r.Losers) == 0:
			replacement = true
		}
	}
	if !winners || !losers || !replacement {
		t.Errorf("valid resolutions with only winners %v, only losers %v, only a replacement %v; want all", winners, losers, replacement)
	}
}

// TestEventPayloadRules checks event.json's type rules against the payload
// fields of intents.Event: every type has one rule, which requires one
// payload and forbids all the others.
func TestEventPayloadRules(t *testing.T) {
	var payloads []string
	typ := reflect.TypeFor[intents.Event]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			payloads = append(payloads, name)
		}
	}
	rules, ok := schemaDoc(t, "event.json")["allOf"].([]any)
	if !ok {
		t.Fatal("event.json has no allOf of type rules")
	}
	ruled := map[string]string{} // type → the payload its rule requires
	for i := range rules {
		rule, _ := rules[i].(map[string]any)
		where := fmt.Sprintf("event.json#/allOf/%d", i)
		ifType := at(t, rule, "/if/properties/type")
		var types []string
		if c, ok := ifType["const"].(string); ok {
			types = []string{c}
		} else {
			types = strs(t, ifType["enum"], where+"/if/properties/type/enum")
		}
		then := at(t, rule, "/then")
		required := strs(t, then["required"], where+"/then/required")
		if len(required) != 1 || !slices.Contains(payloads, required[0]) {
			t.Errorf("%s: requires %q, want one payload of %q", where, required, payloads)
			continue
		}
		props, _ := then["properties"].(map[string]any)
		for _, p := range payloads {
			if forbidden := props[p] == false; forbidden == (p == required[0]) {
				t.Errorf("%s (type %q): payload %q forbidden %v", where, types, p, forbidden)
			}
		}
		for _, ty := range types {
			if prev, dup := ruled[ty]; dup {
				t.Errorf("%s: type %q already has a rule (requiring %q)", where, ty, prev)
			}
			ruled[ty] = required[0]
		}
	}
	for _, ty := range intents.EventTypes {
		if _, ok := ruled[string(ty)]; !ok {
			t.Errorf("event.json has no rule for type %q", ty)
		}
	}
}

// schemaDoc returns the parsed JSON of a schema file.
func schemaDoc(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := schemas.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return doc
}

// at follows a JSON pointer ("/$defs/write/properties/op") into doc.
func at(t *testing.T, doc map[string]any, ptr string) map[string]any {
	t.Helper()
	obj := doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		if tok == "" {
			continue
		}
		next, ok := obj[tok].(map[string]any)
		if !ok {
			t.Fatalf("no object at %s (missing %q)", ptr, tok)
		}
		obj = next
	}
	return obj
}

func strs(t *testing.T, v any, what string) []string {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("%s is %T, want an array", what, v)
	}
	out := make([]string, len(list))
	for i, x := range list {
		s, ok := x.(string)
		if !ok {
			t.Fatalf("%s[%d] is %T, want a string", what, i, x)
		}
		out[i] = s
	}
	return out
}

func names[T ~string](xs ...T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

// TestEnums checks that every constant of the Go wire enums appears in the
// schema's enum and nothing else does, in the same order.
func TestEnums(t *testing.T) {
	var appliedOps []intents.Op
	for _, op := range intents.Ops {
		if op != intents.OpMerge { // expanded into set and delete before it is logged
			appliedOps = append(appliedOps, op)
		}
	}
	for _, c := range []struct {
		file, ptr string
		want      []string
	}{
		{"intent.json", "/properties/kind", names(intents.Kinds...)},
		{"intent.json", "/$defs/write/properties/op", names(intents.Ops...)},
		{"intent.json", "/properties/on_conflict", names(intents.OnConflictReject, intents.OnConflictWait, intents.OnConflictEscalate)},
		{"decision.json", "/properties/outcome", names(intents.Outcomes...)},
		{"decision.json", "/properties/reason", names(intents.Reasons...)},
		{"decision.json", "/$defs/conflict/properties/kind", names(intents.ConflictWriteWrite, intents.ConflictReadWrite,
			intents.ConflictWriteRead, intents.ConflictStale, intents.ConflictContradiction, intents.ConflictPrecondition, intents.ConflictApproval)},
		{"event.json", "/properties/type", names(intents.EventTypes...)},
		{"event.json", "/$defs/applied/properties/op", names(appliedOps...)},
		{"event.json", "/$defs/release/properties/cause", names(intents.CauseCommitted, intents.CauseAborted,
			intents.CauseExpired, intents.CausePreempted)},
		{"event.json", "/$defs/notice/properties/kind", names(intents.NoticeKinds...)},
		{"rules.json", "/$defs/rule/properties/on_conflict", names(intents.OnConflictReject, intents.OnConflictWait,
			intents.OnConflictEscalate)},
		{"rules.json", "/$defs/rule/properties/kind", []string{rules.KindFact, rules.KindHypothesis, rules.KindTask,
			rules.KindArtifact, rules.KindDecision}},
	} {
		got := strs(t, at(t, schemaDoc(t, c.file), c.ptr)["enum"], c.file+"#"+c.ptr+"/enum")
		if !slices.Equal(got, c.want) {
			t.Errorf("%s#%s: enum %q, Go constants %q", c.file, c.ptr, got, c.want)
		}
	}
}

// jsonFields returns the JSON names of a struct's fields and those of them
// encoding/json always writes (no omitempty).
func jsonFields(typ reflect.Type) (all, always []string) {
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		all = append(all, name)
		if !slices.Contains(strings.Split(opts, ","), "omitempty") {
			always = append(always, name)
		}
	}
	slices.Sort(all)
	slices.Sort(always)
	return all, always
}

// TestFields checks that each schema object has exactly the Go struct's JSON
// fields, requires exactly the ones Go always writes, and allows nothing
// else.
func TestFields(t *testing.T) {
	for _, c := range []struct {
		file, ptr string
		typ       reflect.Type
	}{
		{"intent.json", "", reflect.TypeFor[intents.Intent]()},
		{"intent.json", "/$defs/read", reflect.TypeFor[intents.Read]()},
		{"intent.json", "/$defs/write", reflect.TypeFor[intents.Write]()},
		{"decision.json", "", reflect.TypeFor[intents.Decision]()},
		{"decision.json", "/$defs/conflict", reflect.TypeFor[intents.Conflict]()},
		{"event.json", "", reflect.TypeFor[intents.Event]()},
		{"event.json", "/$defs/received", reflect.TypeFor[intents.Received]()},
		{"event.json", "/$defs/change", reflect.TypeFor[intents.Change]()},
		{"event.json", "/$defs/applied", reflect.TypeFor[intents.Applied]()},
		{"event.json", "/$defs/grant", reflect.TypeFor[intents.Grant]()},
		{"event.json", "/$defs/release", reflect.TypeFor[intents.Release]()},
		{"event.json", "/$defs/wait", reflect.TypeFor[intents.Wait]()},
		{"event.json", "/$defs/notice", reflect.TypeFor[intents.Notice]()},
		{"event.json", "/$defs/rules", reflect.TypeFor[intents.Rules]()},
		{"escalation.json", "", reflect.TypeFor[intents.Escalation]()},
		{"escalation.json", "/$defs/holder", reflect.TypeFor[intents.Holder]()},
		{"escalation.json", "/$defs/pathState", reflect.TypeFor[intents.PathState]()},
		{"resolution.json", "", reflect.TypeFor[intents.Resolution]()},
		{"rules.json", "", reflect.TypeFor[rules.File]()},
		{"rules.json", "/$defs/agent", reflect.TypeFor[rules.Agent]()},
		{"rules.json", "/$defs/rule", reflect.TypeFor[rules.Rule]()},
		{"rules.json", "/$defs/invariant", reflect.TypeFor[rules.Invariant]()},
		{"rules.json", "/$defs/quota", reflect.TypeFor[rules.Quota]()},
		{"rules.json", "/$defs/limits", reflect.TypeFor[rules.Limits]()},
	} {
		where := c.file + "#" + c.ptr
		obj := at(t, schemaDoc(t, c.file), c.ptr)
		props, _ := obj["properties"].(map[string]any)
		var got []string
		for k := range props {
			got = append(got, k)
		}
		slices.Sort(got)
		var required []string
		if r, ok := obj["required"]; ok {
			required = strs(t, r, where+"/required")
			slices.Sort(required)
		}
		all, always := jsonFields(c.typ)
		if !slices.Equal(got, all) {
			t.Errorf("%s: properties %q, %s has %q", where, got, c.typ, all)
		}
		if !slices.Equal(required, always) {
			t.Errorf("%s: required %q, %s always writes %q", where, required, c.typ, always)
		}
		if ap, ok := obj["additionalProperties"].(bool); !ok || ap {
			t.Errorf("%s: additionalProperties must be false", where)
		}
	}
}

// stringRules compares the schema's segment, path and expression rules with
// intents.ValidSegment, intents.CheckPath and Decode's blank check on s, and
// the rules file's pattern and principal rules with rules.ParsePattern and
// what rules.Compile accepts as a writer and as a quota key.
type stringRules struct {
	segment, path, expr, pattern, principal *jsonschema.Schema
	comp                                    *cond.Compiler
}

func newStringRules(t testing.TB) stringRules {
	c := newCompiler(t)
	return stringRules{
		segment:   compile(t, c, "intent.json#/$defs/segment"),
		path:      compile(t, c, "intent.json#/$defs/path"),
		expr:      compile(t, c, "intent.json#/$defs/conditions/items"),
		pattern:   compile(t, c, "rules.json#/$defs/pattern"),
		principal: compile(t, c, "rules.json#/$defs/principal"),
		comp:      cond.NewCompiler(cond.Options{}),
	}
}

func (r stringRules) check(t testing.TB, s string) {
	t.Helper()
	if goOK, schemaOK := intents.ValidSegment(s), r.segment.Validate(s) == nil; goOK != schemaOK {
		t.Errorf("segment %q: ValidSegment %v, schema %v", s, goOK, schemaOK)
	}
	if goOK, schemaOK := intents.CheckPath(s) == nil, r.path.Validate(s) == nil; goOK != schemaOK {
		t.Errorf("path %q: CheckPath %v, schema %v", s, goOK, schemaOK)
	}
	// Decode limits an expression in bytes, the schema in characters; they
	// agree on what is blank and on strings of at most MaxExprLen bytes.
	if len(s) <= intents.MaxExprLen {
		goOK := strings.TrimSpace(s) != ""
		if schemaOK := r.expr.Validate(s) == nil; goOK != schemaOK {
			t.Errorf("expression %q: Go non-blank %v, schema %v", s, goOK, schemaOK)
		}
	}
	if _, err := rules.ParsePattern(s); (err == nil) != (r.pattern.Validate(s) == nil) {
		t.Errorf("pattern %q: ParsePattern %v, schema %v", s, err, r.pattern.Validate(s) == nil)
	}
	schemaOK := r.principal.Validate(s) == nil
	for _, file := range []any{
		map[string]any{"rules": []any{map[string]any{"pattern": "a", "writers": []string{s}}}},
		map[string]any{"quotas": map[string]any{s: map[string]any{}}},
	} {
		data, err := json.Marshal(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rules.Compile(data, r.comp); (err == nil) != schemaOK {
			t.Errorf("principal %q in %s: rules.Compile %v, schema %v", s, data, err, schemaOK)
		}
	}
}

var stringSeeds = []string{
	"", "a", "report", "report.sections.intro", "a.b", "a..b", ".a", "a.", ".", "a b", "a/b", "a*", "a>",
	"under_score", "dash-ed", "MiXeD9", "rédacteur", "e\u0301", "報告.節_1", "введение", "ǅ", "ʰ", "٣", "x²", "Ⅻ",
	"\ufffd", "😀", "a\u200db", "a\u00a0b", "a\tb", "\t", " ", "\u3000", "\u0085", "\u180e", "\u200b", "\v",
	strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("é", 128), strings.Repeat("é", 129),
	strings.Repeat("s.", 31) + "s", strings.Repeat("s.", 32) + "s",
	strings.Repeat(strings.Repeat("x", 128)+".", 31) + strings.Repeat("y", 128),
	"*", "**", "***", "a.*", "a.**", "*.**", "**.a", "a.**.b", "a.**.**", "a.*b", "a.*.c", "*.*", ".**", "a.**.",
	strings.Repeat("s.", 32) + "**", strings.Repeat("s.", 33) + "**", strings.Repeat("*.", 31) + "*",
	strings.Repeat("*.", 32) + "*", strings.Repeat("*.", 32) + "**",
	"role:x", "role:", "role", "role:role:x", "Role:x", "role:a.b", "role:*", "role: x", "role:rédacteur",
	"role:" + strings.Repeat("r", 128), "role:" + strings.Repeat("r", 129), ":x",
}

func TestStringRulesAgree(t *testing.T) {
	r := newStringRules(t)
	for _, s := range stringSeeds {
		r.check(t, s)
	}
}

func FuzzStringRulesAgree(f *testing.F) {
	for _, s := range stringSeeds {
		f.Add(s)
	}
	r := newStringRules(f)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			t.Skip("JSON text carries valid UTF-8 only")
		}
		r.check(t, s)
	})
}
