// Package docs_test keeps the documentation honest: every Go snippet of
// README.md and docs/*.md is quoted from a file that is compiled and
// tested (examples/go/..., the SDK's Example tests), and this test fails
// when a quote and its source drift apart.
//
// A quote is a fenced code block preceded by a marker line naming the
// file, relative to the repository root, and optionally a region:
//
//	<!-- quote examples/go/quickstart/main.go sdk -->
//
// A region is the lines between `docs:begin NAME` and `docs:end NAME`
// comments in the source file; without a region the whole file is quoted.
package docs_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/rules"
)

// root is the repository root, from this package's directory.
const root = "../.."

var (
	quoteMarker = regexp.MustCompile(`^<!-- quote (\S+)(?: (\S+))? -->$`)
	fence       = regexp.MustCompile("^```")
	// link is a markdown link to a relative target; an http(s) or mailto
	// link, or an anchor in the same file, is not checked.
	link = regexp.MustCompile(`\]\(([^)\s#]+)(#[^)\s]*)?\)`)
)

// docs returns README.md and docs/*.md, relative to root.
func docs(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range more {
		rel, _ := filepath.Rel(root, f)
		files = append(files, rel)
	}
	return files
}

// block is one fenced code block of a markdown file.
type block struct {
	line   int    // of the opening fence, 1-based
	lang   string // after the opening fence
	text   string // the lines between the fences, each ending in "\n"
	quote  string // the marker's file, if a marker precedes it
	region string // the marker's region
}

// blocks parses the fenced code blocks of a markdown text.
func blocks(md string) ([]block, error) {
	var out []block
	var cur *block
	var marker []string
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case fence.MatchString(line):
			cur = &block{line: n, lang: strings.TrimSpace(strings.TrimPrefix(line, "```"))}
			if marker != nil {
				cur.quote, cur.region = marker[1], marker[2]
			}
			marker = nil
		default:
			if m := quoteMarker.FindStringSubmatch(line); m != nil {
				marker = m
			} else if strings.Contains(line, "<!-- quote") {
				return nil, fmt.Errorf("line %d: a quote marker is <!-- quote FILE [REGION] -->: %q", n, line)
			} else if strings.TrimSpace(line) != "" {
				marker = nil
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: code block never closed", cur.line)
	}
	return out, sc.Err()
}

// region returns the lines of src between the `docs:begin name` and
// `docs:end name` comments, or all of src when name is empty.
func region(src, name string) (string, error) {
	if name == "" {
		return src, nil
	}
	var b strings.Builder
	in, found := false, false
	for _, line := range strings.SplitAfter(src, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasSuffix(t, "docs:begin "+name):
			if found {
				return "", fmt.Errorf("region %q begins twice", name)
			}
			in, found = true, true
		case strings.HasSuffix(t, "docs:end "+name):
			if !in {
				return "", fmt.Errorf("region %q ends before it begins", name)
			}
			in = false
		case in:
			b.WriteString(line)
		}
	}
	if !found {
		return "", fmt.Errorf("no region %q (a `docs:begin %s` comment)", name, name)
	}
	if in {
		return "", fmt.Errorf("region %q never ends (a `docs:end %s` comment)", name, name)
	}
	return b.String(), nil
}

// check returns the problems of one markdown text: a Go block without a
// quote marker, a quote that is not its source's region byte for byte.
// read reads a file by its path relative to the repository root.
func check(name, md string, read func(string) (string, error)) []string {
	bs, err := blocks(md)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	var problems []string
	for _, b := range bs {
		if b.quote == "" {
			if b.lang == "go" {
				problems = append(problems, fmt.Sprintf("%s:%d: a Go block that quotes no file: put the code in a compiled, tested file and precede the block with <!-- quote FILE REGION -->", name, b.line))
			}
			continue
		}
		src, err := read(b.quote)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: quote of %s: %v", name, b.line, b.quote, err))
			continue
		}
		want, err := region(src, b.region)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: quote of %s: %v", name, b.line, b.quote, err))
			continue
		}
		if b.text != want {
			problems = append(problems, fmt.Sprintf("%s:%d: the block differs from %s region %q:\n%s", name, b.line, b.quote, b.region, firstDiff(b.text, want)))
		}
	}
	return problems
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("  line %d of the block: %q\n  line %d of the source: %q", i+1, gl, i+1, wl)
		}
	}
	return "  (they differ only in their final newline)"
}

