package main

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// kvFlags are the flags of the one-write commands, put, del and incr: an
// etcdctl or `nats kv` user's way of writing one path, each one intent.
type kvFlags struct {
	conn    natsFlags
	timeout time.Duration
	agent   string
	// expect is --expect-version: the write is applied only while the
	// path is at this version (0: absent), else rejected as a stale read.
	expect uint64
	out    output
}

// defaultKVAgent is the agent of a put, del or incr given neither --agent
// nor --nkey: the intent must name one.
const defaultKVAgent = "cli"

func (f *kvFlags) register(c *cobra.Command, e *env) {
	fs := c.Flags()
	f.conn.register(fs, e.defaultNATS())
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the decision")
	fs.StringVar(&f.agent, "agent", "", "the intent's agent (default the agent of --nkey, else "+defaultKVAgent+")")
	fs.Uint64Var(&f.expect, "expect-version", 0, "write only if the path is at this version (0: absent); else rejected stale_read, as etcd's compare-and-swap")
	f.out.register(fs, true)
}

// send submits one apply of w, with a versioned read of its path under
// --expect-version (expect says it was given), as `coagent submit` does.
func (f *kvFlags) send(c *cobra.Command, e *env, w intents.Write, expect bool) error {
	in := map[string]any{"kind": intents.KindApply, "writes": []intents.Write{w}}
	if expect {
		v := f.expect
		in["reads"] = []intents.Read{{Path: w.Path, Version: &v}}
	}
	agent := f.agent
	if agent == "" && f.conn.agent() == "" {
		agent = defaultKVAgent
	}
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	s := submission{name: c.CommandPath(), conn: &f.conn, timeout: f.timeout, agent: agent, out: &f.out}
	return s.send(c.Context(), data, e.stdout, e.stderr)
}

// checkPath is a usage error for a PATH argument that is not a path.
func checkPath(c *cobra.Command, path string) error {
	if err := intents.CheckPath(path); err != nil {
		return usagef(c, "PATH %q: %v", path, err)
	}
	return nil
}

// newPutCmd is `coagent put PATH VALUE`: one set.
func newPutCmd(e *env) *cobra.Command {
	var f kvFlags
	var asString bool
	c := &cobra.Command{
		Use:   "put PATH VALUE",
		Short: "set PATH to VALUE (JSON, or else a string): one intent",
		Long: "Set PATH to VALUE in one intent (an apply of one set), and print its decision as submit does. VALUE is\n" +
			"read as JSON when it is JSON (42, true, {\"a\":1}, \"text\"), else as a string; --string takes it as a string\n" +
			"always. --expect-version N applies it only while PATH is at version N (0: absent), as etcd's compare-and-swap.",
		Args: argsBetween(2, 2, "PATH and VALUE"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkPath(c, args[0]); err != nil {
				return err
			}
			value := jsonOrString(args[1])
			if asString {
				value, _ = json.Marshal(args[1])
			}
			return f.send(c, e, intents.Write{Path: args[0], Op: intents.OpSet, Value: value}, c.Flags().Changed("expect-version"))
		},
	}
	f.register(c, e)
	c.Flags().BoolVar(&asString, "string", false, "VALUE is a string, even when it reads as JSON (put a.b 42 --string sets \"42\")")
	return c
}

// newDelCmd is `coagent del PATH`: one delete.
func newDelCmd(e *env) *cobra.Command {
	var f kvFlags
	c := &cobra.Command{
		Use:     "del PATH",
		Aliases: []string{"delete"},
		Short:   "delete PATH and everything under it: one intent",
		Long: "Delete PATH and everything under it in one intent (an apply of one delete), and print its decision as\n" +
			"submit does. --expect-version N deletes it only while PATH is at version N.",
		Args: argsBetween(1, 1, "PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkPath(c, args[0]); err != nil {
				return err
			}
			return f.send(c, e, intents.Write{Path: args[0], Op: intents.OpDelete}, c.Flags().Changed("expect-version"))
		},
	}
	f.register(c, e)
	return c
}

// newIncrCmd is `coagent incr PATH [N]`: one incr.
func newIncrCmd(e *env) *cobra.Command {
	var f kvFlags
	c := &cobra.Command{
		Use:   "incr PATH [N]",
		Short: "add N (default 1) to the number at PATH (absent reads as 0): one intent",
		Long: "Add N (a number, default 1; negative to take away) to the number at PATH, absent reading as 0, in one\n" +
			"intent (an apply of one incr), and print its decision as submit does. Increments of one path by many\n" +
			"agents do not conflict. --expect-version N applies it only while PATH is at version N.",
		Args: argsBetween(1, 2, "PATH"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := checkPath(c, args[0]); err != nil {
				return err
			}
			n := "1"
			if len(args) == 2 {
				if _, err := strconv.ParseFloat(args[1], 64); err != nil || !json.Valid([]byte(args[1])) {
					return usagef(c, "N %q: not a number", args[1])
				}
				n = args[1]
			}
			return f.send(c, e, intents.Write{Path: args[0], Op: intents.OpIncr, Value: json.RawMessage(n)}, c.Flags().Changed("expect-version"))
		},
	}
	f.register(c, e)
	return c
}

// jsonOrString is v as a JSON value: itself when it is JSON, else the
// string v.
func jsonOrString(v string) json.RawMessage {
	if json.Valid([]byte(v)) {
		return json.RawMessage(v)
	}
	b, _ := json.Marshal(v)
	return b
}
