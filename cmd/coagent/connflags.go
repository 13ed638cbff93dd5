package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/natsauth"
	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
)

// natsFlags are the flags of a connection to an existing NATS server that
// every command speaking to a coordinator shares (--nats, --subject-prefix,
// --creds, the TLS files, --nkey), and the requests made through them.
//
// The subject prefix is --subject-prefix, not --prefix: etcdctl's
// --prefix, a subtree of keys, is what a user of `coagent state` types.
type natsFlags struct {
	url, creds, ca, cert, key, nkey string
	prefix                          string
	// shard is --shard: the shard whose coordinator the command speaks
	// to ("": the default shard, which sends a submit on to the shard that
	// owns its boards).
	shard string
	// node is --node, for the reads a standby answers too: the
	// coordinator of a cluster they ask ("": the active one).
	node string

	fs  *pflag.FlagSet // where --nats is, to tell whether it was given
	env bool           // the default of --nats is $NATS_URL
	// alt is another way to do what the command does without a server,
	// for the hint when there is none: `coagent log --data DIR`.
	alt string
	// perms turns a permissions violation of the connection into the
	// refused call's error at once, instead of a wait for its timeout.
	perms *agents.Permissions
}

// subjects are the coordinator's subjects under --subject-prefix, of
// the shard of --shard.
func (f *natsFlags) subjects() intents.Subjects { return f.base().Shard(f.shard) }

// base are the deployment's subjects: its default shard's, and the
// shard map's bucket.
func (f *natsFlags) base() intents.Subjects { return intents.Subjects{Prefix: f.prefix} }

// register adds the flags to fs. def is the default of --nats: a client
// command's is $NATS_URL or nats.DefaultURL (env.defaultNATS); serve's and
// bench's is "", their own embedded server.
func (f *natsFlags) register(fs *pflag.FlagSet, def string) {
	usage := "NATS server URL(s), comma separated"
	if def != "" {
		usage += " ($NATS_URL when set)"
	}
	fs.StringVar(&f.url, "nats", def, usage)
	f.fs, f.env = fs, def != "" && def != nats.DefaultURL
	fs.StringVar(&f.prefix, "subject-prefix", "", "the prefix of every subject and stream name (default coagent)")
	fs.StringVar(&f.shard, "shard", "", "speak to the coordinator of shard `NAME` (default: the default shard, which sends an intent on to the shard that owns its boards; docs/sharding.md)")
	fs.StringVar(&f.creds, "creds", "", "NATS credentials file")
	fs.StringVar(&f.ca, "tls-ca", "", "CA certificate for TLS")
	fs.StringVar(&f.cert, "tls-cert", "", "client certificate for TLS")
	fs.StringVar(&f.key, "tls-key", "", "client key for TLS")
	fs.StringVar(&f.nkey, "nkey", "", "an agent's nkey seed file (coagent agents add writes DATA/agents/NAME.nk), for a server with --auth")
}

// registerNode adds --node to fs, for a read any coordinator of a
// cluster answers (state.get, log.query, txn.list).
func (f *natsFlags) registerNode(fs *pflag.FlagSet) {
	fs.StringVar(&f.node, "node", "", "ask the coordinator of a cluster named `NAME` (serve's --name), a standby too, at the revision it has reached (default: the active one)")
}

// checkNode says what is wrong with --node, "" when nothing is.
func (f *natsFlags) checkNode() string {
	if f.node != "" && !intents.ValidSegment(f.node) {
		return fmt.Sprintf("--node %q: not a coordinator's name (letters, digits, '-' or '_')", f.node)
	}
	return ""
}

// readSubject is the subject of a read-only API endpoint: the active
// coordinator's, or with --node that coordinator's own.
func (f *natsFlags) readSubject(endpoint string) string {
	if f.node != "" {
		return f.subjects().NodeAPI(f.node, endpoint)
	}
	return f.subjects().API(endpoint)
}

