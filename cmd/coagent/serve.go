package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// serveCommand runs the coordinator, on an embedded NATS server with
// JetStream by default or on an existing server or cluster.
type serveCommand struct{}

func (*serveCommand) Synopsis() string {
	return "run the coordinator (embedded NATS on 127.0.0.1:4222, or --nats URL)"
}

func (c *serveCommand) Run(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", defaultData, "data directory: the event log and the embedded server's JetStream store")
	listen := fs.String("listen", "127.0.0.1:4222", "address of the embedded NATS server")
	var conn natsFlags
	conn.register(fs, "")
	prefix := fs.String("prefix", "", "subject prefix (default coagent)")
	verbose := fs.Bool("v", false, "log operational messages to stderr")
	arbiterTimeout := fs.Duration("arbiter-timeout", 0, "how long an escalated intent waits for an arbiter (default 60s)")
	fallback := fs.String("arbiter-fallback", "reject", "what settles a case no arbiter resolved in time: reject, priority or first")
	rulesFile := fs.String("rules", "", "board rules file (JSON, see coagent schema rules.json); SIGHUP reloads it")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: coagent serve [--data DIR] [--listen ADDR | --nats URL [--creds FILE] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if err := os.MkdirAll(*data, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	var nc *nats.Conn
	var where string
	if conn.url == "" {
		ns, err := embedded(*listen, filepath.Join(*data, "jetstream"))
		if err != nil {
			return err
		}
		defer ns.Shutdown()
		if nc, err = nats.Connect(ns.ClientURL(), nats.InProcessServer(ns), nats.Name("coagent serve")); err != nil {
			return fmt.Errorf("connect to the embedded server: %w", err)
		}
		where = ns.ClientURL() + " (embedded NATS with JetStream)"
	} else {
		var err error
		if nc, err = conn.connect("coagent serve"); err != nil {
			return err
		}
		where = nc.ConnectedUrlRedacted()
	}
	defer nc.Close()
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, nil))
	}
	opts := coordinator.Options{Prefix: *prefix, Logger: logger}
	opts.Core.Engine.ArbiterTimeout = *arbiterTimeout
	if *fallback != "reject" {
		policy, err := arbiter.ByName(*fallback)
		if err != nil {
			return fmt.Errorf("--arbiter-fallback: %w", err)
		}
		opts.Core.Engine.Fallback = func(c *intents.Escalation) *intents.Resolution { return policy(engine.FallbackArbiter, c) }
	}
	svc, err := coordinator.Start(ctx, nc, logDir(*data), opts)
	if err != nil {
		return err
	}
	if *rulesFile != "" {
		if err := loadRules(ctx, svc, *rulesFile, stdout); err != nil {
			svc.Shutdown(context.Background())
			return err
		}
	}
	abs, _ := filepath.Abs(*data)
	fmt.Fprintf(stdout, "coagent: serving on %s; data in %s\n", where, abs)
	hup := make(chan os.Signal, 1)
	if *rulesFile != "" {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	for ctx.Err() == nil {
		select {
		case <-hup:
			// A file that does not compile is reported and changes nothing:
			// the rules in force stay.
			if err := loadRules(ctx, svc, *rulesFile, stdout); err != nil {
				fmt.Fprintf(stderr, "coagent: rules not reloaded: %v\n", err)
			}
		case <-ctx.Done():
		}
	}
	stop, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := svc.Shutdown(stop); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := nc.Drain(); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintln(stdout, "coagent: stopped")
	return nil
}

// loadRules puts the rules file at path in force, unless the same file is
// in force already (a restart records no new rules event).
func loadRules(ctx context.Context, svc *coordinator.Service, path string, stdout io.Writer) error {
	file, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	if cur, err := svc.Rules(ctx); err == nil && cur != nil && cur.Hash == engine.RulesHash(file) {
		fmt.Fprintf(stdout, "coagent: rules %s (%.12s) already in force\n", path, cur.Hash)
		return nil
	}
	rec, err := svc.SetRules(ctx, file, path)
	if err != nil {
		return fmt.Errorf("rules %s: %w", path, err)
	}
	fmt.Fprintf(stdout, "coagent: rules %s (%.12s) in force\n", path, rec.Hash)
	return nil
}

// embedded starts an in-process NATS server with JetStream on addr.
func embedded(addr, store string) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: port: %w", addr, err)
	}
	ns, err := server.NewServer(&server.Options{Host: host, Port: port, JetStream: true, StoreDir: store,
		MaxPayload: coordinator.MaxWireMessage, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded NATS server did not start on %s", addr)
	}
	return ns, nil
}

// natsFlags are the options of a connection to an existing NATS server.
type natsFlags struct {
	url, creds, ca, cert, key string
}

func (f *natsFlags) register(fs *flag.FlagSet, def string) {
	fs.StringVar(&f.url, "nats", def, "NATS server URL(s), comma separated")
	fs.StringVar(&f.creds, "creds", "", "NATS credentials file")
	fs.StringVar(&f.ca, "tls-ca", "", "CA certificate for TLS")
	fs.StringVar(&f.cert, "tls-cert", "", "client certificate for TLS")
	fs.StringVar(&f.key, "tls-key", "", "client key for TLS")
}

func (f *natsFlags) connect(name string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name)}
	if f.creds != "" {
		opts = append(opts, nats.UserCredentials(f.creds))
	}
	if f.ca != "" {
		opts = append(opts, nats.RootCAs(f.ca))
	}
	if f.cert != "" || f.key != "" {
		opts = append(opts, nats.ClientCert(f.cert, f.key))
	}
	nc, err := nats.Connect(f.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", f.url, err)
	}
	return nc, nil
}

// request sends one API request and returns the reply's body, or the
// micro error it carries as an error naming its code.
func (f *natsFlags) request(ctx context.Context, name, subject string, body []byte) ([]byte, error) {
	nc, err := f.connect(name)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := nc.RequestWithContext(reqCtx, subject, body)
	if err != nil {
		return nil, err
	}
	if err := apiError(resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}
