package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coagent/coagent/arbiter"
	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/coordinator/cluster"
	"github.com/coagent/coagent/coordinator/cond"
	"github.com/coagent/coagent/coordinator/engine"
	"github.com/coagent/coagent/coordinator/notify"
	"github.com/coagent/coagent/coordinator/rules"
	"github.com/coagent/coagent/eventlog"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/httpd"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// serveFlags are the flags of `coagent serve`.
type serveFlags struct {
	data, listen        string
	conn                natsFlags
	verbose             bool
	arbiterTimeout      time.Duration
	arbiterQuorum       int
	arbitersOf          string
	fallback, rulesFile string
	authOn              bool
	cluster             clusterFlags
	// http is the HTTP listener's address ("off": none); httpSet says
	// --http was given; httpToken is --http-token (or $COAGENT_HTTP_TOKEN).
	http, httpToken string
	httpSet         bool
	// httpInsecure is --http-insecure: serve --http on an address other
	// than loopback without --auth, on purpose.
	httpInsecure bool
	// sync is --sync as given; syncAlways and syncEvery what it says.
	sync       string
	syncAlways bool
	syncEvery  time.Duration
	// notify is --notify, the webhook's URL; notifySecret the key read
	// from --notify-secret-file.
	notify, notifySecretFile string
	notifySecret             []byte
	// shard is --shard: the shard this coordinator decides, and
	// basePrefix the deployment's prefix when it is given (the shard's
	// own, which the coordinator serves under, is then conn.prefix).
	shard, basePrefix string
}

// deployment is the deployment's subject prefix: the one given, before
// --shard made the coordinator's its shard's ("" for the default).
func (f *serveFlags) deployment() string {
	if f.shard != "" {
		return f.basePrefix
	}
	return f.conn.prefix
}

// checkSync reads --sync: always, a duration, or "" for the default:
// always for a node of a cluster, whose coordinators answer a decision
// once a quorum of the nodes stored it in COAGENT_LOG, the log of record;
// nats-server's own for a server alone, whose coordinator syncs its own
// log before it answers.
func (f *serveFlags) checkSync(c *cobra.Command) error {
	switch {
	case f.sync == "" && f.cluster.listen != "":
		f.syncAlways = true
		return nil
	case f.sync == "":
		return nil
	case f.conn.url != "":
		return usagef(c, "--sync configures the embedded server's JetStream; with --nats %s, set sync_interval in that server's configuration", f.conn.url)
	case f.sync == "always":
		f.syncAlways = true
		return nil
	}
	d, err := time.ParseDuration(f.sync)
	if err != nil || d <= 0 {
		return usagef(c, "--sync %q: want always or a duration (10s, 1m)", f.sync)
	}
	f.syncEvery = d
	return nil
}

// durability says when a cluster member's answered decisions are on disk,
// for its start-up line: a decision is answered once a quorum of the nodes
// stored it, and each node's JetStream holds what it stored in memory
// until it syncs.
func (f *serveFlags) durability() string {
	switch {
	case f.conn.url != "":
		return "decisions answered once a quorum of that cluster's JetStream stored them, on disk as its sync_interval says (nats-server's default: within 2m, so a power loss of a quorum at once can lose what was answered meanwhile)"
	case f.syncAlways:
		return "this node syncs each write to disk before it acknowledges it (--sync always, the default; on every node, no power loss takes an answered decision)"
	}
	every := f.syncEvery
	if every == 0 {
		every = 2 * time.Minute
	}
	return fmt.Sprintf("warning: this node syncs to disk every %s (--sync): a power loss of a quorum at once can lose the decisions answered meanwhile", every)
}

