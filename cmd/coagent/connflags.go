package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
)

// natsFlags are the flags of a connection to an existing NATS server that
// every command speaking to a coordinator shares (--nats, --prefix,
// --creds, the TLS files, --nkey), and the requests made through them.
type natsFlags struct {
	url, creds, ca, cert, key, nkey string
	prefix                          string
}

// subjects are the coordinator's subjects under --prefix.
func (f *natsFlags) subjects() intents.Subjects { return intents.Subjects{Prefix: f.prefix} }

// register adds the flags to fs. def is the default of --nats: a client
// command's is $NATS_URL or nats.DefaultURL (env.defaultNATS); serve's and
// bench's is "", their own embedded server.
func (f *natsFlags) register(fs *pflag.FlagSet, def string) {
	usage := "NATS server URL(s), comma separated"
	if def != "" {
		usage += " ($NATS_URL when set)"
	}
	fs.StringVar(&f.url, "nats", def, usage)
	fs.StringVar(&f.prefix, "prefix", "", "subject prefix (default coagent)")
	fs.StringVar(&f.creds, "creds", "", "NATS credentials file")
	fs.StringVar(&f.ca, "tls-ca", "", "CA certificate for TLS")
	fs.StringVar(&f.cert, "tls-cert", "", "client certificate for TLS")
	fs.StringVar(&f.key, "tls-key", "", "client key for TLS")
	fs.StringVar(&f.nkey, "nkey", "", "an agent's nkey seed file (coagent agents add writes DATA/agents/NAME.nk), for a server with --auth")
}

func (f *natsFlags) connect(name string) (*nats.Conn, error) {
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
	nc, err := f.connect(name)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := nc.RequestMsgWithContext(reqCtx, m)
	if err != nil {
		return nil, err
	}
	if err := apiError(resp); err != nil {
		return nil, err
	}
	return resp.Data, nil
}
