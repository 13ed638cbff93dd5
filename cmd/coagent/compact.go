package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/coagent/coagent/coordinator/replay"
	"github.com/spf13/cobra"
)

// newCompactCmd is `coagent compact`: old events dropped after writing
// the snapshot later replays start from, optionally archived first.
func newCompactCmd(e *env) *cobra.Command {
	var data, archive string
	var before uint64
	c := &cobra.Command{
		Use:   "compact --before SEQ",
		Short: "snapshot the state before SEQ, archive the older events (optional) and drop them",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if before == 0 {
				return usagef(c, "missing --before SEQ")
			}
			return runCompact(data, before, archive, e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	fs.StringVar(&data, "data", defaultData, "data directory of a stopped server")
	fs.Uint64Var(&before, "before", 0, "drop the events before this sequence number (required)")
	fs.StringVar(&archive, "archive", "", "write the dropped events to this file first, one JSON object per line")
	return c
}

func runCompact(data string, before uint64, archive string, stdout, stderr io.Writer) error {
	log, err := openLog(data)
	if err != nil {
		return err
	}
	defer log.Close()
	if before > log.LastSeq()+1 {
		return fmt.Errorf("--before %d is past the end of the log (%d)", before, log.LastSeq())
	}
	if before <= log.FirstSeq() {
		fmt.Fprintf(stdout, "nothing to do: the log already starts at %d\n", log.FirstSeq())
		return nil
	}
	p := newProgress(stderr, "compact: snapshot", 0)
	eng, err := replay.Run(log, replay.Options{Seq: before - 1, Progress: p.fn()})
	p.finish()
	if err != nil {
		return err
	}
	snap, err := json.Marshal(eng.Snapshot())
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	if err := log.SaveSnapshot(before-1, snap); err != nil {
		return err
	}
	var w io.Writer
	if archive != "" {
		f, err := os.OpenFile(archive, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		defer f.Close()
		w = f
	}
	p = newProgress(stderr, "compact: drop", 0)
	err = log.CompactProgress(before, w, p.fn())
	p.finish()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "compacted: the log now starts at %d; state at %d snapshotted (sha256 %s)\n",
		before, before-1, replay.Hash(eng.State()))
	return nil
}
