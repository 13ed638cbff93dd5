package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// newStateCmd is `coagent state`: the current values of paths, or of
// everything under one (--prefix), with their versions and the rev they
// were read at.
func newStateCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	var prefix string
	c := &cobra.Command{
		Use:     "state [PATH... | --prefix PATH]",
		Aliases: []string{"get"}, // etcdctl's and nats kv's word
		Short:   "print the current values of paths (or of all under one, --prefix; of the whole tree, none) with their versions and the rev",
		Long: "Print each PATH = VALUE (version N, mod_rev M), then the rev they were read at. With --prefix PATH,\n" +
			"every leaf under PATH (a value that is not an object, or an empty object) on a line of its own, by path;\n" +
			"with no PATH (or --prefix \"\"), every leaf of the whole tree.\n" +
			"On a cluster, --node NAME reads from that coordinator, a standby too, as far as it has followed the log\n" +
			"(stderr says which node answered and at which event).",
		Args: func(c *cobra.Command, args []string) error {
			if c.Flags().Changed("prefix") && len(args) > 0 {
				return usagef(c, "--prefix %q lists a subtree: give it or PATHs, not both", prefix)
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if msg := conn.checkNode(); msg != "" {
				return usagef(c, "%s", msg)
			}
			if len(args) == 0 {
				// No PATH is the whole tree: the prefix "", as etcdctl's get "" --prefix.
				return runStatePrefix(c.Context(), &conn, &out, prefix, e.stdout, e.stderr)
			}
			return runState(c.Context(), &conn, &out, args, e.stdout, e.stderr)
		},
	}
	c.Flags().StringVar(&prefix, "prefix", "", `list every leaf under this path ("": the whole tree)`)
	conn.register(c.Flags(), e.defaultNATS())
	conn.registerNode(c.Flags())
	out.register(c.Flags(), true)
	return c
}

// stateAnswer is state.get's answer.
type stateAnswer struct {
	Rev    uint64                `json:"rev"`
	Values map[string]stateEntry `json:"values"`
}

type stateEntry struct {
	Exists   bool            `json:"exists"`
	Value    json.RawMessage `json:"value,omitempty"`
	Version  uint64          `json:"version"`
	ModRev   uint64          `json:"mod_rev,omitempty"`
	Redacted []string        `json:"redacted,omitempty"`
}

// getState asks state.get for paths; data is the answer as sent, by
// who answered it (answeredBy).
func getState(ctx context.Context, conn *natsFlags, paths []string) (out *stateAnswer, data []byte, by string, err error) {
	out, resp, err := stateReply(ctx, conn, paths)
	if err != nil {
		return nil, nil, "", err
	}
	return out, resp.Data, answeredBy(resp.Header), nil
}

// stateReply asks state.get for paths, and returns the answer decoded and
// as it came.
func stateReply(ctx context.Context, conn *natsFlags, paths []string) (*stateAnswer, *nats.Msg, error) {
	body, _ := json.Marshal(map[string][]string{"paths": paths})
	m := nats.NewMsg(conn.readSubject(intents.APIStateGet))
	m.Data = body
	resp, err := conn.requestReply(ctx, "coagent state", m)
	if err != nil {
		return nil, nil, fmt.Errorf("state: %w", err)
	}
	out := &stateAnswer{}
	if err := json.Unmarshal(resp.Data, out); err != nil {
		return nil, nil, fmt.Errorf("state: the coordinator answered %q: %w", resp.Data, err)
	}
	return out, resp, nil
}

// noteAnswered says on stderr who answered a read that asked a node by
// name, so that a standby's answer is never taken for the active one's.
func noteAnswered(conn *natsFlags, by string, stderr io.Writer) {
	if conn.node != "" && by != "" {
		fmt.Fprintf(stderr, "answered by %s\n", by)
	}
}

func runState(ctx context.Context, conn *natsFlags, format *output, paths []string, stdout, stderr io.Writer) error {
	out, data, by, err := getState(ctx, conn, paths)
	if err != nil && conn.shard == "" && conn.node == "" && len(intents.Boards(paths)) > 1 && strings.HasPrefix(err.Error(), "state: out_of_scope: ") {
		// Boards of two shards: each board's paths are asked on their own,
		// and each shard answers at its revision.
		return runStateShards(ctx, conn, format, paths, stdout)
	}
	if err != nil {
		return err
	}
	noteAnswered(conn, by, stderr)
	if format.json() {
		fmt.Fprintln(stdout, string(data))
		return nil
	}
	for _, p := range paths {
		printEntry(stdout, p, out.Values[p])
	}
	fmt.Fprintf(stdout, "rev %d\n", out.Rev)
	return nil
}