// newServeCmd is `coagent serve`: the coordinator, on an embedded NATS
// server with JetStream by default or on an existing server or cluster.
func newServeCmd(e *env) *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "serve",
		Short: "run the coordinator (embedded NATS on 127.0.0.1:4222, or --nats URL)",
		Long: "Run the coordinator until SIGINT or SIGTERM: on an embedded NATS server with JetStream (--listen),\n" +
			"or on an existing server or cluster (--nats URL [--creds FILE] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]).\n" +
			"With --cluster HOST:PORT --routes URL,… --name NAME the embedded server is a node of a JetStream cluster,\n" +
			"and its coordinator one of the cluster's: the active one, or a standby that follows the replicated log\n" +
			"and takes over when the active one dies (SPEC §10); --coordinator=false runs the NATS node alone.\n" +
			"With --nats of a cluster, --name NAME makes this coordinator one of that cluster's.\n" +
			"SIGHUP reloads --rules and the agents of --auth.",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			// Every flag is checked before the data directory is touched.
			if sh := f.conn.shard; sh != "" {
				if err := intents.CheckShard(sh); err != nil && sh != intents.DefaultShard {
					return usagef(c, "--shard: %v", err)
				}
				// The shard's subjects, streams, lease key and log are under
				// its own prefix from here on.
				f.shard, f.basePrefix = sh, f.conn.prefix
				f.conn.prefix, f.conn.shard = f.conn.subjects().Prefix, ""
			}
			if f.arbiterQuorum < 0 || f.arbiterQuorum > rules.MaxQuorum {
				return usagef(c, "--arbiter-quorum %d: want 0 (the first resolution settles a case) to %d", f.arbiterQuorum, rules.MaxQuorum)
			}
			if f.arbitersOf != "" && (f.arbiterQuorum < 2 || !intents.ValidSegment(strings.TrimPrefix(f.arbitersOf, "role:"))) {
				return usagef(c, "--arbiters-of %q: want an agent name or role:NAME, with --arbiter-quorum 2 or more", f.arbitersOf)
			}
			if _, err := arbiter.ByName(f.fallback); err != nil {
				return usagef(c, "--arbiter-fallback: %v", err)
			}
			if err := f.cluster.check(c, &f); err != nil {
				return err
			}
			if err := f.checkSync(c); err != nil {
				return err
			}
			if f.rulesFile != "" {
				// Compiled again once the coordinator runs, with the
				// registry's roles; a file that cannot be must not leave a
				// data directory behind.
				file, err := os.ReadFile(f.rulesFile)
				if err != nil {
					return fmt.Errorf("--rules: %w", err)
				}
				if _, err := rules.Compile(file, cond.NewCompiler(cond.Options{})); err != nil {
					return fmt.Errorf("--rules %s: %w", f.rulesFile, err)
				}
			}
			if f.notify != "" || f.notifySecretFile != "" {
				if f.notify == "" || f.notifySecretFile == "" {
					return usagef(c, "--notify and --notify-secret-file go together: the receiver checks each notice's signature with the secret")
				}
				secret, err := os.ReadFile(f.notifySecretFile)
				if err != nil {
					return fmt.Errorf("--notify-secret-file: %w", err)
				}
				if f.notifySecret = bytes.TrimSpace(secret); len(f.notifySecret) < 16 {
					return usagef(c, "--notify-secret-file %s: %d bytes; want a secret of at least 16", f.notifySecretFile, len(f.notifySecret))
				}
				if err := (notify.Config{URL: f.notify, Secret: f.notifySecret}).Check(); err != nil {
					return usagef(c, "--notify %q: %v", f.notify, err)
				}
			}
			f.httpSet = c.Flags().Changed("http")
			if f.httpToken == "" {
				f.httpToken = os.Getenv("COAGENT_HTTP_TOKEN")
			}
			if f.httpToken != "" && !f.authOn {
				return usagef(c, "--http-token (or COAGENT_HTTP_TOKEN) needs --auth: without it the HTTP listener asks no token")
			}
			if f.http != "off" && !f.authOn && !f.httpInsecure && !httpd.LoopbackHost(f.http) {
				return usagef(c, "--http %s is not a loopback address, and without --auth the listener asks no token: the console and the whole state "+
					"(every value, the log, the arbiter's cases) would be open to whoever reaches it; give --auth (it then asks an observer's token), "+
					"a loopback address (127.0.0.1:7070), or --http-insecure to serve it so on purpose", f.http)
			}
			return runServe(c.Context(), &f, e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.data, "data", defaultData, "data directory: the event log and the embedded server's JetStream store")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:4222", "address of the embedded NATS server")
	fs.StringVar(&f.sync, "sync", "", "how the embedded server's JetStream syncs its store to disk: always (before it acknowledges each write) or every DURATION; with --cluster it decides what a power loss can take (docs/cluster.md). The default: always with --cluster, nats-server's 2m alone")
	f.conn.register(fs, "")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "log the coordinator's start (data, streams, events replayed from which snapshot), recoveries, slow groups and shutdown to stderr")
	fs.DurationVar(&f.arbiterTimeout, "arbiter-timeout", 0, "how long an escalated intent waits for an arbiter (default 60s)")
	fs.StringVar(&f.fallback, "arbiter-fallback", "reject", "what settles a case no arbiter resolved in time: reject, priority or first")
	fs.IntVar(&f.arbiterQuorum, "arbiter-quorum", 0, "settle each conflict case when this many arbiters' resolutions agree, rather than at the first (a rule's arbiters decides for its paths)")
	fs.StringVar(&f.arbitersOf, "arbiters-of", "", "with --arbiter-quorum: only these may vote, an agent name or role:NAME (default any arbiter)")
	fs.StringVar(&f.rulesFile, "rules", "", "board rules file (JSON, see coagent schema rules.json); SIGHUP reloads it")
	f.cluster.register(fs)
	fs.StringVar(&f.http, "http", defaultHTTP, "address of the HTTP listener: /metrics, /healthz, /readyz and the console; off for none")
	fs.BoolVar(&f.httpInsecure, "http-insecure", false, "allow --http on an address other than loopback without --auth: anyone who reaches it reads the whole state and log")
	fs.StringVar(&f.httpToken, "http-token", "", "with --auth, a token the HTTP listener admits besides the observers' (coagent agents add NAME --role observer); the default is $COAGENT_HTTP_TOKEN")
	fs.StringVar(&f.notify, "notify", "", "a webhook URL to POST what needs a person to: cases waiting for arbiters, dead letters, reclaims, reconciles, operators' overrides (JSON, signed, retried; docs/observability.md)")
	fs.StringVar(&f.notifySecretFile, "notify-secret-file", "", "with --notify, a file holding the secret each notice is signed with (HMAC-SHA256, header Coagent-Signature)")
	fs.BoolVar(&f.authOn, "auth", false, "admit only the agents of DATA/agents.json (coagent agents add), each limited to its own subjects, and answer reads as the readers rules let each agent see; SIGHUP reloads it (with --nats: the server enforces the identities, see docs/auth.md)")
	return c
}

