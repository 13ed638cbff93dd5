package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
)

// compactCommand drops old events after writing the snapshot later replays
// start from, optionally archiving them first.
type compactCommand struct{}

func (*compactCommand) Synopsis() string {
	return "snapshot the state before SEQ, archive the older events (optional) and drop them"
}

func (c *compactCommand) Run(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", defaultData, "data directory of a stopped server")
	before := fs.Uint64("before", 0, "drop the events before this sequence number (required)")
	archive := fs.String("archive", "", "write the dropped events to this file first, one JSON object per line")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent compact [--data DIR] --before SEQ [--archive FILE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *before == 0 {
		fs.Usage()
		return errUsage
	}
	log, err := openLog(*data)
	if err != nil {
		return err
	}
	defer log.Close()
	if *before > log.LastSeq()+1 {
		return fmt.Errorf("--before %d is past the end of the log (%d)", *before, log.LastSeq())
	}
	if *before <= log.FirstSeq() {
		fmt.Fprintf(stdout, "nothing to do: the log already starts at %d\n", log.FirstSeq())
		return nil
	}
	eng, err := coordinator.ReplayUntil(log, engine.Config{}, *before-1, time.Time{})
	if err != nil {
		return err
	}
	snap, err := json.Marshal(eng.Snapshot())
	if err != nil {
		return fmt.Errorf("encode snapshot: %w", err)
	}
	if err := log.SaveSnapshot(*before-1, snap); err != nil {
		return err
	}
	var w io.Writer
	if *archive != "" {
		f, err := os.OpenFile(*archive, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("archive: %w", err)
		}
		defer f.Close()
		w = f
	}
	if err := log.Compact(*before, w); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "compacted: the log now starts at %d; state at %d snapshotted (sha256 %s)\n",
		*before, *before-1, coordinator.Hash(eng.State()))
	return nil
}
