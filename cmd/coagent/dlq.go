package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// dlqCommand reads and retries the cases no arbiter resolved in time.
type dlqCommand struct{}

func (*dlqCommand) Synopsis() string {
	return "list, show or retry the cases no arbiter resolved by their deadline"
}

func (c *dlqCommand) Run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dlq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var conn natsFlags
	conn.register(fs, nats.DefaultURL)
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent dlq [--nats URL] [--json] list | show ID | retry ID\n"+
			"retry sends the escalated intent again under a new id (meta.retry_of names the old one),\n"+
			"so it is decided anew and escalates again if it still conflicts; the dead letter is removed")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	verb := fs.Arg(0)
	if (verb == "list") != (fs.NArg() == 1) || (verb != "list" && verb != "show" && verb != "retry") || fs.NArg() > 2 {
		fs.Usage()
		return errUsage
	}
	nc, err := conn.connect("coagent dlq")
	if err != nil {
		return err
	}
	defer nc.Close()
	subj := conn.subjects()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, subj.Stream(intents.StreamDLQ))
	if err != nil {
		return fmt.Errorf("dead-letter stream %s: %w", subj.Stream(intents.StreamDLQ), err)
	}
	letters, err := deadLetters(ctx, stream)
	if err != nil {
		return err
	}
	if verb == "list" {
		for _, l := range letters {
			if *asJSON {
				b, _ := json.Marshal(l.c)
				fmt.Fprintln(stdout, string(b))
				continue
			}
			fmt.Fprintln(stdout, describeCase(l.c))
		}
		return nil
	}
	id := fs.Arg(1)
	var found *deadLetter
	for i := range letters {
		if letters[i].c.ID == id {
			found = &letters[i]
		}
	}
	if found == nil {
		return fmt.Errorf("no dead letter %s", id)
	}
	if verb == "show" {
		b, _ := json.MarshalIndent(found.c, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	again, err := arbiter.Retry(found.c, ulid.Make().String())
	if err != nil {
		return fmt.Errorf("retry %s: %w", id, err)
	}
	data, err := json.Marshal(again)
	if err != nil {
		return fmt.Errorf("retry %s: %w", id, err)
	}
	if _, err := js.Publish(ctx, subj.Intents(again.Agent), data, jetstream.WithMsgID(again.ID)); err != nil {
		return fmt.Errorf("retry %s: %w", id, err)
	}
	if err := stream.DeleteMsg(ctx, found.seq); err != nil {
		return fmt.Errorf("retry %s: sent as %s, but the dead letter stays: %w", id, again.ID, err)
	}
	fmt.Fprintf(stdout, "retried %s as intent %s of agent %s\n", id, again.ID, again.Agent)
	return nil
}

type deadLetter struct {
	seq uint64
	c   *intents.Escalation
}

// deadLetters reads every case in the dead-letter stream, oldest first.
func deadLetters(ctx context.Context, stream jetstream.Stream) ([]deadLetter, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []deadLetter
	if info.State.Msgs == 0 {
		return nil, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // removed by a retry
		}
		if err != nil {
			return nil, fmt.Errorf("dead letter %d: %w", seq, err)
		}
		var c intents.Escalation
		if err := json.Unmarshal(m.Data, &c); err != nil {
			return nil, fmt.Errorf("dead letter %d: %w", seq, err)
		}
		out = append(out, deadLetter{seq: seq, c: &c})
	}
	return out, nil
}

func describeCase(c *intents.Escalation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s deadline %s", c.ID, c.Deadline.Format(time.RFC3339))
	if in := c.Escalated(); in != nil {
		fmt.Fprintf(&b, " agent %s %s", in.Agent, in.Kind)
		if in.Action != "" {
			fmt.Fprintf(&b, " %s", in.Action)
		}
	}
	for _, cf := range c.Conflicts {
		fmt.Fprintf(&b, "; %s %s with %s", cf.Kind, cf.Path, cf.WithAgent)
	}
	return b.String()
}
