package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/coagent/coagent/coordinator"
	"github.com/spf13/cobra"
)

// newVersionCmd is `coagent version`, which --version also prints.
func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version of coagent and of the Go it was built with",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(e.stdout, version())
			return err
		},
	}
}

// version is the module's version as the build recorded it (a tag, for
// `go install …@v1.2.3`), or the one the coordinator's micro service
// reports when the build is of a source tree; then the Go version.
func version() string {
	v := coordinator.Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		if m := bi.Main.Version; m != "" && m != "(devel)" {
			v = m // a tag, or a pseudo-version naming the commit
		} else {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					v += " (" + s.Value[:12] + ")"
				}
			}
		}
	}
	return fmt.Sprintf("coagent version %s\ngo version %s %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
