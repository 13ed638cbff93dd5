package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// submitCommand sends one intent to the API and prints its decision.
type submitCommand struct{}

func (*submitCommand) Synopsis() string {
	return "submit an intent (FILE or - for stdin) and print its decision"
}

func (c *submitCommand) Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var conn natsFlags
	conn.register(fs, nats.DefaultURL)
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for a final decision")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent submit [--nats URL] [--timeout D] FILE|-\nexits 0 only for applied, granted or committed")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	var data []byte
	var err error
	if fs.Arg(0) == "-" {
		data, err = io.ReadAll(io.LimitReader(stdin, intents.MaxIntentSize+1))
	} else {
		data, err = os.ReadFile(fs.Arg(0))
	}
	if err != nil {
		return fmt.Errorf("read intent: %w", err)
	}
	nc, err := conn.connect("coagent submit")
	if err != nil {
		return err
	}
	defer nc.Close()
	// An authenticated agent submits on its own subject.
	msg := nats.NewMsg(conn.subjects().Submit(conn.agent()))
	msg.Data = data
	// The coordinator answers with the interim decision a little before we
	// give up, rather than not at all.
	msg.Header.Set(intents.HeaderWait, strconv.FormatInt(max(*timeout-time.Second, 0).Milliseconds(), 10))
	reqCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(reqCtx, msg)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if err := apiError(resp); err != nil {
		return err
	}
	var d intents.Decision
	if err := json.Unmarshal(resp.Data, &d); err != nil {
		return fmt.Errorf("submit: the coordinator answered %q: %w", resp.Data, err)
	}
	out, _ := json.MarshalIndent(&d, "", "  ")
	fmt.Fprintln(stdout, string(out))
	if !d.Outcome.Success() {
		return exitError(1)
	}
	return nil
}

// apiError turns a micro error reply into an error naming its code.
func apiError(resp *nats.Msg) error {
	if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" {
		return fmt.Errorf("%s: %s", code, resp.Header.Get(micro.ErrorHeader))
	}
	return nil
}