// answeredBy says which coordinator answered a read, from its stamp
// (intents.HeaderNode, HeaderRole, HeaderRev): "node b (standby) at event
// 12"; "" for an answer with none (a coordinator alone).
func answeredBy(h nats.Header) string {
	node := h.Get(intents.HeaderNode)
	if node == "" {
		return ""
	}
	return fmt.Sprintf("node %s (%s) at event %s", node, h.Get(intents.HeaderRole), h.Get(intents.HeaderRev))
}

// noResponders is the error of a request to subject that nobody answers.
func (f *natsFlags) noResponders(subject string) error {
	if f.node != "" {
		return fmt.Errorf("no coordinator named %s answers on %s\n  coagent status lists the coordinators of the cluster; one that is taking over answers again in a moment", f.node, subject)
	}
	return fmt.Errorf("no coordinator answers on %s\n  start one (coagent serve), or, on a cluster, a failover may be under way: coagent status shows the coordinators", subject)
}

// connect connects to the NATS server at once, or fails with a
// *connectError that says what to do.
func (f *natsFlags) connect(name string) (*nats.Conn, error) {
	opts, err := f.options(name)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(f.url, opts...)
	if err != nil {
		return nil, f.connectError(err)
	}
	return nc, nil
}

// options are the connection options the flags give.
func (f *natsFlags) options(name string) ([]nats.Option, error) {
	var opts []nats.Option
	if f.nkey != "" {
		// The agent is named by its seed file.
		ao, err := agents.AuthOptions(f.agent(), f.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", f.nkey, err)
		}
		opts = ao
	}
	opts = append(opts, nats.Name(name)) // after the agent's own name
	f.perms = agents.NewPermissions()
	opts = append(opts, f.perms.Option())
	if f.creds != "" {
		opts = append(opts, nats.UserCredentials(f.creds))
	}
	if f.ca != "" {
		opts = append(opts, nats.RootCAs(f.ca))
	}
	if f.cert != "" || f.key != "" {
		opts = append(opts, nats.ClientCert(f.cert, f.key))
	}
	return opts, nil
}

// connectError is a connection the server did not take: there is none at
// the URL, or it refused who we are. It is the whole story, whatever
// command failed, so main prints it alone: its message, then on a line of
// its own what to do about it.
type connectError struct {
	msg, hint string
	err       error
}

func (e *connectError) Error() string { return e.msg + "\n" + e.hint }
func (e *connectError) Unwrap() error { return e.err }

// connectError explains err, the failure of a connection to f.url.
func (f *natsFlags) connectError(err error) error {
	where := f.url
	if f.env && !f.fs.Changed("nats") {
		where += " ($NATS_URL)"
	}
	switch {
	case errors.Is(err, nats.ErrNoServers):
		hint := "start one with 'coagent serve', or point at one with --nats URL or $NATS_URL"
		if f.alt != "" {
			hint += "; " + f.alt
		}
		return &connectError{msg: "no NATS server at " + where, hint: hint, err: err}
	case errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization violation"):
		if f.nkey == "" {
			return &connectError{msg: "the NATS server at " + where + " refused the connection: Authorization Violation",
				hint: "the server runs with --auth: connect with --nkey DATA/agents/NAME.nk (coagent agents add NAME)", err: err}
		}
		return &connectError{msg: fmt.Sprintf("the NATS server at %s refused --nkey %s (agent %s): Authorization Violation", where, f.nkey, f.agent()),
			hint: fmt.Sprintf("the server admits only the agents of its DATA/agents.json: register %s there with 'coagent agents add %s', then send the server SIGHUP", f.agent(), f.agent()),
			err:  err}
	}
	return fmt.Errorf("connect to %s: %w", where, err)
}