// reloadable says whether serve reads the agent registry, and again at
// SIGHUP: for the server's users (--auth) or the rules' roles (--rules).
func (f *serveFlags) reloadable() bool { return f.rulesFile != "" || f.authOn }

// serving is what runServe starts, each step a method: the registry, the
// NATS server or connection, the HTTP listener, then the coordinator,
// alone or a member of a cluster's.
type serving struct {
	f              *serveFlags
	stdout, stderr io.Writer
	// reg is the registry as read at the start (nil unless reloadable):
	// it gives the server its users and the rules their roles, read once
	// for both. roles are the roles in force, for the rules an admin puts
	// in force through rules.set; replaced at each SIGHUP.
	reg   *natsauth.Registry
	roles atomic.Pointer[map[string][]string]
	srv   *natsauth.Server // the embedded server; nil with --nats
	nc    *nats.Conn       // serve's connection; nil on a node with no coordinator
	hs    *httpSide        // nil with no HTTP listener
	// where is the start-up line's account of where serve serves.
	where string
	// started: the data directory is in use, this start's or, when its
	// log is locked, another's that may have made what is new in it.
	started bool
	// closers close what the steps started, the last started first.
	closers []func()
}

func runServe(ctx context.Context, f *serveFlags, stdout, stderr io.Writer) (err error) {
	// A start that fails (a port in use, a locked log) leaves the data
	// directory as it found it, once the server's shutdown has closed the
	// files it made.
	before := noteData(f.data)
	s := &serving{f: f, stdout: stdout, stderr: stderr}
	defer func() {
		s.close()
		if err != nil && !s.started {
			before.restore()
		}
	}()
	if err := os.MkdirAll(f.data, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if err := s.loadRegistry(); err != nil {
		return err
	}
	if err := s.startNATS(); err != nil {
		return err
	}
	if !f.cluster.coordinator {
		s.started = true
		return serveNode(ctx, f, s.srv, stdout)
	}
	if err := s.startHTTP(); err != nil {
		return err
	}
	if err := s.checkPlace(ctx); err != nil {
		return err
	}
	opts, err := s.options()
	if err != nil {
		return err
	}
	if f.cluster.member() {
		s.started = true
		return s.serveMember(ctx, opts)
	}
	return s.serveAlone(ctx, opts)
}

// onClose has fn run at the end of runServe, before what was started
// earlier is closed.
func (s *serving) onClose(fn func()) { s.closers = append(s.closers, fn) }

func (s *serving) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// loadRegistry reads the agent registry, and with --auth registers the
// operator in it when nobody is an admin.
func (s *serving) loadRegistry() error {
	if !s.f.reloadable() {
		return nil
	}
	reg, err := natsauth.Load(natsauth.RegistryPath(s.f.data))
	if err != nil {
		return err
	}
	if s.f.authOn {
		if err := ensureOperator(s.f.data, s.f.cluster.embeddedNode(), reg, s.stderr); err != nil {
			return err
		}
	}
	s.reg = reg
	r := reg.Roles()
	s.roles.Store(&r)
	return nil
}

// startNATS starts the embedded server and connects to it, or connects to
// the server of --nats. A node with no coordinator makes no connection.
func (s *serving) startNATS() error {
	f := s.f
	if f.conn.url != "" {
		nc, err := f.conn.connect("coagent serve")
		if err != nil {
			return err
		}
		s.nc = nc
		s.onClose(nc.Close)
		s.where = nc.ConnectedUrlRedacted()
		if f.authOn {
			// The server is the operator's: it must give each agent the
			// permissions docs/auth.md lists, its inbox prefix among them.
			s.where += ", reads answered per agent (the server must keep each agent to its own inbox prefix)"
		}
		return nil
	}
	cfg := natsauth.ServerConfig{Listen: f.listen, Store: filepath.Join(f.data, "jetstream"),
		// The agents' permissions are the deployment's: every shard's
		// subjects under the default shard's prefix.
		MaxPayload: coordinator.MaxWireMessage, Prefix: f.deployment(), Cluster: f.cluster.config(),
		SyncAlways: f.syncAlways, SyncInterval: f.syncEvery}
	if f.authOn {
		cfg.Agents = s.reg
	}
	f.cluster.warnRoutes(s.stderr)
	srv, err := natsauth.StartServer(cfg)
	if err != nil {
		var inUse *natsauth.AddrInUseError
		if errors.As(err, &inUse) {
			if f.cluster.listen != "" && inUse.Addr == f.cluster.listen {
				return fmt.Errorf("%s, the route address, is in use (another coagent serve or nats-server?)\n  pick another with --cluster HOST:PORT", inUse.Addr)
			}
			return fmt.Errorf("%s is in use (another coagent serve or nats-server?)\n  pick another with --listen HOST:PORT, or use the running server with --nats nats://%s", inUse.Addr, inUse.Addr)
		}
		return err
	}
	s.srv = srv
	s.onClose(srv.Shutdown)
	if !f.cluster.coordinator {
		return nil
	}
	if s.nc, err = srv.Connect(nats.Name("coagent serve")); err != nil {
		return err
	}
	s.onClose(s.nc.Close)
	s.where = srv.NATS().ClientURL() + " (embedded NATS with JetStream" + f.cluster.describe(srv) + ")"
	if srv.Authenticated() {
		s.where += ", agents authenticated"
	}
	return nil
}

// startHTTP starts the HTTP listener with the console at "/", unless
// --http is off or the default address is taken.
func (s *serving) startHTTP() error {
	f := s.f
	var tokens *httpd.Tokens
	if f.authOn {
		tokens = httpd.NewTokens(s.reg, f.httpToken)
	}
	l, err := listenHTTP(f.http, f.httpSet, tokens, s.stderr)
	if err != nil || l == nil {
		return err
	}
	hs := &httpSide{Server: l, tokens: tokens}
	if f.authOn && tokens.None() {
		fmt.Fprintf(s.stderr, "coagent: note: no HTTP token: only /healthz answers (coagent agents add NAME --role observer prints one; or --http-token)\n")
	}
	if !f.authOn && !hs.Loopback() {
		fmt.Fprintf(s.stderr, "coagent: warning: --http-insecure: %s answers anyone who reaches it, with no token: the console, the whole state, the log\n", hs.URL())
	}
	s.where += "; http on " + hs.URL()
	actors := &consoleActors{srv: s.srv}
	s.onClose(actors.close)
	roles := func() map[string][]string {
		if r := s.roles.Load(); r != nil {
			return *r
		}
		return nil
	}
	if hs.link, err = newConsoleLink(f, s.srv, s.reg, roles, actors, s.stderr); err != nil {
		return err
	}
	s.onClose(hs.link.Close)
	hs.Mount(hs.link.Console())
	hs.Start()
	s.onClose(func() {
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Close(stop)
	})
	s.hs = hs
	return nil
}

// checkPlace waits until the embedded cluster can place the streams, or
// notes what an external cluster's will have; then, unless this
// coordinator is a cluster's, checks that no other serves the prefix.
func (s *serving) checkPlace(ctx context.Context) error {
	f := s.f
	if s.srv != nil {
		if err := f.cluster.waitCluster(ctx, s.srv, s.stderr); err != nil {
			return err
		}
	} else if name := s.nc.ConnectedClusterName(); name != "" && f.cluster.replicas == 1 {
		fmt.Fprintf(s.stderr, "coagent: note: the server is in cluster %s; streams this coordinator makes have 1 replica unless given --replicas 3\n", name)
	}
	if !f.cluster.member() {
		return checkNoCoordinator(s.nc, f)
	}
	return nil
}

// options are the coordinator's options the flags give.
func (s *serving) options() (coordinator.Options, error) {
	f := s.f
	// Errors (a contained panic, a failed log write) and warnings (a
	// stream found with other replicas, a missing consumer made again) are
	// always reported; -v adds the operational messages.
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(s.stderr, &slog.HandlerOptions{Level: level}))
	opts := coordinator.Options{Prefix: f.conn.prefix, Shard: f.shard, Logger: logger, Auth: f.authOn, Replicas: f.cluster.replicas,
		Roles: func() map[string][]string {
			if r := s.roles.Load(); r != nil {
				return *r
			}
			return nil
		}}
	opts.Core.Engine.ArbiterTimeout = f.arbiterTimeout
	opts.Core.Engine.Panel = intents.Panel{Quorum: f.arbiterQuorum, Of: f.arbitersOf}
	if f.fallback != "reject" {
		policy, err := arbiter.ByName(f.fallback) // checked by newServeCmd
		if err != nil {
			return opts, fmt.Errorf("--arbiter-fallback: %w", err)
		}
		opts.Core.Engine.Fallback = func(c *intents.Escalation) *intents.Resolution { return policy(engine.FallbackArbiter, c) }
	}
	if s.srv != nil {
		opts.Interest = coordinator.InterestOf(s.srv.NATS())
	}
	if s.hs != nil {
		opts.Metrics = s.hs.Registry()
	}
	if f.notify != "" {
		wh, err := notify.New(notify.Config{URL: f.notify, Secret: f.notifySecret, Logger: logger})
		if err != nil {
			return opts, fmt.Errorf("--notify: %w", err)
		}
		s.onClose(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = wh.Close(ctx)
		})
		opts.Notify = wh
	}
	return opts, nil
}