// runStateShards reads paths of boards of more than one shard: a
// state.get a board, each sent on to the board's shard, and prints each
// shard's revision.
func runStateShards(ctx context.Context, conn *natsFlags, format *output, paths []string, stdout io.Writer) error {
	values := map[string]stateEntry{}
	revs := map[string]uint64{}
	for _, board := range intents.Boards(paths) {
		var mine []string
		for _, p := range paths {
			if intents.Board(p) == board {
				mine = append(mine, p)
			}
		}
		out, resp, err := stateReply(ctx, conn, mine)
		if err != nil {
			return fmt.Errorf("%w (the paths of board %s)", err, board)
		}
		maps.Copy(values, out.Values)
		revs[cmp.Or(resp.Header.Get(intents.HeaderShard), intents.DefaultShard)] = out.Rev
	}
	if format.json() {
		b, err := json.Marshal(map[string]any{"revs": revs, "values": values})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	for _, p := range paths {
		printEntry(stdout, p, values[p])
	}
	var parts []string
	for _, sh := range slices.Sorted(maps.Keys(revs)) {
		parts = append(parts, fmt.Sprintf("rev %d (shard %s)", revs[sh], sh))
	}
	fmt.Fprintln(stdout, strings.Join(parts, ", "))
	return nil
}

func printEntry(w io.Writer, path string, v stateEntry) {
	switch {
	case !v.Exists && slices.Contains(v.Redacted, path):
		fmt.Fprintf(w, "%s redacted (the readers rules keep it from you)\n", path)
	case !v.Exists:
		fmt.Fprintf(w, "%s absent (version %d)\n", path, v.Version)
	default:
		fmt.Fprintf(w, "%s = %s (version %d, mod_rev %d)\n", path, v.Value, v.Version, v.ModRev)
	}
}

// statePrefixBatch is how many leaves one state.get asks for: the request
// stays far below NATS's default 1 MB payload whatever the paths.
const statePrefixBatch = 500

// statePrefixTries is how many times --prefix reads a subtree that
// changes while it is read before it gives up.
const statePrefixTries = 5

// runStatePrefix lists the leaves under prefix. state.get gives the
// subtree's value, whose leaves are then read for their versions; the
// prefix is read with them each time, and its version (the commits under
// it) must not change between the reads, so the listing is the subtree at
// one moment.
func runStatePrefix(ctx context.Context, conn *natsFlags, format *output, prefix string, stdout, stderr io.Writer) error {
	for try := 1; ; try++ {
		top, _, by, err := getState(ctx, conn, []string{prefix})
		if err != nil {
			return err
		}
		root := top.Values[prefix]
		// The root is an object even before any write, and only then has no members.
		if !root.Exists || prefix == "" && string(root.Value) == "{}" {
			noteAnswered(conn, by, stderr)
			if format.json() {
				b, _ := json.Marshal(stateAnswer{Rev: top.Rev, Values: map[string]stateEntry{}})
				fmt.Fprintln(stdout, string(b))
			}
			if slices.Contains(root.Redacted, prefix) {
				fmt.Fprintf(stderr, "%s is kept from you by the readers rules (rev %d)\n", prefix, top.Rev)
			} else if prefix == "" {
				fmt.Fprintf(stderr, "the state is empty (rev %d)\n", top.Rev)
			} else {
				fmt.Fprintf(stderr, "nothing under %s (rev %d)\n", prefix, top.Rev)
			}
			return nil
		}
		var value any
		if err := json.Unmarshal(root.Value, &value); err != nil {
			return fmt.Errorf("state: the value of %s: %w", prefix, err)
		}
		var leaves []string
		collectLeaves(prefix, value, &leaves)
		all := stateAnswer{Rev: top.Rev, Values: map[string]stateEntry{}}
		same := true
		for i := 0; i < len(leaves) && same; i += statePrefixBatch {
			batch := leaves[i:min(i+statePrefixBatch, len(leaves))]
			got, _, at, err := getState(ctx, conn, append([]string{prefix}, batch...))
			if err != nil {
				return err
			}
			by = at
			same = got.Values[prefix].Version == root.Version
			for _, p := range batch {
				all.Values[p] = got.Values[p]
			}
			all.Rev = got.Rev
		}
		if !same {
			if try == statePrefixTries {
				return fmt.Errorf("state --prefix %s: the subtree changed while it was read, %d times; try again", prefix, try)
			}
			continue
		}
		noteAnswered(conn, by, stderr)
		if format.json() {
			b, err := json.Marshal(all)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, string(b))
		} else {
			for _, p := range leaves {
				printEntry(stdout, p, all.Values[p])
			}
			fmt.Fprintf(stdout, "rev %d\n", all.Rev)
		}
		if len(root.Redacted) > 0 {
			fmt.Fprintf(stderr, "kept from you by the readers rules: %s\n", strings.Join(root.Redacted, ", "))
		}
		return nil
	}
}

// collectLeaves appends the paths of the leaves of v, the value at path,
// in path order: v itself when it is not an object or an empty one. The
// path "" is the root, whose members are the boards.
func collectLeaves(path string, v any, out *[]string) {
	obj, ok := v.(map[string]any)
	if path == "" && ok {
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			collectLeaves(k, obj[k], out)
		}
		return
	}
	if !ok || len(obj) == 0 {
		*out = append(*out, path)
		return
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		collectLeaves(path+"."+k, obj[k], out)
	}
}
