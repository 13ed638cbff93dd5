// A CoAgent agent in JavaScript, speaking nothing but the wire contract
// (SPEC §2, §3, §6): JSON intents published on coagent.intents.<agent>,
// JSON decisions received on coagent.decisions.<agent>, and one API request
// to read the state back. No CoAgent library is involved.
//
// The flow, one JSON line per step on stdout:
//
//   claim   apply    tasks.<task>.owner = <agent>, only if nobody owns it
//   propose propose  a transaction writing report.sections.<task>
//   commit  commit   the section's text, with the grant's txn and fence
//   incr    apply    incr stats.js_runs
//   state   coagent.api.state.get of the three paths
//
// Environment: NATS_URL (default nats://127.0.0.1:4222), AGENT (default
// js-writer), TASK (default t1), DECISION_TIMEOUT_MS (default 5000: how long
// to wait for a decision before publishing the same intent again).
//
// Exit status: 0 when every step succeeded, 3 when the claim was rejected
// (someone else owns the task; nothing else is done), 1 on any other error.

import crypto from "node:crypto";
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";

const NATS_URL = process.env.NATS_URL || "nats://127.0.0.1:4222";
const AGENT = process.env.AGENT || "js-writer";
const TASK = process.env.TASK || "t1";
const PREFIX = "coagent";
const DECISION_TIMEOUT_MS = Number(process.env.DECISION_TIMEOUT_MS || 5000);
const ATTEMPTS = 5; // publications of one intent id before giving up
const TEXT = "text written from JavaScript";

const EXIT_CLAIM_REJECTED = 3;

// The subjects of SPEC §6.
const subjects = {
  intents: (agent) => `${PREFIX}.intents.${agent}`,
  decisions: (agent) => `${PREFIX}.decisions.${agent}`,
  api: (endpoint) => `${PREFIX}.api.${endpoint}`,
};

// A path segment (SPEC §1): agent names and task names are segments too.
const SEGMENT = /^[\p{L}\p{N}_-]{1,128}$/u;

// ulid returns a new ULID in canonical form: 48 bits of milliseconds since
// the epoch then 80 random bits, as 26 upper-case Crockford base32 digits.
// The coordinator refuses lower case: it would be another idempotency key.
function ulid() {
  const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  let n = (BigInt(Date.now()) << 80n) | BigInt("0x" + crypto.randomBytes(10).toString("hex"));
  let out = "";
  for (let i = 0; i < 26; i++) {
    out = alphabet[Number(n & 31n)] + out;
    n >>= 5n;
  }
  return out;
}

// stateRef spells a path as an expression over `state`: state.tasks.t1.owner,
// with brackets for segments that are not identifiers (state.tasks["t-1"]).
function stateRef(path) {
  return "state" + path.split(".").map((s) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(s) ? `.${s}` : `[${JSON.stringify(s)}]`)).join("");
}

// emit prints one step as a JSON line: the step name and its decision.
function emit(step, fields) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + "\n");
}

class Failure extends Error {
  constructor(message, code = 1) {
    super(message);
    this.code = code;
  }
}

// Agent publishes intents and matches the decisions that come back to them.
class Agent {
  constructor(nc, name) {
    this.nc = nc;
    this.js = jetstream(nc);
    this.name = name;
    this.waiting = new Map(); // intent id → function taking a final decision
  }

  // listen subscribes to the agent's decisions. It must run before the first
  // intent is published, or a fast decision could come before anyone listens.
  async listen() {
    const sub = this.nc.subscribe(subjects.decisions(this.name));
    (async () => {
      for await (const m of sub) {
        let d;
        try {
          d = m.json();
        } catch {
          continue; // not a decision
        }
        // The header Coagent-Intent names the intent as well; the body's
        // intent field is enough.
        if (d.outcome === "queued" || d.outcome === "escalated") {
          continue; // interim: the final decision for this intent follows
        }
        const resolve = this.waiting.get(d.intent);
        if (resolve) {
          this.waiting.delete(d.intent);
          resolve(d);
        }
        // Anything else is a decision for an intent no longer waited on, such
        // as the original of a decision already received as a duplicate.
      }
    })();
    await this.nc.flush(); // the server has the subscription
  }

