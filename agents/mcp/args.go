package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/coagent/coagent/intents"
	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolInput is what checkArguments knows of a tool.
type toolInput struct {
	schema *jsonschema.Schema
	// result says the tool's output is a Result, so that refused
	// arguments are a Result too; the others' outputs have another shape,
	// and their refusal has no structured content.
	result bool
}

// checkArguments is the receiving middleware that checks a tool call's
// arguments against the tool's input schema before the go-sdk does: the
// go-sdk's refusal is a bare `validating "arguments": …` naming schema
// keywords, with no advice, where a model needs the field, the value and
// what to do.
func (s *Server) checkArguments(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		call, ok := req.(*sdk.CallToolRequest)
		if method != "tools/call" || !ok || call.Params == nil {
			return next(ctx, method, req)
		}
		tool, ok := s.inputs[call.Params.Name]
		if !ok {
			return next(ctx, method, req)
		}
		var args any = map[string]any{}
		if len(call.Params.Arguments) > 0 {
			if err := json.Unmarshal(call.Params.Arguments, &args); err != nil {
				return refusedArguments(call.Params.Name, tool, []string{"arguments: " + err.Error()}), nil
			}
		}
		if probs := checkValue(tool.schema, args, ""); len(probs) > 0 {
			return refusedArguments(call.Params.Name, tool, probs), nil
		}
		return next(ctx, method, req)
	}
}

// refusedArguments is the tool error of a call whose arguments do not fit
// the tool's schema: reason invalid, each problem naming its field.
func refusedArguments(tool string, in toolInput, probs []string) *sdk.CallToolResult {
	r := invalid("arguments of " + tool + ": " + strings.Join(probs, "; "))
	res := toolResult(r.summary(tool), r)
	if in.result {
		res.StructuredContent = r
	}
	return res
}

// checkValue lists every way v does not fit schema s, each naming the
// field (writes[0].op) and the value. It covers what this package's
// schemas say: type, properties, required, additionalProperties, items,
// enum, minItems, minimum and maximum.
func checkValue(s *jsonschema.Schema, v any, field string) []string {
	if s == nil {
		return nil
	}
	name := field
	if name == "" {
		name = "arguments"
	}
	if s.Type != "" && !isType(v, s.Type) {
		return []string{fmt.Sprintf("%s = %s: want %s", name, show(v), article(s.Type))}
	}
	var probs []string
	if len(s.Enum) > 0 && !slices.Contains(s.Enum, v) {
		want := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			want[i] = fmt.Sprint(e)
		}
		probs = append(probs, fmt.Sprintf("%s = %s: want one of %s", name, show(v), strings.Join(want, ", ")))
	}
	switch v := v.(type) {
	case float64:
		if s.Minimum != nil && v < *s.Minimum {
			probs = append(probs, fmt.Sprintf("%s = %s: want at least %s", name, show(v), show(*s.Minimum)))
		}
		if s.Maximum != nil && v > *s.Maximum {
			probs = append(probs, fmt.Sprintf("%s = %s: want at most %s", name, show(v), show(*s.Maximum)))
		}
	case []any:
		if s.MinItems != nil && len(v) < *s.MinItems {
			probs = append(probs, fmt.Sprintf("%s is empty: want at least %d item(s)", name, *s.MinItems))
		}
		for i, e := range v {
			probs = append(probs, checkValue(s.Items, e, fmt.Sprintf("%s[%d]", field, i))...)
		}
	case map[string]any:
		for _, req := range s.Required {
			if _, ok := v[req]; !ok {
				probs = append(probs, join(field, req)+" is missing")
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p, ok := s.Properties[k]
			if !ok {
				if closed(s) {
					probs = append(probs, fmt.Sprintf("%s is not a field here (the fields: %s)", join(field, k), strings.Join(fields(s), ", ")))
				} else {
					probs = append(probs, checkValue(s.AdditionalProperties, v[k], join(field, k))...)
				}
				continue
			}
			probs = append(probs, checkValue(p, v[k], join(field, k))...)
		}
	}
	return probs
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// closed says s allows no properties but its own (additionalProperties
// false, which jsonschema writes as {"not": {}}).
func closed(s *jsonschema.Schema) bool {
	a := s.AdditionalProperties
	return a != nil && a.Not != nil && a.Not.Type == "" && len(a.Not.Types) == 0 && len(a.Not.Properties) == 0
}

func fields(s *jsonschema.Schema) []string {
	out := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// isType says v, as encoding/json decodes into any, is of JSON Schema
// type t.
func isType(v any, t string) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
	case "null":
		return v == nil
	}
	return true
}

func article(t string) string {
	switch t {
	case "array", "object", "integer":
		return "an " + t
	case "boolean":
		return "true or false"
	}
	return "a " + t
}

// show is v as JSON, clipped for a one-line detail.
func show(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return intents.Clip(string(data), 80)
}
