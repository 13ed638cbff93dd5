package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/coagent/coagent/coordinator/replay"
	"github.com/spf13/cobra"
)

// newReplayCmd is `coagent replay`: the state at a point of the log,
// rebuilt from the log alone and printed with its rev and hash, the same
// hash the live coordinator's state had then.
func newReplayCmd(e *env) *cobra.Command {
	var data, until string
	var out output
	c := &cobra.Command{
		Use:   "replay",
		Short: "rebuild the state at a point of the log and print it with its rev and sha256",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			return runReplay(data, until, out.json(), e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	fs.StringVar(&data, "data", defaultData, "data directory of a stopped server")
	fs.StringVar(&until, "until", "", "a sequence number or an RFC 3339 time; the default is the end of the log")
	out.register(fs, true)
	return c
}

func runReplay(data, until string, asJSON bool, stdout, stderr io.Writer) error {
	var seq uint64
	var at time.Time
	if until != "" {
		var err error
		if seq, err = strconv.ParseUint(until, 10, 64); err != nil {
			if at, err = time.Parse(time.RFC3339Nano, until); err != nil {
				return fmt.Errorf("--until %q is neither a sequence number nor an RFC 3339 time", until)
			}
		}
	}
	log, err := openLog(data)
	if err != nil {
		return err
	}
	defer log.Close()
	p := newProgress(stderr, "replay", 0)
	eng, err := replay.Run(log, replay.Options{Seq: seq, At: at, Progress: p.fn()})
	p.finish()
	if err != nil {
		return err
	}
	tree := eng.State()
	out := struct {
		Seq   uint64         `json:"seq"`
		Rev   uint64         `json:"rev"`
		Hash  string         `json:"sha256"`
		State map[string]any `json:"state"`
	}{eng.Seq(), tree.Rev(), replay.Hash(tree), tree.Root()}
	// A log from before increments were kept finite may fold to a number
	// JSON cannot hold; say so rather than print half a state.
	unencodable := func(err error) error {
		return fmt.Errorf("the state at seq %d holds a number JSON cannot hold (an increment that overflowed, before such increments were refused); its sha256 is %s: %w", out.Seq, out.Hash, err)
	}
	if asJSON {
		b, err := json.Marshal(out)
		if err != nil {
			return unencodable(err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	b, err := json.MarshalIndent(out.State, "", "  ")
	if err != nil {
		return unencodable(err)
	}
	fmt.Fprintf(stdout, "%s\nseq %d  rev %d  sha256 %s\n", b, out.Seq, out.Rev, out.Hash)
	return nil
}
