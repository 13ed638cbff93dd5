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
