package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coagent/coagent/agents"
	"github.com/coagent/coagent/intents"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
)

// stateURI is the URI prefix of the state tree's resources:
// coagent://state/<path>.
const stateURI = "coagent://state/"

// api calls a coordinator API endpoint the Client has no method for, with
// a JSON body, and decodes the reply into out. An error reply is an
// *agents.APIError.
func (s *Server) api(ctx context.Context, endpoint string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	reply, err := s.nc.RequestWithContext(ctx, s.subj.API(endpoint), data)
	if err != nil {
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		return &agents.APIError{Code: code, Description: reply.Header.Get("Nats-Service-Error")}
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("%s reply %q: %w", endpoint, intents.Clip(string(reply.Data), 200), err)
	}
	return nil
}

// apiResult is the Result of an API error reply a model can act on (a bad
// argument), or nil.
func apiResult(err error) *Result {
	var api *agents.APIError
	if errors.As(err, &api) && api.Code == string(intents.ReasonInvalid) {
		return invalid(api.Description)
	}
	return nil
}

// StateResource is the contents of a coagent://state/<path> resource.
type StateResource struct {
	Path    string `json:"path"`
	Exists  bool   `json:"exists"`
	Value   any    `json:"value,omitempty"`
	Version uint64 `json:"version"`
	ModRev  uint64 `json:"mod_rev"`
	Rev     uint64 `json:"rev"`
	// Redacted says the board rules' readers keep the path from this
	// agent: then nothing of it is shown, not whether it exists (the
	// contents are only path, redacted and rev).
	Redacted bool `json:"redacted,omitempty"`
	// RedactedPaths name the paths under it kept from this agent, left
	// out of Value.
	RedactedPaths []string `json:"redacted_paths,omitempty"`
}

// redactedResource is the contents of a resource kept whole from the
// agent: as state.get, it says neither whether the path exists nor its
// version.
type redactedResource struct {
	Path     string `json:"path"`
	Redacted bool   `json:"redacted"`
	Rev      uint64 `json:"rev"`
}

// rpcError is an error with its JSON-RPC code: a plain error reaches the
// client with code 0, which names no failure.
func rpcError(code int64, format string, args ...any) error {
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// pathOf is the state path of a coagent://state/<path> URI; a URI that
// names none is an invalid-params error.
func pathOf(uri string) (string, error) {
	p, ok := strings.CutPrefix(uri, stateURI)
	if !ok {
		return "", rpcError(jsonrpc.CodeInvalidParams, "resource %q: want %s<path>", uri, stateURI)
	}
	if err := intents.CheckPath(p); err != nil {
		return "", rpcError(jsonrpc.CodeInvalidParams, "resource %q: path %q: %v", uri, p, err)
	}
	return p, nil
}

// kept says whether the board rules' readers keep path whole from this
// agent, by redacted, the paths a read or a change names as kept: path
// itself or one above it.
func kept(path string, redacted []string) bool {
	return slices.ContainsFunc(redacted, func(r string) bool { return r == path || strings.HasPrefix(path, r+".") })
}

func (s *Server) addResources() {
	s.mcp.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "state",
		Title:       "Shared state",
		URITemplate: stateURI + "{path}",
		Description: "A path of the shared state and everything under it, with its version: coagent://state/tasks, coagent://state/report.title. " +
			"Subscribe to be told when anything under it changes.",
		MIMEType: "application/json",
	}, s.readResource)
}

func (s *Server) readResource(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	path, err := pathOf(req.Params.URI)
	if err != nil {
		return nil, err
	}
	st, err := s.c.Read(ctx, path)
	if err != nil {
		return nil, rpcError(jsonrpc.CodeInternalError, "read %s: %v", path, err)
	}
	v := st.Values[path]
	var out any
	if kept(path, v.Redacted) {
		out = redactedResource{Path: path, Redacted: true, Rev: st.Rev}
	} else {
		sr := StateResource{Path: path, Exists: v.Exists, Version: v.Version, ModRev: v.ModRev, Rev: st.Rev, RedactedPaths: v.Redacted}
		if v.Exists && len(v.Value) > 0 {
			sr.Value = json.RawMessage(v.Value)
		}
		out = sr
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, rpcError(jsonrpc.CodeInternalError, "read %s: %v", path, err)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(data)}}}, nil
}

