package console_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/coagent/coagent/intents"
	"github.com/coagent/coagent/internal/console"
	"github.com/coagent/coagent/internal/natstest"
)

// post sends an action's body and returns its status and answer.
func (w *world) post(path string, body any) (int, map[string]any) {
	w.t.Helper()
	data, _ := json.Marshal(body)
	res, err := http.Post(w.srv.URL+path, "application/json", bytes.NewReader(data))
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		w.t.Fatalf("POST %s: %v", path, err)
	}
	return res.StatusCode, out
}

// Under --auth the console acts only as the identity of the request's
// token: an observer's token may not act, an approver acts as itself and
// never as another, and only an arbiter resolves.
func TestActionsActAsTheToken(t *testing.T) {
	as := map[string]console.Identity{
		"watcher": {Agent: "watcher", Roles: []string{"observer"}},
		"lina":    {Agent: "lina", Roles: []string{"lead"}},
		"nobody":  {},
	}
	who := "watcher"
	w := newWorld(t, func(c *console.Config) {
		c.Identity = func(*http.Request) console.Identity { return as[who] }
	})
	if _, err := w.svc.SetRules(t.Context(), []byte(`{"rules":[{"pattern":"deploy.**","approve":{"by":["lina"],"timeout":"10m"}}]}`), "test"); err != nil {
		t.Fatal(err)
	}
	// The approver's notice says the case is open: the intent is
	// published, not decided, when publish returns.
	notices, err := natstest.Connect(t, w.ns).SubscribeSync(intents.Subjects{}.Notices("lina"))
	if err != nil {
		t.Fatal(err)
	}
	gated := w.publish(w.w1, intents.Apply("release").Set("deploy.web", 3))
	var me map[string]any
	if w.get("/api/me", &me); me["agent"] != "watcher" || me["read_only"] != true {
		t.Fatalf("/api/me of an observer: %v", me)
	}
	vote := map[string]any{"case": gated, "verdict": "approve"}
	for _, c := range []struct {
		who, agent string
		status     int
		says       string
	}{
		{"watcher", "", http.StatusForbidden, "agent watcher is an observer"},
		{"nobody", "", http.StatusForbidden, "this token is nobody's"},
		{"lina", "bob", http.StatusForbidden, "agent lina may not act as agent bob"},
	} {
		who, vote["agent"] = c.who, c.agent
		if status, out := w.post("/api/vote", vote); status != c.status || !strings.Contains(out["error"].(string), c.says) {
			t.Errorf("a vote as %s naming %q: %d %v", c.who, c.agent, status, out)
		}
	}
	who = "lina"
	if status, out := w.post("/api/resolve", map[string]any{"case": gated, "winners": []string{gated}, "rationale": "x"}); status != http.StatusForbidden ||
		!strings.Contains(out["error"].(string), "needs the role arbiter") {
		t.Errorf("a resolution by a lead: %d %v", status, out)
	}
	for body, says := range map[string]string{
		`{"task":"tasks.t1","effects":{"mail":"maybe"},"why":"x"}`:      `effects.mail = "maybe": want confirmed, failed or compensated`,
		`{"task":"tasks..t1","effects":{"mail":"confirmed"},"why":"x"}`: `task = "tasks..t1"`,
		`{"task":"tasks.t1","effects":{"mail":"confirmed"}}`:            "why: missing",
		`{"task":"tasks.t1","why":"x","extra":1}`:                       `unknown field "extra"`,
	} {
		var raw json.RawMessage = []byte(body)
		if status, out := w.post("/api/reconcile", raw); status != http.StatusBadRequest || !strings.Contains(out["error"].(string), says) {
			t.Errorf("reconcile %s: %d %v, want 400 saying %s", body, status, out, says)
		}
	}
	for ev := natstest.Next[intents.Event](t, notices); ev.Notice == nil || ev.Notice.Kind != intents.NoticeApproval || ev.Intent != gated; ev = natstest.Next[intents.Event](t, notices) {
	}
	vote["agent"] = ""
	status, out := w.post("/api/vote", vote)
	if d, _ := out["decision"].(map[string]any); status != http.StatusOK || out["agent"] != "lina" || d["outcome"] != "applied" {
		t.Fatalf("lina's approval: %d %v", status, out)
	}
}