func readRoot(path string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	return string(data), err
}

func TestQuotesMatchTheirSources(t *testing.T) {
	quotes := 0
	for _, name := range docs(t) {
		md, err := readRoot(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range check(name, md, readRoot) {
			t.Error(p)
		}
		bs, _ := blocks(md)
		for _, b := range bs {
			if b.quote != "" {
				quotes++
			}
		}
	}
	if quotes == 0 {
		t.Error("no quotes found: the README quotes examples/go/quickstart")
	}
}

// TestCheckFindsDrift: the check itself reports an edited quote, a Go
// block that quotes nothing, and a region that is missing.
func TestCheckFindsDrift(t *testing.T) {
	src := "package main\n\n// docs:begin r\nfunc f() {}\n// docs:end r\n"
	read := func(string) (string, error) { return src, nil }
	for _, c := range []struct {
		name, md, want string
	}{
		{"same", "<!-- quote x.go r -->\n```go\nfunc f() {}\n```\n", ""},
		{"edited", "<!-- quote x.go r -->\n```go\nfunc f() { return }\n```\n", "differs from x.go"},
		{"unquoted", "```go\nfunc f() {}\n```\n", "quotes no file"},
		{"marker too far", "<!-- quote x.go r -->\n\nsome text\n```go\nfunc f() {}\n```\n", "quotes no file"},
		{"no region", "<!-- quote x.go s -->\n```go\nfunc f() {}\n```\n", `no region "s"`},
		{"whole file", "<!-- quote x.go -->\n```go\nfunc f() {}\n```\n", "differs from x.go"},
	} {
		problems := check("doc.md", c.md, read)
		switch {
		case c.want == "" && len(problems) > 0:
			t.Errorf("%s: %v", c.name, problems)
		case c.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], c.want)):
			t.Errorf("%s: problems %q, want one containing %q", c.name, problems, c.want)
		}
	}
}

// TestLinksResolve: every relative link of README.md and docs/*.md names a
// file or directory of the repository (a link out of it, such as
// ../shared/SPEC.md, would not resolve for a reader of the repository).
func TestLinksResolve(t *testing.T) {
	for _, name := range docs(t) {
		md, err := readRoot(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(md, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := filepath.Join(root, filepath.Dir(name), filepath.FromSlash(target))
			rel, err := filepath.Rel(root, path)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s: link %s leaves the repository", name, target)
				continue
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", name, target, err)
			}
		}
	}
}

// TestCIRunsTheREADMEsTestCommand: the test command the README gives is
// the one .ci/run runs.
func TestCIRunsTheREADMEsTestCommand(t *testing.T) {
	const command = "go test ./..."
	readme, err := readRoot("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := readRoot(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(readme, "    "+command+"\n") {
		t.Errorf("README.md gives no `%s` command line", command)
	}
	runs := false
	for _, line := range strings.Split(ci, "\n") {
		if strings.TrimSpace(line) == command {
			runs = true
		}
	}
	if !runs {
		t.Errorf(".ci/run does not run `%s`, the README's test command", command)
	}
}

// TestREADMESaysHowToGetTheSDK: the README gives the `go get` line of the
// SDK under the module path go.mod declares, so that a module of a user's
// gets the package the README's Go quotes import.
func TestREADMESaysHowToGetTheSDK(t *testing.T) {
	mod, err := readRoot("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^module (\S+)$`).FindStringSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod declares no module")
	}
	readme, err := readRoot("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if line := "    go get " + m[1] + "/agents@"; !strings.Contains(readme, line) {
		t.Errorf("README.md gives no %q… line: a user's module cannot tell how to get the SDK", strings.TrimSpace(line))
	}
}

// TestRulesExampleCompiles: the rules file docs/rules.md quotes is one the
// coordinator puts in force.
func TestRulesExampleCompiles(t *testing.T) {
	data, err := readRoot("examples/rules/board.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rules.Compile([]byte(data), cond.NewCompiler(cond.Options{})); err != nil {
		t.Errorf("examples/rules/board.json: %v", err)
	}
}
