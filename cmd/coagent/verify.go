package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
)

// verifyCommand reads the whole store, so that a damaged block anywhere
// is reported with its file, then folds the whole log and checks the
// materialized state against it, path by path.
type verifyCommand struct{}

func (*verifyCommand) Synopsis() string {
	return "check every block of the store, fold the whole log and compare it with the materialized state"
}

func (c *verifyCommand) Run(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", defaultData, "data directory of a stopped server")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent verify [--data DIR]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	log, err := openLog(*data)
	if err != nil {
		return err
	}
	defer log.Close()
	if err := log.Check(); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	hash, err := coordinator.Verify(log, engine.Config{})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ok: every block of the store reads back; events %d..%d fold into the materialized state; sha256 %s\n", log.FirstSeq(), log.LastSeq(), hash)
	return nil
}
