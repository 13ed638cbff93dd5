package httpd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coagent/coagent/coordinator"
	"github.com/coagent/coagent/internal/httpd"
)

// get fetches url with the header Authorization: Bearer token (none if
// token is "") and returns the status and body.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestReadyzNotReady: /readyz is 503 with the reason while the coordinator
// is not serving (starting, or its readiness says why), 200 once it is.
func TestReadyzNotReady(t *testing.T) {
	h, err := httpd.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	defer h.Close(t.Context())
	if code, body := get(t, h.URL()+"/readyz", ""); code != 503 || !strings.Contains(body, "starting") {
		t.Fatalf("/readyz before the coordinator: %d %q", code, body)
	}
	h.SetReady(func(context.Context) error {
		return fmt.Errorf("%w: standby: catching up", coordinator.ErrNotReady)
	})
	if code, body := get(t, h.URL()+"/readyz", ""); code != 503 || !strings.Contains(body, "not ready: standby: catching up") {
		t.Fatalf("/readyz of a standby catching up: %d %q", code, body)
	}
	h.SetReady(func(context.Context) error { return nil })
	if code, _ := get(t, h.URL()+"/readyz", ""); code != 200 {
		t.Fatalf("/readyz once ready: %d", code)
	}
}

// TestTokens: with tokens, only /healthz answers without one; the token of
// --http-token opens the rest, as a header, a query (which sets the
// cookie) or that cookie; a wrong one, or a header that is not Bearer,
// does not.
func TestTokens(t *testing.T) {
	tokens := httpd.NewTokens(nil, "s3cret")
	if tokens.None() || !httpd.NewTokens(nil, "").None() {
		t.Fatal("None")
	}
	h, err := httpd.Listen("127.0.0.1:0", tokens)
	if err != nil {
		t.Fatal(err)
	}
	h.Mount(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "root") }))
	h.Start()
	defer h.Close(t.Context())
	if code, body := get(t, h.URL()+"/healthz", ""); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz without a token: %d %q", code, body)
	}
	for _, tok := range []string{"", "wrong"} {
		if code, _ := get(t, h.URL()+"/", tok); code != 401 {
			t.Errorf("/ with token %q: %d, want 401", tok, code)
		}
	}
	if code, body := get(t, h.URL()+"/", "s3cret"); code != 200 || body != "root\n" {
		t.Fatalf("/ with the token: %d %q", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, h.URL()+"/", nil)
	req.Header.Set("Authorization", "Basic s3cret")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("a Basic header: %v %v", resp, err)
	}
	resp, err := http.Get(h.URL() + "/?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == httpd.TokenCookie {
			cookie = c
		}
	}
	if resp.StatusCode != 200 || cookie == nil || !cookie.HttpOnly {
		t.Fatalf("?token=: %d, cookie %v", resp.StatusCode, cookie)
	}
	req, _ = http.NewRequest(http.MethodGet, h.URL()+"/readyz", nil)
	req.AddCookie(&http.Cookie{Name: httpd.TokenCookie, Value: cookie.Value})
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 503 {
		t.Fatalf("with the cookie: %v %v, want /readyz's 503 while starting", resp, err)
	}
}

func TestLoopbackHost(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:7070": true, "localhost": true, "LOCALHOST:1": true, "[::1]:80": true, "::1": true,
		"0.0.0.0:7070": false, ":7070": false, "example.com:7070": false, "10.0.0.1": false} {
		if got := httpd.LoopbackHost(addr); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", addr, got, want)
		}
	}
}