// serveAlone runs the coordinator alone, not a cluster's, until ctx ends
// or it stops by itself.
func (s *serving) serveAlone(ctx context.Context, opts coordinator.Options) error {
	f := s.f
	svc, err := coordinator.Start(ctx, s.nc, logDir(f.data), opts)
	if errors.Is(err, eventlog.ErrLocked) {
		s.started = true
		return fmt.Errorf("%w\n  another coagent serve runs on %s; stop it, or give this one its own --data", err, f.data)
	}
	if err != nil {
		return err
	}
	// The rules are in force before anyone is told where to connect; their
	// line follows the start-up line.
	var rulesLine bytes.Buffer
	if f.reloadable() {
		if err := loadRules(ctx, svc, f.rulesFile, f.data, s.reg, &rulesLine); err != nil {
			svc.Shutdown(context.Background())
			return err
		}
	}
	hup := make(chan os.Signal, 1)
	if f.reloadable() {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	if s.hs != nil {
		s.hs.Registry().MustRegister(httpd.ActiveGauge(func() bool { return true }))
		s.hs.SetReady(svc.Ready)
	}
	abs, _ := filepath.Abs(f.data)
	s.started = true
	fmt.Fprintf(s.stdout, "coagent: serving on %s; data in %s\n", s.where, abs)
	io.Copy(s.stdout, &rulesLine)
	return s.runAlone(ctx, svc, hup)
}

// runAlone serves until ctx ends, taking the registry's change at each
// SIGHUP, then shuts the coordinator down; a coordinator that stops by
// itself (its event log failed) ends it with the coordinator's error.
func (s *serving) runAlone(ctx context.Context, svc *coordinator.Service, hup <-chan os.Signal) error {
	f := s.f
	for ctx.Err() == nil {
		select {
		case <-hup:
			reg := s.reload()
			if reg == nil {
				continue
			}
			if err := loadRules(ctx, svc, f.rulesFile, f.data, reg, s.stdout); err != nil {
				fmt.Fprintf(s.stderr, "coagent: rules not reloaded: %v\n", err)
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
	if err := s.nc.Drain(); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintln(s.stdout, "coagent: stopped")
	return nil
}

// reload reads the agent registry again at SIGHUP (reloadAgents) and
// gives the HTTP listener its change; nil when it could not be read, and
// nothing changed.
func (s *serving) reload() *natsauth.Registry {
	reg := reloadAgents(s.f, s.srv, &s.roles, s.stderr)
	if reg != nil && s.hs != nil {
		s.hs.reload(s.f, s.srv, reg, s.stderr)
	}
	return reg
}

// dataBefore is what a data directory held before a start: whether it
// existed, and the names in it.
type dataBefore struct {
	dir     string
	existed bool
	names   map[string]bool
}

// noteData notes what dir holds now.
func noteData(dir string) *dataBefore {
	d := &dataBefore{dir: dir, names: map[string]bool{}}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Unreadable: whatever is there is not this start's to remove.
		d.existed = true
		d.names = nil
		return d
	}
	d.existed = err == nil
	for _, e := range entries {
		d.names[e.Name()] = true
	}
	return d
}

// restore removes what was made in the directory since noteData: the
// directory itself if it was not there, else the names it did not hold
// (the jetstream store, the event log, a registry made for --auth). What
// was there is left as it is, made by an earlier start.
func (d *dataBefore) restore() {
	if d.names == nil {
		return
	}
	if !d.existed {
		os.RemoveAll(d.dir)
		return
	}
	entries, _ := os.ReadDir(d.dir)
	for _, e := range entries {
		if !d.names[e.Name()] {
			os.RemoveAll(filepath.Join(d.dir, e.Name()))
		}
	}
}

// reloadAgents reads the agent registry again at SIGHUP: the roles the
// rules see, and the embedded server's users. A file that cannot be read
// is reported and changes nothing (nil): the agents and rules in force
// stay.
func reloadAgents(f *serveFlags, srv *natsauth.Server, roles *atomic.Pointer[map[string][]string], stderr io.Writer) *natsauth.Registry {
	reg, err := natsauth.Load(natsauth.RegistryPath(f.data))
	if err != nil {
		fmt.Fprintf(stderr, "coagent: nothing reloaded: %v\n", err)
		return nil
	}
	r := reg.Roles()
	roles.Store(&r)
	if srv != nil && srv.Authenticated() {
		if err := srv.Reload(reg); err != nil {
			fmt.Fprintf(stderr, "coagent: agents not reloaded: %v\n", err)
		}
	}
	return reg
}

// serveMember runs the coordinator as a member of the cluster's (SPEC
// §10): a standby that follows the replicated log until it holds the
// leadership key, then the active coordinator, which puts the rules file
// in force each time it becomes so.
func (s *serving) serveMember(ctx context.Context, opts coordinator.Options) error {
	f := s.f
	var out lockedWriter
	out.w = s.stdout
	mopts := cluster.Options{Options: opts, Node: f.cluster.name, LeaseTTL: f.cluster.leaseTTL,
		TrimEvery: f.cluster.snapshotEvery,
		OnActive: func(ctx context.Context, svc *coordinator.Service) error {
			fmt.Fprintf(&out, "coagent: %s is the active coordinator\n", f.cluster.name)
			if !f.reloadable() {
				return nil
			}
			r := s.reg
			if loaded, err := natsauth.Load(natsauth.RegistryPath(f.data)); err == nil {
				r = loaded
			}
			return loadRules(ctx, svc, f.rulesFile, f.data, r, &out)
		}}
	m, err := cluster.Start(ctx, s.nc, logDir(f.data), mopts)
	if err != nil {
		return err
	}
	if s.hs != nil {
		s.hs.Registry().MustRegister(httpd.ActiveGauge(func() bool { return m.Role() == intents.RoleActive }))
		s.hs.SetReady(m.Ready)
	}
	abs, _ := filepath.Abs(f.data)
	fmt.Fprintf(&out, "coagent: serving on %s; data in %s; coordinator %s of the cluster, a standby until it holds the leadership (coagent status shows the members); %s\n",
		s.where, abs, f.cluster.name, f.durability())
	hup := make(chan os.Signal, 1)
	if f.reloadable() {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	for ctx.Err() == nil {
		select {
		case <-hup:
			reg := s.reload()
			if reg == nil {
				continue
			}
			if svc := m.Active(); svc != nil {
				if err := loadRules(ctx, svc, f.rulesFile, f.data, reg, &out); err != nil {
					fmt.Fprintf(s.stderr, "coagent: rules not reloaded: %v\n", err)
				}
			}
		case <-m.Done():
			return fmt.Errorf("the coordinator stopped: %w", m.Err())
		case <-ctx.Done():
		}
	}
	stop, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Stop(stop); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := s.nc.Drain(); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	fmt.Fprintln(&out, "coagent: stopped")
	return nil
}

// serveNode runs a cluster node without a coordinator: its embedded
// server alone, until ctx ends.
func serveNode(ctx context.Context, f *serveFlags, srv *natsauth.Server, stdout io.Writer) error {
	abs, _ := filepath.Abs(f.data)
	fmt.Fprintf(stdout, "coagent: serving NATS on %s (embedded NATS with JetStream%s), no coordinator on this node (--coordinator runs one); data in %s\n",
		srv.NATS().ClientURL(), f.cluster.describe(srv), abs)
	<-ctx.Done()
	srv.Shutdown()
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
