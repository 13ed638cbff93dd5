// Package schemas holds the JSON Schema (draft 2020-12) files of CoAgent's
// wire contract: intent.json (what agents publish), decision.json (what the
// coordinator answers), escalation.json (an arbiter's case),
// resolution.json (an arbiter's answer), event.json (an entry of the event
// log and its public feed, which refers to the others by $id) and
// rules.json (the board rules file given to `coagent serve --rules` and to
// the rules.set API: who may write and read where, state machines, value
// schemas, invariants and quotas). They are what a client in another
// language validates against — docs/wire.md points at them — and the binary
// embeds and serves them byte for byte, so the files in this directory are
// the published contract. Each schema's title is the name of the Go type
// that carries the document, in package intents or, for rules.json,
// coordinator/rules; the tests keep the two in agreement and list, in
// testdata, the rules only the Go validation can enforce.
//
// The package is a leaf: it imports nothing from this module.
package schemas

import (
	"embed"
	"fmt"
	"io/fs"
)

// BaseURL is the prefix of every schema's $id: the $id of intent.json is
// BaseURL + "intent.json". References between the schemas use these ids, so
// a validator must be given all of them.
const BaseURL = "https://coagent.dev/schemas/"

//go:embed *.json
var files embed.FS

// FS returns the schema files, named as in Names, at the root of a read-only
// file system (suitable for http.FileServerFS).
func FS() fs.FS { return files }

// Names returns the file names of the schemas in lexical order.
func Names() []string {
	entries, err := files.ReadDir(".")
	if err != nil {
		panic("schemas: reading embedded files: " + err.Error()) // cannot happen: embedded at build time
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Get returns a copy of the schema file with the given name ("intent.json").
// An unknown name is an error wrapping fs.ErrNotExist.
func Get(name string) ([]byte, error) {
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("schemas: %q: %w", name, fs.ErrNotExist)
	}
	return b, nil
}
