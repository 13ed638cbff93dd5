package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natsauth"
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
	verbose := fs.Bool("v", false, "log operational messages to stderr")
	arbiterTimeout := fs.Duration("arbiter-timeout", 0, "how long an escalated intent waits for an arbiter (default 60s)")
	fallback := fs.String("arbiter-fallback", "reject", "what settles a case no arbiter resolved in time: reject, priority or first")
	rulesFile := fs.String("rules", "", "board rules file (JSON, see coagent schema rules.json); SIGHUP reloads it")
	authOn := fs.Bool("auth", false, "admit only the agents of DATA/agents.json (coagent agents add), each limited to its own subjects, and answer reads as the readers rules let each agent see; SIGHUP reloads it (with --nats: the server enforces the identities, see docs/auth.md)")
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
	var srv *natsauth.Server
	// The registry gives the server its users and the rules their roles;
	// it is read once for both, here and at each SIGHUP.
	reloadable := *rulesFile != "" || *authOn
	var reg *natsauth.Registry
	if reloadable {
		var err error
		if reg, err = natsauth.Load(natsauth.RegistryPath(*data)); err != nil {
			return err
		}
	}
	if conn.url == "" {
		cfg := natsauth.ServerConfig{Listen: *listen, Store: filepath.Join(*data, "jetstream"),
			MaxPayload: coordinator.MaxWireMessage, Prefix: conn.prefix}
		if *authOn {
			cfg.Agents = reg
		}
		var err error
		if srv, err = natsauth.StartServer(cfg); err != nil {
			return err
		}
		defer srv.Shutdown()
		if nc, err = srv.Connect(nats.Name("coagent serve")); err != nil {
			return err
		}
		where = srv.NATS().ClientURL() + " (embedded NATS with JetStream)"
		if srv.Authenticated() {
			where += ", agents authenticated"
		}
	} else {
		var err error
		if nc, err = conn.connect("coagent serve"); err != nil {
			return err
		}
		where = nc.ConnectedUrlRedacted()
		if *authOn {
			// The server is the operator's: it must give each agent the
			// permissions docs/auth.md lists, its inbox prefix among them.
			where += ", reads answered per agent (the server must keep each agent to its own inbox prefix)"
		}
	}
	defer nc.Close()
	// Errors (a contained panic, a failed log write) are always reported;
	// -v adds the operational messages.
	level := slog.LevelError
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	opts := coordinator.Options{Prefix: conn.prefix, Logger: logger, Auth: *authOn}
	opts.Core.Engine.ArbiterTimeout = *arbiterTimeout
	if *fallback != "reject" {
		policy, err := arbiter.ByName(*fallback)
		if err != nil {
			return fmt.Errorf("--arbiter-fallback: %w", err)
		}
		opts.Core.Engine.Fallback = func(c *intents.Escalation) *intents.Resolution { return policy(engine.FallbackArbiter, c) }
	}
	if srv != nil {
		opts.Interest = coordinator.InterestOf(srv.NATS())
	}
	svc, err := coordinator.Start(ctx, nc, logDir(*data), opts)
	if err != nil {
		return err
	}
	// The rules are in force before anyone is told where to connect; their
	// line follows the start-up line.
	var rulesLine bytes.Buffer
	if reloadable {
		if err := loadRules(ctx, svc, *rulesFile, *data, reg, &rulesLine); err != nil {
			svc.Shutdown(context.Background())
			return err
		}
	}
	hup := make(chan os.Signal, 1)
	if reloadable {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	abs, _ := filepath.Abs(*data)
	fmt.Fprintf(stdout, "coagent: serving on %s; data in %s\n", where, abs)
	io.Copy(stdout, &rulesLine)
	for ctx.Err() == nil {
		select {
		case <-hup:
			// A file that cannot be read or does not compile is reported
			// and changes nothing: the agents and rules in force stay.
			reg, err := natsauth.Load(natsauth.RegistryPath(*data))
			if err != nil {
				fmt.Fprintf(stderr, "coagent: nothing reloaded: %v\n", err)
				continue
			}
			if srv != nil && srv.Authenticated() {
				if err := srv.Reload(reg); err != nil {
					fmt.Fprintf(stderr, "coagent: agents not reloaded: %v\n", err)
				}
			}
			if err := loadRules(ctx, svc, *rulesFile, *data, reg, stdout); err != nil {
				fmt.Fprintf(stderr, "coagent: rules not reloaded: %v\n", err)
			}
		case <-svc.Done():
			// The event log failed (a damaged store, a full disk): stop
			// rather than stay up deciding nothing.
			stop, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			svc.Shutdown(stop)
			cancel()
			return fmt.Errorf("the coordinator stopped: %w", svc.Err())
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

// loadRules puts the rules file at path in force, with the roles of the
// agent registry merged into its agents, unless the same rules are in force
// already (a restart records no new rules event).
func loadRules(ctx context.Context, svc *coordinator.Service, path, data string, reg *natsauth.Registry, stdout io.Writer) error {
	var file []byte
	if path != "" {
		var err error
		if file, err = os.ReadFile(path); err != nil {
			return fmt.Errorf("rules: %w", err)
		}
	}
	file, err := natsauth.MergeRoles(file, reg.Roles())
	if err != nil {
		return fmt.Errorf("rules %s: %w", path, err)
	}
	if path == "" {
		path = natsauth.RegistryPath(data)
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

// embedded starts an embedded server with JetStream on addr that admits
// anyone, as bench and demo run.
func embedded(addr, store string) (*server.Server, error) {
	srv, err := natsauth.StartServer(natsauth.ServerConfig{Listen: addr, Store: store, MaxPayload: coordinator.MaxWireMessage})
	if err != nil {
		return nil, err
	}
	return srv.NATS(), nil
}
