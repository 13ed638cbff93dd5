package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/agents/mcp"
	"github.com/coagent/coagent/intents"
	"github.com/spf13/cobra"
)

// mcpFlags are the flags of `coagent mcp`.
type mcpFlags struct {
	agent, http string
	// token is the bearer token --http requires; noAuth serves a
	// non-loopback address without one.
	token    string
	noAuth   bool
	arbiter  bool
	approver bool
	lease    time.Duration
	silence  time.Duration
	conn     natsFlags
}

// newMCPCmd is `coagent mcp`: an MCP server through which a language
// model works on the shared state as one agent.
func newMCPCmd(e *env) *cobra.Command {
	var f mcpFlags
	c := &cobra.Command{
		Use:   "mcp --agent NAME [--http ADDR]",
		Short: "serve the Model Context Protocol: an MCP host's model works on the shared state as agent NAME",
		Long: "Serve MCP (the Model Context Protocol) for one agent: every tool call becomes intents of agent NAME.\n" +
			"Tools: read, write, claim, release, begin, commit, abort, history (and next_case, resolve with --arbiter; approvals, approve, deny with --approver);\n" +
			"resources coagent://state/<path> with change notifications; the prompt shared_board.\n" +
			"Over stdio by default (what an MCP host spawns: stdout is the protocol, notes go to stderr), over\n" +
			"streamable HTTP with --http ADDR. A transaction begun in a session is renewed while the session lives\n" +
			"and its client makes requests; when the session ends, or its client is silent for --silence, its lease runs out.\n" +
			"docs/mcp.md has the host's mcpServers entry.",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if f.agent == "" {
				f.agent = f.conn.agent()
			}
			switch {
			case f.agent == "":
				return usagef(c, "missing --agent NAME: the agent the model works as")
			case !intents.ValidSegment(f.agent):
				return usagef(c, "--agent %q: want 1–%d letters, digits, '_' or '-'", f.agent, intents.MaxSegmentLen)
			case f.conn.nkey != "" && f.conn.agent() != f.agent:
				return usagef(c, "--agent %s with --nkey %s: the seed file is agent %s's", f.agent, f.conn.nkey, f.conn.agent())
			case f.lease < 0:
				return usagef(c, "--lease %s: want a positive duration", f.lease)
			case f.http == "" && (c.Flags().Changed("http-token") || f.noAuth):
				return usagef(c, "--http-token and --http-no-auth are of --http ADDR; without it the server speaks stdio")
			case f.silence <= 0 || f.silence >= mcpIdleTimeout:
				return usagef(c, "--silence %s: want a positive duration below the HTTP idle timeout (%s)", f.silence, mcpIdleTimeout)
			}
			if f.token == "" {
				f.token = os.Getenv(mcpTokenEnv)
			}
			return runMCP(c.Context(), &f, e.stdin, e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.agent, "agent", "", "the agent the model works as (default: the agent of --nkey)")
	fs.StringVar(&f.http, "http", "", "serve streamable HTTP on this address (host:port) instead of stdio")
	fs.StringVar(&f.token, "http-token", "", "with --http: require this bearer token (Authorization: Bearer TOKEN) of every request (default $"+mcpTokenEnv+")")
	fs.BoolVar(&f.noAuth, "http-no-auth", false, "with --http on an address that is not loopback: serve it without a token, open to anyone who reaches it")
	fs.BoolVar(&f.arbiter, "arbiter", false, "add the arbiter's tools next_case and resolve")
	fs.BoolVar(&f.approver, "approver", false, "add the approver's tools approvals, approve and deny")
	fs.DurationVar(&f.lease, "lease", 30*time.Second, "the lease of a transaction begun without lease_ms: how long it outlives its session")
	fs.DurationVar(&f.silence, "silence", time.Minute, "how long a session's client may make no request before its transactions are no longer renewed (their leases then run out)")
	f.conn.register(fs, e.defaultNATS())
	return c
}

func runMCP(ctx context.Context, f *mcpFlags, stdin io.Reader, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("agent", f.agent)
	nc, err := f.conn.connectWaiting(ctx, "coagent mcp "+f.agent, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer nc.Close()
	cl, err := agents.Connect(ctx, nc, f.agent, agents.WithPrefix(f.conn.prefix), agents.WithLogger(log))
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	defer cl.Close()
	srv, err := mcp.New(cl, nc, mcp.Options{Prefix: f.conn.prefix, Arbiter: f.arbiter, Approver: f.approver, Lease: f.lease,
		IdleTimeout: mcpIdleTimeout, Silence: f.silence, Token: f.token, Version: mcpVersion(), Logger: log})
	if err != nil {
		return err
	}
	defer srv.Close()
	if f.http == "" {
		return srv.Run(ctx, &mcp.StdioTransport{Reader: stdin, Writer: stdout, Logger: log})
	}
	ln, err := net.Listen("tcp", f.http)
	if err != nil {
		return fmt.Errorf("--http %s: %w", f.http, err)
	}
	// Whoever reaches the listener acts as the agent: off the loopback
	// interface that is anyone on the network, unless a token is asked.
	open := !isLoopback(ln.Addr())
	switch {
	case open && f.token == "" && !f.noAuth:
		ln.Close()
		return fmt.Errorf("--http %s: not a loopback address, and no token: anyone who reaches it would act as agent %s; "+
			"require a bearer token with --http-token (or $%s), or serve it open with --http-no-auth", f.http, f.agent, mcpTokenEnv)
	case open && f.token == "":
		fmt.Fprintf(stderr, "coagent: warning: --http-no-auth: anyone who reaches http://%s acts as agent %s\n", ln.Addr(), f.agent)
	}
	hs := &http.Server{Handler: srv.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
	auth := "no token (loopback only)"
	if f.token != "" {
		auth = "bearer token required"
	} else if open {
		auth = "NO AUTHENTICATION"
	}
	fmt.Fprintf(stderr, "coagent: mcp for agent %s on http://%s (%s)\n", f.agent, ln.Addr(), auth)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("--http %s: %w", f.http, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("--http %s: shut down: %w", f.http, err)
	}
	return nil
}

// mcpTokenEnv is the environment variable that gives --http-token, so
// that the token need not be on the command line, where ps shows it.
const mcpTokenEnv = "COAGENT_MCP_TOKEN"

// isLoopback says a listens on a loopback interface only (not on every
// interface, as 0.0.0.0 and :PORT do).
func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// mcpIdleTimeout closes an HTTP session that made no request for this
// long.
const mcpIdleTimeout = 10 * time.Minute

// mcpVersion is the version the server tells hosts: that of `coagent
// version`'s first line.
func mcpVersion() string {
	first, _, _ := strings.Cut(version(), "\n")
	return strings.TrimPrefix(first, "coagent version ")
}
