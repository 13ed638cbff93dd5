// An independent MCP client of `coagent mcp`, on the TypeScript MCP SDK:
// it spawns one `coagent mcp` per agent over stdio, as an MCP host does,
// and checks what a model would rely on.
//
//   1. alice and bob claim the same task at once: exactly one wins, and the
//      other's result names the winner (held_by);
//   2. the winner begins a transaction, which the server renews across
//      calls (the log shows the renewals), and commits it;
//   3. bob subscribes to coagent://state/tasks and is notified of a change
//      alice makes.
//
// Environment: COAGENT (the coagent binary), NATS_URL (a server with a
// coordinator). Each step is one JSON line on stdout (the transcript of
// docs/mcp.md); the exit status is 0 only if every check held.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const bin = process.env.COAGENT ?? "coagent";
const url = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

function check(cond, what) {
  if (!cond) {
    throw new Error("check failed: " + what);
  }
}

function step(agent, tool, args, result) {
  console.log(JSON.stringify({ agent, tool, args, result }));
}

// connect spawns `coagent mcp --agent name` and connects a client to it.
async function connect(name) {
  const transport = new StdioClientTransport({
    command: bin,
    args: ["mcp", "--agent", name, "--nats", url],
    stderr: "inherit",
  });
  const client = new Client({ name: "race-" + name, version: "0.1.0" });
  await client.connect(transport);
  return client;
}

// call calls a tool as agent and returns its structured result.
async function call(client, agent, tool, args) {
  const res = await client.callTool({ name: tool, arguments: args });
  check(res.structuredContent, `${tool}: a structured result (${JSON.stringify(res.content)})`);
  // A host that looks only at isError must see a rejection as a failure.
  check(!!res.isError === !res.structuredContent.ok, `${tool}: isError ${res.isError} with ok ${res.structuredContent.ok}`);
  step(agent, tool, args, res.structuredContent);
  return res.structuredContent;
}

const alice = await connect("alice");
const bob = await connect("bob");
try {
  // 1. The race.
  const claim = { path: "tasks.t1" };
  const [a, b] = await Promise.all([
    call(alice, "alice", "claim", claim),
    call(bob, "bob", "claim", claim),
  ]);
  check(a.ok !== b.ok, `exactly one claim wins (alice ${a.ok}, bob ${b.ok})`);
  const [winner, wname, lost, lname] = a.ok ? [alice, "alice", b, "bob"] : [bob, "bob", a, "alice"];
  check(lost.reason === "precondition_failed", `${lname}'s lost claim: precondition_failed, got ${lost.reason}`);
  check(lost.held_by === wname, `${lname}'s lost claim names ${wname}, got ${lost.held_by}`);
  check(lost.next.includes(wname), `${lname} is told to leave ${wname}'s task: ${lost.next}`);

  // 2. A transaction renewed across calls, then committed.
  const begun = await call(winner, wname, "begin", {
    action: "work_t1",
    writes: [{ path: "tasks.t1.result", op: "set" }],
    lease_ms: 600,
  });
  check(begun.ok && begun.outcome === "granted" && begun.txn, "begin is granted");
  let renewals = 0;
  for (const end = Date.now() + 15000; Date.now() < end; ) {
    const h = await winner.callTool({ name: "history", arguments: { txn: begun.txn, type: "renew" } });
    renewals = h.structuredContent.events.length;
    if (renewals >= 2) break;
    await new Promise((r) => setTimeout(r, 50)); // poll the log, not a timer: the renewals are what is awaited
  }
  step(wname, "history", { txn: begun.txn, type: "renew" }, { renewals });
  check(renewals >= 2, `the lease was renewed across calls (${renewals} renewals)`);
  const committed = await call(winner, wname, "commit", {
    txn: begun.txn,
    writes: [{ path: "tasks.t1.result", op: "set", value: "done by " + wname }],
  });
  check(committed.ok && committed.outcome === "committed", "commit after the lease's own length");

  // 3. A subscription told of another agent's change.
  const updated = new Promise((resolve) => {
    bob.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => resolve(n.params));
  });
  await bob.subscribeResource({ uri: "coagent://state/tasks" });
  step("bob", "resources/subscribe", { uri: "coagent://state/tasks" }, {});
  await call(alice, "alice", "write", { writes: [{ path: "tasks.t2.status", op: "set", value: "open" }] });
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("no notification in 10s")), 10000));
  const params = await Promise.race([updated, timeout]);
  step("bob", "notifications/resources/updated", {}, params);
  check(params.uri === "coagent://state/tasks", `notified for coagent://state/tasks, got ${params.uri}`);
  check(params._meta?.agent === "alice", `the change is alice's, got ${params._meta?.agent}`);
  const read = await bob.readResource({ uri: "coagent://state/tasks.t2" });
  const state = JSON.parse(read.contents[0].text);
  step("bob", "resources/read", { uri: "coagent://state/tasks.t2" }, state);
  check(state.value?.status === "open", "the resource shows alice's change");
} catch (err) {
  console.error(err.message);
  process.exitCode = 1;
} finally {
  await alice.close();
  await bob.close();
}
