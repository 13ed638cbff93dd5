package httpd

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/coagent/coagent/internal/natsauth"
)

// Tokens is the token check of serve --auth's listener. A token is the
// registry's (coagent agents add --role observer), kept as its hash and
// read again at each Reload, or the one --http-token or
// COAGENT_HTTP_TOKEN gives. A browser may give it once as ?token=; it is
// then kept in a cookie, so that the console's own requests carry it.
// It is safe for concurrent use.
type Tokens struct {
	// tokens maps each token's hash (natsauth.HashHTTPToken) to whose it is.
	tokens atomic.Pointer[map[string]string]
	// extra is the hash of the token of --http-token ("" for none).
	extra string

	// mu guards the requests in hand, each with the hash of the token
	// that admitted it, so that revoking a token ends what it opened (an
	// event stream outlives any number of reloads otherwise).
	mu struct {
		sync.Mutex
		held map[*heldRequest]struct{}
	}
}

// heldRequest is a request in hand and how to end it.
type heldRequest struct {
	hash   string
	cancel context.CancelCauseFunc
}

// ErrRevoked ends the requests of a token the registry no longer has: it
// is their context's cause.
var ErrRevoked = errors.New("httpd: the token was revoked")

// TokenCookie is the cookie that keeps a browser's token.
const TokenCookie = "coagent_token"

// NewTokens admits the tokens of reg (nil: none) and extra ("" for none).
func NewTokens(reg *natsauth.Registry, extra string) *Tokens {
	t := &Tokens{}
	t.mu.held = map[*heldRequest]struct{}{}
	if extra != "" {
		t.extra = natsauth.HashHTTPToken(extra)
	}
	t.Reload(reg)
	return t
}

// Reload takes the registry's tokens, at SIGHUP; the requests in hand of
// a token no longer admitted end, with ErrRevoked.
func (t *Tokens) Reload(reg *natsauth.Registry) {
	m := map[string]string{}
	if reg != nil {
		m = reg.HTTPTokens()
	}
	t.tokens.Store(&m)
	t.mu.Lock()
	defer t.mu.Unlock()
	for req := range t.mu.held {
		if !t.validHash(req.hash) {
			req.cancel(ErrRevoked)
			delete(t.mu.held, req)
		}
	}
}

// agent returns whose registry token has the hash h: "" for the token of
// --http-token, which is nobody's.
func (t *Tokens) agent(h string) string { return (*t.tokens.Load())[h] }

type agentKey struct{}

// AgentOf returns the agent whose registry token admitted the request of
// ctx (coagent agents add prints it), or "" when none did: no --auth, or
// the token of --http-token, which is nobody's. The console acts as that
// agent.
func AgentOf(ctx context.Context) string {
	a, _ := ctx.Value(agentKey{}).(string)
	return a
}

// None reports whether no token would be admitted.
func (t *Tokens) None() bool { return t.extra == "" && len(*t.tokens.Load()) == 0 }

// hold returns the context of a request admitted by the token of hash,
// which ends when a reload revokes the token, and what to call when the
// request ends.
func (t *Tokens) hold(ctx context.Context, hash string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	req := &heldRequest{hash: hash, cancel: cancel}
	t.mu.Lock()
	t.mu.held[req] = struct{}{}
	t.mu.Unlock()
	// A reload between admit and here swept without this request: check
	// again, against the tokens it stored before sweeping.
	if !t.validHash(hash) {
		cancel(ErrRevoked)
	}
	return ctx, func() {
		t.mu.Lock()
		delete(t.mu.held, req)
		t.mu.Unlock()
		cancel(nil)
	}
}

// valid reports whether token is one of the tokens admitted, and its
// hash.
func (t *Tokens) valid(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	h := natsauth.HashHTTPToken(token)
	return h, t.validHash(h)
}

// validHash reports whether the token of hash h is admitted.
func (t *Tokens) validHash(h string) bool {
	if h == t.extra && h != "" {
		return true
	}
	_, ok := (*t.tokens.Load())[h]
	return ok
}

// admit reports whether r carries a valid token: in its Authorization
// header, its token query parameter (which sets the cookie), or the
// cookie; and the token's hash.
func (t *Tokens) admit(w http.ResponseWriter, r *http.Request) (string, bool) {
	if v := r.Header.Get("Authorization"); v != "" {
		const bearer = "Bearer "
		if len(v) <= len(bearer) || v[:len(bearer)] != bearer {
			return "", false
		}
		return t.valid(v[len(bearer):])
	}
	if q := r.URL.Query().Get("token"); q != "" {
		h, ok := t.valid(q)
		if !ok {
			return "", false
		}
		http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: q, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		return h, true
	}
	c, err := r.Cookie(TokenCookie)
	if err != nil {
		return "", false
	}
	return t.valid(c.Value)
}
