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
		fmt.Fprintln(stderr, "usage: coagent submit [--nats URL] [--timeout D] FILE|-\n"+
			"sends the intent by request/reply on coagent.api.submit (the agent's own subject with --nkey), again while the coordinator is unavailable;\n"+
			"exits 0 only for applied, granted or committed")
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
	reqCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// An authenticated agent submits on its own subject.
	resp, err := sendIntent(reqCtx, nc, conn.subjects().Submit(conn.agent()), data, stderr)
	if err != nil {
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

// sendIntent sends the intent on subject and returns the reply. A
// coordinator that answers unavailable (its intake is full) is sent the
// same intent again, with backoff, until ctx ends: the intent's id makes
// that safe.
func sendIntent(ctx context.Context, nc *nats.Conn, subject string, data []byte, stderr io.Writer) (*nats.Msg, error) {
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		msg := nats.NewMsg(subject)
		msg.Data = data
		// The coordinator answers with the interim decision a little before
		// we give up, rather than not at all.
		wait := time.Duration(0)
		if dl, ok := ctx.Deadline(); ok {
			wait = max(time.Until(dl)-time.Second, 0)
		}
		msg.Header.Set(intents.HeaderWait, strconv.FormatInt(wait.Milliseconds(), 10))
		resp, err := nc.RequestMsgWithContext(ctx, msg)
		if err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
		err = apiError(resp)
		if err == nil {
			return resp, nil
		}
		if resp.Header.Get(micro.ErrorCodeHeader) != "unavailable" {
			return nil, err
		}
		fmt.Fprintf(stderr, "coagent submit: %v; sending the same intent again\n", err)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, fmt.Errorf("submit: %w (%w)", ctx.Err(), err)
		}
	}
}

// apiError turns a micro error reply into an error naming its code.
func apiError(resp *nats.Msg) error {
	if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" {
		return fmt.Errorf("%s: %s", code, resp.Header.Get(micro.ErrorHeader))
	}
	return nil
}