  // submit publishes the intent and returns its final decision. With no
  // decision within DECISION_TIMEOUT_MS it publishes the same intent again:
  // the same id (Nats-Msg-Id and the coordinator's idempotency key), so it
  // is applied at most once and a decided intent gets its recorded decision.
  async submit(fields) {
    const intent = { id: ulid(), agent: this.name, ...fields };
    const data = JSON.stringify(intent);
    const decided = new Promise((resolve) => this.waiting.set(intent.id, resolve));
    try {
      for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
        const ack = await this.js.publish(subjects.intents(this.name), data, { msgID: intent.id });
        if (attempt > 1) {
          // Within the stream's duplicate window (2 min) the stream drops the
          // copy (ack.duplicate) and the decision on its way is the answer.
          process.stderr.write(`${this.name}: no decision for ${intent.id} in ${DECISION_TIMEOUT_MS}ms; published it again (attempt ${attempt}, duplicate=${ack.duplicate})\n`);
        }
        let timer;
        const timeout = new Promise((resolve) => {
          timer = setTimeout(resolve, DECISION_TIMEOUT_MS, null);
        });
        const d = await Promise.race([decided, timeout]);
        clearTimeout(timer);
        if (d) {
          return d;
        }
      }
    } finally {
      this.waiting.delete(intent.id);
    }
    throw new Failure(`no decision for ${intent.kind} ${intent.id} after ${ATTEMPTS} publications`);
  }

  // stateGet reads paths with the API: values, versions and the revision.
  async stateGet(paths) {
    const m = await this.nc.request(subjects.api("state.get"), JSON.stringify({ paths }), { timeout: DECISION_TIMEOUT_MS });
    const code = m.headers?.get("Nats-Service-Error-Code");
    if (code) {
      throw new Failure(`state.get: ${code}: ${m.headers.get("Nats-Service-Error")}`);
    }
    return m.json();
  }
}

// expect fails the run unless decision d has the wanted outcome.
function expect(step, d, outcome) {
  if (d.outcome !== outcome) {
    throw new Failure(`${step}: ${d.outcome}${d.reason ? ` (${d.reason})` : ""}: ${d.detail || "no detail"}`);
  }
}

async function run(agent) {
  const owner = `tasks.${TASK}.owner`;
  const section = `report.sections.${TASK}`;
  const counter = "stats.js_runs";

  // (a) Claim the task: one atomic apply, only if nobody owns it yet. The
  // precondition reads the owner path, so a racing claim conflicts.
  const claim = await agent.submit({
    kind: "apply",
    action: "claim_task",
    writes: [{ path: owner, op: "set", value: agent.name }],
    pre: [`${stateRef(owner)} == nil`],
  });
  emit("claim", claim);
  if (claim.outcome === "rejected") {
    throw new Failure(`claim of ${TASK} rejected (${claim.reason}): ${claim.detail || "no detail"}`, EXIT_CLAIM_REJECTED);
  }
  expect("claim", claim, "applied");

  // (b) Write the section in a transaction: propose what will be read and
  // written, then commit the value with the grant's txn and fence.
  const grant = await agent.submit({
    kind: "propose",
    action: "write_section",
    reads: [{ path: section }],
    writes: [{ path: section, op: "set" }],
    lease_ms: 10000,
  });
  emit("propose", grant);
  expect("propose", grant, "granted");

  const commit = await agent.submit({
    kind: "commit",
    action: "write_section",
    txn: grant.txn,
    fence: grant.fence,
    writes: [{ path: section, op: "set", value: TEXT }],
  });
  emit("commit", commit);
  if (commit.outcome !== "committed") {
    // A rejected commit leaves the transaction open until its lease ends:
    // give it back now.
    const abort = await agent.submit({ kind: "abort", txn: grant.txn, fence: grant.fence });
    emit("abort", abort);
  }
  expect("commit", commit, "committed");

  // (c) Count the run: incr is commutative, so concurrent counters merge.
  const incr = await agent.submit({
    kind: "apply",
    action: "count_run",
    writes: [{ path: counter, op: "incr", value: 1 }],
  });
  emit("incr", incr);
  expect("incr", incr, "applied");

  // (d) Read it all back.
  const state = await agent.stateGet([owner, section, counter]);
  emit("state", state);
}

async function main() {
  if (!SEGMENT.test(AGENT) || !SEGMENT.test(TASK)) {
    throw new Failure(`AGENT ${JSON.stringify(AGENT)} and TASK ${JSON.stringify(TASK)} must be path segments: 1–128 letters, digits, '_' or '-'`);
  }
  if (!(DECISION_TIMEOUT_MS > 0)) {
    throw new Failure(`DECISION_TIMEOUT_MS ${JSON.stringify(process.env.DECISION_TIMEOUT_MS)}: want a positive number of milliseconds`);
  }
  const nc = await connect({ servers: NATS_URL, name: `coagent-js-${AGENT}` });
  try {
    const agent = new Agent(nc, AGENT);
    await agent.listen();
    await run(agent);
  } finally {
    await nc.close();
  }
}

try {
  await main();
  process.exit(0);
} catch (err) {
  process.stderr.write(`${AGENT}: ${err.message}\n`);
  process.exit(err instanceof Failure ? err.code : 1);
}
