package schemas_test

import (
	"bytes"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/coagent/coagent/schemas"
)

// A client validates an intent before it sends it, as a client in any
// language would: every schema is added under its $id (they refer to each
// other), then the one for the document is compiled.
func Example() {
	c := jsonschema.NewCompiler()
	for _, name := range schemas.Names() {
		data, err := schemas.Get(name)
		if err != nil {
			fmt.Println(err)
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			fmt.Println(err)
			return
		}
		if err := c.AddResource(schemas.BaseURL+name, doc); err != nil {
			fmt.Println(err)
			return
		}
	}
	intent, err := c.Compile(schemas.BaseURL + "intent.json")
	if err != nil {
		fmt.Println(err)
		return
	}

	for _, doc := range []string{
		`{"id":"01JD0000000000000000000010","agent":"w1","kind":"apply",
		  "writes":[{"path":"report.title","op":"set","value":"Q3"}]}`,
		`{"id":"01JD0000000000000000000011","agent":"w1","kind":"apply",
		  "writes":[{"path":"report.title","op":"replace","value":"Q3"}]}`,
	} {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(doc)))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(intent.Validate(inst))
	}
	// Output:
	// <nil>
	// jsonschema validation failed with 'https://coagent.dev/schemas/intent.json#'
	// - at '/writes/0/op': value must be one of 'set', 'delete', 'merge', 'append', 'incr'
}
