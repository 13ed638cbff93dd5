package conflict

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the testdata scripts")

// runScript runs a testdata script through do and compares the outputs.
//
// A script is a list of cases. A case is one command line, a line "----" and
// the expected output up to the next blank line. Lines starting with '#'
// and blank lines between cases are comments. With -rewrite the file is
// written back with the outputs the code gives now, for review in a diff.
func runScript(t *testing.T, file string, do func(t *testing.T, cmd string, args []string) string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		cmdLine := i + 1
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", file, cmdLine, line)
		}
		i += 2
		var want []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			want = append(want, lines[i])
		}
		i-- // let the loop copy the blank line
		fields := strings.Fields(line)
		got := strings.TrimRight(do(t, fields[0], fields[1:]), "\n")
		if got == "" {
			got = "ok"
		}
		if *rewrite {
			out.WriteString(line + "\n----\n" + got + "\n")
			continue
		}
		if w := strings.Join(want, "\n"); got != w {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, cmdLine, line, got, w)
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
