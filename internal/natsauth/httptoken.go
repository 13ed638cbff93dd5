package natsauth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// HTTPTokenPrefix begins every HTTP token, so that one found in a log or
// a shell history says what it is.
const HTTPTokenPrefix = "coagent_"

// NewHTTPToken gives the registered agent name a new random token for the
// HTTP listener of serve --auth (/metrics, /readyz, the console), replacing
// any it had, and returns it. The registry keeps only its hash, so the
// token cannot be read back: whoever lost it makes a new one. It changes
// only r; Save persists it.
func (r *Registry) NewHTTPToken(name string) (string, error) {
	a, ok := r.Agents[name]
	if !ok {
		return "", fmt.Errorf("natsauth: no agent %q registered", name)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("natsauth: make an HTTP token for %s: %w", name, err)
	}
	token := HTTPTokenPrefix + hex.EncodeToString(b[:])
	a.HTTPToken = HashHTTPToken(token)
	r.Agents[name] = a
	return token, nil
}

// HTTPTokens returns the hash of every agent's HTTP token (HashHTTPToken)
// and the agent it belongs to.
func (r *Registry) HTTPTokens() map[string]string {
	out := map[string]string{}
	for name, a := range r.Agents {
		if a.HTTPToken != "" {
			out[a.HTTPToken] = name
		}
	}
	return out
}

// HashHTTPToken is how a token is kept and compared: the hex SHA-256 of
// it. A token is 256 random bits, so no salt or slow hash is needed.
func HashHTTPToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}
