package main

import (
	"fmt"
	"io"

	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/replay"
	"github.com/spf13/cobra"
)

// newVerifyCmd is `coagent verify`: the whole store read, so that a
// damaged block anywhere is reported with its file, then the whole log
// folded and the materialized state checked against it, path by path.
func newVerifyCmd(e *env) *cobra.Command {
	var data string
	c := &cobra.Command{
		Use:   "verify",
		Short: "check every block of the store, fold the whole log and compare it with the materialized state",
		Args:  noArgs,
		RunE:  func(*cobra.Command, []string) error { return runVerify(data, e.stdout, e.stderr) },
	}
	c.Flags().StringVar(&data, "data", defaultData, "data directory of a stopped server")
	return c
}

func runVerify(data string, stdout, stderr io.Writer) error {
	log, err := openLog(data)
	if err != nil {
		return err
	}
	defer log.Close()
	if err := log.Check(); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	p := newProgress(stderr, "verify", 0)
	hash, err := replay.Verify(log, engine.Config{}, p.fn())
	p.finish()
	if err != nil {
		return err
	}
	if st := log.StateSeq(); st < log.LastSeq() {
		// A crash left the state behind the events: what is stored is
		// checked, and the rest is the coordinator's to write at start.
		fmt.Fprintf(stdout, "ok: every block of the store reads back; events %d..%d fold into the materialized state, which a crash left at event %d (the coordinator completes it when it starts); sha256 of the fold of all %d events %s\n",
			log.FirstSeq(), st, st, log.LastSeq(), hash)
		return nil
	}
	fmt.Fprintf(stdout, "ok: every block of the store reads back; events %d..%d fold into the materialized state; sha256 %s\n", log.FirstSeq(), log.LastSeq(), hash)
	return nil
}
