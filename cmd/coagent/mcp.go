package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	arbiter     bool
	lease       time.Duration
	silence     time.Duration
	conn        natsFlags
}

// newMCPCmd is `coagent mcp`: an MCP server through which a language
// model works on the shared state as one agent.
func newMCPCmd(e *env) *cobra.Command {
	var f mcpFlags
	c := &cobra.Command{
		Use:   "mcp --agent NAME [--http ADDR]",
		Short: "serve the Model Context Protocol: an MCP host's model works on the shared state as agent NAME",
		Long: "Serve MCP (the Model Context Protocol) for one agent: every tool call becomes intents of agent NAME.\n" +
			"Tools: read, write, claim, release, begin, commit, abort, history (and next_case, resolve with --arbiter);\n" +
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
			case f.silence <= 0 || f.silence >= mcpIdleTimeout:
				return usagef(c, "--silence %s: want a positive duration below the HTTP idle timeout (%s)", f.silence, mcpIdleTimeout)
			}
			return runMCP(c.Context(), &f, e.stdin, e.stdout, e.stderr)
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.agent, "agent", "", "the agent the model works as (default: the agent of --nkey)")
	fs.StringVar(&f.http, "http", "", "serve streamable HTTP on this address (host:port) instead of stdio")
	fs.BoolVar(&f.arbiter, "arbiter", false, "add the arbiter's tools next_case and resolve")
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
	srv, err := mcp.New(cl, nc, mcp.Options{Prefix: f.conn.prefix, Arbiter: f.arbiter, Lease: f.lease,
		IdleTimeout: mcpIdleTimeout, Silence: f.silence, Version: mcpVersion(), Logger: log})
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
	hs := &http.Server{Handler: srv.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "coagent: mcp for agent %s on http://%s\n", f.agent, ln.Addr())
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

// mcpIdleTimeout closes an HTTP session that made no request for this
// long.
const mcpIdleTimeout = 10 * time.Minute

// mcpVersion is the version the server tells hosts: that of `coagent
// version`'s first line.
func mcpVersion() string {
	first, _, _ := strings.Cut(version(), "\n")
	return strings.TrimPrefix(first, "coagent version ")
}
