package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// newShardsCmd is `coagent shards`: the shard map, and moving boards
// between shards (docs/sharding.md).
func newShardsCmd(e *env) *cobra.Command {
	var conn natsFlags
	var out output
	list := &cobra.Command{
		Use:   "list",
		Short: "print the shard map (board → shard) and what each shard's log says of its boards",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runShardsList(c.Context(), &conn, out.json(), e.stdout)
		},
	}
	out.register(list.Flags(), true)
	var replicas int
	var wait time.Duration
	move := func(use, short string, fresh bool) *cobra.Command {
		cmd := &cobra.Command{
			Use:   use + " BOARD SHARD",
			Short: short,
			Args:  argsBetween(2, 2, "BOARD SHARD"),
			RunE: func(c *cobra.Command, args []string) error {
				if !intents.ValidSegment(args[0]) {
					return usagef(c, "board %q: not a path segment", args[0])
				}
				if err := intents.CheckShard(args[1]); err != nil && args[1] != intents.DefaultShard {
					return usagef(c, "%v", err)
				}
				return runShardsMove(c.Context(), &conn, args[0], args[1], fresh, replicas, wait, e.stdout)
			},
		}
		cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to ask again while a transaction, a waiting intent or a task's claim holds the board where it is")
		cmd.Flags().IntVar(&replicas, "replicas", 0, "the shard map bucket's replicas when this makes it (default: those of the default shard's intents stream)")
		return cmd
	}
	assign := move("assign", "give a board that no shard took yet to SHARD (its state, if any, goes with it)", true)
	mv := move("move", "move a board, with its state and versions, from the shard that owns it to SHARD", false)
	c := group(&cobra.Command{
		Use:   "shards",
		Short: "show the shard map (shards list), or move a board to another shard (shards assign|move BOARD SHARD)",
		Long: "A shard is a coordinator group (serve --shard NAME) that decides the intents of the boards it owns.\n" +
			"A board no shard took belongs to the default shard. Moving a board asks its owner to release it (from then\n" +
			"on the owner refuses its intents, and its state and versions are recorded in its log), the new shard to\n" +
			"adopt that state, and then records the move in the shard map that clients route by. A move cut short\n" +
			"is finished by running it again.",
	}, list, assign, mv)
	conn.register(c.PersistentFlags(), e.defaultNATS())
	return c
}

// shardMap binds the shard map bucket, making it when make is set.
func shardMap(ctx context.Context, nc *nats.Conn, base intents.Subjects, make bool, replicas int) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, base.ShardsBucket())
	if err == nil || !make || !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	if replicas == 0 {
		replicas = 1
		if st, err := js.Stream(ctx, base.Stream(intents.StreamIntents)); err == nil {
			replicas = st.CachedInfo().Config.Replicas
		}
	}
	return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: base.ShardsBucket(), Replicas: replicas,
		Description: "coagent: the shard that owns each board moved off the default shard"})
}

// boardsOf reads the whole map.
func boardsOf(ctx context.Context, kv jetstream.KeyValue) (map[string]string, error) {
	out := map[string]string{}
	if kv == nil {
		return out, nil
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[k] = string(e.Value())
	}
	return out, nil
}

func runShardsList(ctx context.Context, conn *natsFlags, asJSON bool, stdout io.Writer) error {
	nc, err := conn.connect("coagent shards")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	base := conn.base()
	kv, err := shardMap(ctx, nc, base, false, 0)
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("shards list: the shard map: %w", err)
	}
	boards, err := boardsOf(ctx, kv)
	if err != nil {
		return fmt.Errorf("shards list: the shard map: %w", err)
	}
	names := []string{intents.DefaultShard}
	for _, sh := range boards {
		if !slices.Contains(names, sh) {
			names = append(names, sh)
		}
	}
	slices.Sort(names[1:])
	type shardOut struct {
		intents.ShardInfo
		Error string `json:"error,omitempty"`
	}
	var shards []shardOut
	for _, name := range names {
		so := shardOut{ShardInfo: intents.ShardInfo{Shard: name}}
		data, err := conn.request(ctx, "coagent shards", base.Shard(name).API(intents.APIShardInfo), nil)
		if err == nil {
			err = json.Unmarshal(data, &so.ShardInfo)
		}
		if err != nil {
			so.Error = err.Error()
		}
		shards = append(shards, so)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"boards": boards, "shards": shards})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BOARD\tSHARD")
	for _, b := range slices.Sorted(maps.Keys(boards)) {
		fmt.Fprintf(tw, "%s\t%s\n", b, boards[b])
	}
	fmt.Fprintf(tw, "(any other)\t%s\n", intents.DefaultShard)
	tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tREV\tITS LOG SAYS")
	for _, so := range shards {
		if so.Error != "" {
			fmt.Fprintf(tw, "%s\t-\tno answer: %s\n", so.Shard, so.Error)
			continue
		}
		var says []string
		for _, b := range slices.Sorted(maps.Keys(so.Owners)) {
			if so.Owners[b] == so.Shard {
				says = append(says, b+" is its own")
			} else {
				says = append(says, b+" went to "+so.Owners[b])
			}
		}
		if len(says) == 0 {
			says = []string{"no board moved"}
		}
		// What two-phase commit holds there now: nothing, most of the
		// time; a count that stays is a coordinator that does not answer.
		if so.InDoubt > 0 {
			says = append(says, fmt.Sprintf("%d parts of other shards' applies in doubt", so.InDoubt))
		}
		if so.Unanswered > 0 {
			says = append(says, fmt.Sprintf("%d cross-shard applies unanswered", so.Unanswered))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", so.Shard, so.Rev, strings.Join(says, "; "))
	}
	return tw.Flush()
}