// watch follows one subscribed subtree for the sessions subscribed to it.
type watch struct {
	w        *agents.Watcher
	sessions map[*sdk.ServerSession]bool
}

// subscribe starts following the subtree of the URI (if no session
// follows it yet) from the current revision: each later commit that
// touches it is a notifications/resources/updated for the URI, whose
// _meta carries the revision, the agent and the paths written. A URI
// that names no path is an invalid-params error, a failure to follow it
// an internal error.
func (s *Server) subscribe(ctx context.Context, req *sdk.SubscribeRequest) error {
	uri := req.Params.URI
	path, err := pathOf(uri)
	if err != nil {
		return err
	}
	s.sessionOf(req.Session) // followed, to end its subscriptions with it
	s.mu.Lock()
	if w := s.mu.watches[uri]; w != nil {
		w.sessions[req.Session] = true
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	st, err := s.c.Read(ctx, path)
	if err != nil {
		return rpcError(jsonrpc.CodeInternalError, "subscribe %s: %v", uri, err)
	}
	w, err := s.c.Watch(s.done, path, st.Rev)
	if err != nil {
		return rpcError(jsonrpc.CodeInternalError, "subscribe %s: %v", uri, err)
	}
	s.mu.Lock()
	if other := s.mu.watches[uri]; other != nil {
		// Another session subscribed meanwhile: share its watch.
		other.sessions[req.Session] = true
		s.mu.Unlock()
		w.Stop()
		return nil
	}
	s.mu.watches[uri] = &watch{w: w, sessions: map[*sdk.ServerSession]bool{req.Session: true}}
	s.mu.Unlock()
	s.workers.Go(func() { s.notify(uri, w) })
	return nil
}

// notify tells the subscribers of uri of each change w delivers, until the
// watch stops.
func (s *Server) notify(uri string, w *agents.Watcher) {
	for ch := range w.Changes() {
		paths := make([]string, 0, len(ch.Writes))
		for _, a := range ch.Writes {
			if !kept(a.Path, ch.Redacted) {
				paths = append(paths, a.Path)
			}
		}
		if len(paths) == 0 {
			// Every write is of a path kept from this agent: as state.get
			// says nothing of it, not its writer, revision or version,
			// neither does a notification.
			continue
		}
		meta := sdk.Meta{"rev": ch.Rev, "agent": ch.Agent, "paths": paths}
		if err := s.mcp.ResourceUpdated(s.done, &sdk.ResourceUpdatedNotificationParams{URI: uri, Meta: meta}); err != nil {
			s.log.Warn("notifying a resource change failed", "uri", uri, "err", err)
		}
	}
	if err := w.Err(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Warn("the watch of a subscribed resource ended", "uri", uri, "err", err)
	}
}

func (s *Server) unsubscribe(_ context.Context, req *sdk.UnsubscribeRequest) error {
	s.leave(req.Params.URI, req.Session)
	return nil
}

// leave takes session ss off the subscribers of uri, and stops its watch
// when nobody is left.
func (s *Server) leave(uri string, ss *sdk.ServerSession) {
	s.mu.Lock()
	w := s.mu.watches[uri]
	if w == nil {
		s.mu.Unlock()
		return
	}
	delete(w.sessions, ss)
	if len(w.sessions) > 0 {
		s.mu.Unlock()
		return
	}
	delete(s.mu.watches, uri)
	s.mu.Unlock()
	w.w.Stop()
}

// dropSubscriptions ends the subscriptions of a session that ended.
func (s *Server) dropSubscriptions(ss *sdk.ServerSession) {
	s.mu.Lock()
	var uris []string
	for uri, w := range s.mu.watches {
		if w.sessions[ss] {
			uris = append(uris, uri)
		}
	}
	s.mu.Unlock()
	for _, uri := range uris {
		s.leave(uri, ss)
	}
}