// connectWaiting connects to the NATS server, waiting for it as long as
// ctx lasts when there is none yet (saying so once on log), and
// reconnecting for ever after: what a long-running command wants, where a
// client command fails at once.
func (f *natsFlags) connectWaiting(ctx context.Context, name string, log *slog.Logger) (*nats.Conn, error) {
	opts, err := f.options(name)
	if err != nil {
		return nil, err
	}
	connected, closed := make(chan struct{}), make(chan struct{})
	opts = append(opts, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond),
		nats.ConnectHandler(func(*nats.Conn) { close(connected) }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("lost the NATS server; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("reconnected", "url", nc.ConnectedUrlRedacted()) }))
	nc, err := nats.Connect(f.url, opts...)
	if err != nil {
		return nil, f.connectError(err)
	}
	if nc.IsConnected() {
		return nc, nil
	}
	hint := "start one with 'coagent serve', or point at one with --nats URL or $NATS_URL"
	log.Info("waiting for a NATS server", "url", f.url, "hint", hint)
	select {
	case <-connected:
		log.Info("connected", "url", nc.ConnectedUrlRedacted())
		return nc, nil
	case <-closed:
		err := nc.LastError()
		if err == nil {
			err = nats.ErrConnectionClosed
		}
		return nil, f.connectError(err)
	case <-ctx.Done():
		nc.Close()
		return nil, ctx.Err()
	}
}

// agent is the agent an --nkey seed file names (NAME.nk), or "".
func (f *natsFlags) agent() string {
	if f.nkey == "" {
		return ""
	}
	return strings.TrimSuffix(filepath.Base(f.nkey), ".nk")
}

// request sends one API request and returns the reply's body, or the
// micro error it carries as an error naming its code.
func (f *natsFlags) request(ctx context.Context, name, subject string, body []byte) ([]byte, error) {
	m := nats.NewMsg(subject)
	m.Data = body
	return f.requestMsg(ctx, name, m)
}

// requestMsg is request for a message with headers.
func (f *natsFlags) requestMsg(ctx context.Context, name string, m *nats.Msg) ([]byte, error) {
	resp, err := f.requestReply(ctx, name, m)
	if err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// requestReply is requestMsg, returning the whole reply.
func (f *natsFlags) requestReply(ctx context.Context, name string, m *nats.Msg) (*nats.Msg, error) {
	nc, err := f.connect(name)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	reqCtx, cancelPerms := f.guard(ctx)
	defer cancelPerms()
	reqCtx, cancel := context.WithTimeout(reqCtx, 10*time.Second)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(reqCtx, m)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, f.noResponders(m.Subject)
	}
	if err != nil {
		return nil, f.refused(reqCtx, err)
	}
	if err := apiError(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// guard is ctx, ended at once if the server refuses the connection a
// permission while it lasts; refused then says which.
func (f *natsFlags) guard(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.perms == nil {
		return context.WithCancel(ctx)
	}
	return f.perms.Context(ctx)
}

// refused is err, the failure of a call made under guard's ctx, or the
// permission the server refused with the identity that has it, as a
// *connectError: the command could not do anything else with it.
func (f *natsFlags) refused(ctx context.Context, err error) error {
	if f.perms == nil || err == nil {
		return err
	}
	err = f.perms.Err(ctx, err)
	var pe *agents.PermissionError
	if !errors.As(err, &pe) {
		return err
	}
	who := "this connection"
	if f.nkey != "" {
		who = "agent " + f.agent()
	}
	msg := fmt.Sprintf("the server refused %s to %s %s", who, pe.Op, pe.Subject)
	hint := "the server's permissions do not allow it (docs/auth.md lists them)"
	if role := natsauth.RoleFor(f.prefix, f.agent(), nil, pe.Subject, pe.Op == "publish"); role != "" {
		hint = fmt.Sprintf("it needs an agent with the role %s: --nkey DATA/agents/NAME.nk of one (coagent agents add NAME --role %s; serve --auth made DATA/agents/admin.nk)", role, role)
	}
	return &connectError{msg: msg, hint: hint, err: err}
}