// runShardsMove moves board to shard to: its owner (the map's, else the
// default shard) releases it, to adopts what the release carried, and the
// map records the move. fresh (assign) refuses a board the map has.
func runShardsMove(ctx context.Context, conn *natsFlags, board, to string, fresh bool, replicas int, wait time.Duration, stdout io.Writer) error {
	nc, err := conn.connect("coagent shards")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+wait)
	defer cancel()
	base := conn.base()
	kv, err := shardMap(ctx, nc, base, true, replicas)
	if err != nil {
		return fmt.Errorf("shards: the shard map %s: %w", base.ShardsBucket(), err)
	}
	from := intents.DefaultShard
	if e, err := kv.Get(ctx, board); err == nil {
		from = string(e.Value())
		if fresh {
			return fmt.Errorf("shards assign: board %s is shard %s's already; use shards move", board, from)
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("shards: the shard map: %w", err)
	}
	if from == to {
		fmt.Fprintf(stdout, "board %s: shard %s's already\n", board, to)
		return nil
	}
	req, _ := json.Marshal(intents.HandoffRequest{Board: board, Shard: to})
	// What holds the board (a transaction, a waiting intent, a claim)
	// ends in its own time: the release is asked again until wait ends.
	deadline := time.Now().Add(wait)
	data, err := conn.request(ctx, "coagent shards", base.Shard(from).API(intents.APIShardRelease), req)
	for err != nil && strings.Contains(err.Error(), "once that ends") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		data, err = conn.request(ctx, "coagent shards", base.Shard(from).API(intents.APIShardRelease), req)
	}
	if err != nil {
		return fmt.Errorf("shards: shard %s releasing board %s: %w", from, board, err)
	}
	var rel intents.HandoffReply
	if err := json.Unmarshal(data, &rel); err != nil || rel.Handoff == nil {
		return fmt.Errorf("shards: shard %s answered the release %q: %v", from, data, err)
	}
	req, _ = json.Marshal(intents.HandoffRequest{Board: board, Shard: from, From: rel.Handoff, Seq: rel.Seq})
	if _, err := conn.request(ctx, "coagent shards", base.Shard(to).API(intents.APIShardAdopt), req); err != nil {
		// Run again, the move finds the board released and adopts it;
		// an adoption that was recorded before its answer was lost is
		// told by the shard's own account of its boards.
		if info, ierr := shardInfo(ctx, conn, base.Shard(to)); ierr != nil || info.Owners[board] != to {
			return fmt.Errorf("shards: shard %s adopting board %s (released at event %d of shard %s; run the move again to finish it): %w",
				to, board, rel.Seq, from, err)
		}
	}
	if to == intents.DefaultShard {
		err = kv.Delete(ctx, board)
	} else {
		_, err = kv.Put(ctx, board, []byte(to))
	}
	if err != nil {
		return fmt.Errorf("shards: board %s moved to shard %s, but the map does not say so yet (run the move again): %w", board, to, err)
	}
	fmt.Fprintf(stdout, "board %s: moved from shard %s to shard %s (release at event %d of %s)\n", board, from, to, rel.Seq, from)
	return nil
}

func shardInfo(ctx context.Context, conn *natsFlags, subj intents.Subjects) (intents.ShardInfo, error) {
	var info intents.ShardInfo
	data, err := conn.request(ctx, "coagent shards", subj.API(intents.APIShardInfo), nil)
	if err != nil {
		return info, err
	}
	return info, json.Unmarshal(data, &info)
}
