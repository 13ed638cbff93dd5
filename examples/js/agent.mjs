// A CoAgent agent in JavaScript, speaking nothing but the wire contract
// (SPEC §2, §3, §6) with nats.js: JSON intents sent by request/reply on
// coagent.api.submit.<agent>, whose replies are their decisions (the main
// path); one intent stored on JetStream (coagent.intents.<agent>) and its
// decision collected afterwards (the store-and-forward path); and one API
// request to read the state back. No CoAgent library is involved.
//
// The flow, one JSON line per step on stdout ("via" says which path):
//
//   claim   apply    tasks.<task>.owner = <agent>, only if nobody owns it  (api)
//   propose propose  a transaction writing report.sections.<task>, waiting (api)
//                    for a holder of the section to finish
//   commit  commit   the section's text, with the grant's txn and fence   (api)
//   incr    apply    incr stats.js_runs                                   (stream)
//   state   coagent.api.state.get of the three paths
//
// Environment: NATS_URL (default nats://127.0.0.1:4222), AGENT (default
// js-writer), TASK (default t1), REQUEST_TIMEOUT_MS (default 10000: the
// longest one request may take; the coordinator is asked to answer within
// it, and a reply that has not come by then is taken as lost and the same
// intent is sent again).
//
// Exit status: 0 when every step succeeded, 3 when the claim was rejected
// (someone else owns the task; nothing else is done), 1 on any other error.

import crypto from "node:crypto";
import { connect, errors, headers } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";

const NATS_URL = process.env.NATS_URL || "nats://127.0.0.1:4222";
const AGENT = process.env.AGENT || "js-writer";
const TASK = process.env.TASK || "t1";
const PREFIX = "coagent";
const REQUEST_TIMEOUT_MS = Number(process.env.REQUEST_TIMEOUT_MS || 10000);
const ATTEMPTS = 5; // requests of one intent in a row without an answer before giving up
const TEXT = "text written from JavaScript";

const EXIT_CLAIM_REJECTED = 3;

// The subjects of SPEC §6.
const subjects = {
  submit: (agent) => `${PREFIX}.api.submit.${agent}`,
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
function emit(step, via, fields) {
  process.stdout.write(JSON.stringify({ step, via, ...fields }) + "\n");
}

class Failure extends Error {
  constructor(message, code = 1) {
    super(message);
    this.code = code;
  }
}

// The part of a request's time left for its reply to travel, past the wait
// the coordinator is asked for.
function replyMargin(timeout) {
  return Math.min(timeout / 4, 1000);
}

// An interim outcome: a final decision for the same intent follows.
function interim(d) {
  return d.outcome === "queued" || d.outcome === "escalated";
}

// Whether err, from nc.request, means the reply did not come (lost, or the
// coordinator paused) or no coordinator listens yet: worth sending again.
function noAnswer(err) {
  return err instanceof errors.TimeoutError || (err instanceof errors.RequestError && err.isNoResponders());
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// serviceError returns the API error of a reply (micro error headers), or null.
function serviceError(m) {
  const code = m.headers?.get("Nats-Service-Error-Code");
  return code ? { code, description: m.headers.get("Nats-Service-Error") } : null;
}

// Agent sends intents and gets their decisions back.
class Agent {
  constructor(nc, name) {
    this.nc = nc;
    this.js = jetstream(nc);
    this.name = name;
    this.waiting = new Map(); // intent id → function taking a final decision
  }

  // submit sends the intent by request/reply and returns its final decision:
  // the main path. The reply is the decision, sent once it is durable.
  //
  // - The first request asks for the first decision at once (wait 0): the
  //   final one for most intents, an interim one (queued, escalated) for one
  //   that waits or goes to the arbiters. After an interim decision the
  //   agent asks again with the same intent and a wait: the coordinator holds
  //   the request until the final decision exists, or answers the interim one
  //   again when the wait ends.
  // - No reply within REQUEST_TIMEOUT_MS, no coordinator listening, or the
  //   error "unavailable": the same intent again, same id, after a pause. The
  //   coordinator answers a resend from its record (duplicate: true), so
  //   nothing is applied twice.
  async submit(fields) {
    const intent = { id: ulid(), agent: this.name, ...fields };
    const data = JSON.stringify(intent);
    let long = false;
    for (let failures = 0; failures < ATTEMPTS; ) {
      const h = headers();
      h.set("Coagent-Wait-Ms", String(long ? Math.floor(REQUEST_TIMEOUT_MS - replyMargin(REQUEST_TIMEOUT_MS)) : 0));
      let m;
      try {
        m = await this.nc.request(subjects.submit(this.name), data, { timeout: REQUEST_TIMEOUT_MS, headers: h });
      } catch (err) {
        if (!noAnswer(err)) {
          throw err;
        }
        failures++;
        long = long || err instanceof errors.TimeoutError;
        process.stderr.write(`${this.name}: no reply for ${intent.id} (${err.message}); sending it again\n`);
        await sleep(50 * 2 ** failures);
        continue;
      }
      const e = serviceError(m);
      if (e?.code === "unavailable") {
        failures++;
        process.stderr.write(`${this.name}: coordinator unavailable for ${intent.id} (${e.description}); sending it again\n`);
        await sleep(50 * 2 ** failures);
        continue;
      }
      if (e) {
        throw new Failure(`submit ${intent.kind}: ${e.code}: ${e.description}`);
      }
      const d = m.json();
      if (!interim(d)) {
        return d;
      }
      process.stderr.write(`${this.name}: ${intent.id} is ${d.outcome}; asking for its final decision\n`);
      long = true;
      failures = 0;
    }
    throw new Failure(`no decision for ${intent.kind} ${intent.id} after ${ATTEMPTS} requests without an answer`);
  }

  // listen subscribes to the agent's decisions subject, where the decisions
  // of the intents it stores on the stream come. It must run before the
  // first such intent is published, or a fast decision could come before
  // anyone listens (decision.get would still find it).
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
        if (interim(d)) {
          continue; // the final decision for this intent follows
        }
        const resolve = this.waiting.get(d.intent);
        if (resolve) {
          this.waiting.delete(d.intent);
          resolve(d);
        }
      }
    })();
    await this.nc.flush(); // the server has the subscription
  }

  // publish stores the intent on the agent's intents stream and returns its
  // id once JetStream has it: the store-and-forward path, for an intent sent
  // now and decided whenever a coordinator gets to it. Nats-Msg-Id = intent
  // id, so a publish sent again is stored once.
  async publish(fields) {
    const intent = { id: ulid(), agent: this.name, ...fields };
    await this.js.publish(subjects.intents(this.name), JSON.stringify(intent), { msgID: intent.id });
    return intent.id;
  }

  // decision returns the final decision of an intent published earlier: the
  // coordinator's record first (decision.get: a decision made while nobody
  // listened), then the decisions subject, asking the record again every
  // REQUEST_TIMEOUT_MS in case a decision went by while the connection was
  // down.
  async decision(id) {
    const decided = new Promise((resolve) => this.waiting.set(id, resolve));
    try {
      for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
        const recorded = await this.decisionGet(id);
        if (recorded && !interim(recorded)) {
          return recorded;
        }
        let timer;
        const timeout = new Promise((resolve) => {
          timer = setTimeout(resolve, REQUEST_TIMEOUT_MS, null);
        });
        const d = await Promise.race([decided, timeout]);
        clearTimeout(timer);
        if (d) {
          return d;
        }
      }
    } finally {
      this.waiting.delete(id);
    }
    throw new Failure(`no decision for ${id} after waiting ${ATTEMPTS} times ${REQUEST_TIMEOUT_MS}ms`);
  }

  // decisionGet returns the recorded decision of intent id, or null when
  // there is none yet (not_found) or no answer came.
  async decisionGet(id) {
    let m;
    try {
      m = await this.nc.request(subjects.api("decision.get"), JSON.stringify({ intent: id }), { timeout: REQUEST_TIMEOUT_MS });
    } catch (err) {
      if (noAnswer(err)) {
        return null;
      }
      throw err;
    }
    const e = serviceError(m);
    if (e?.code === "not_found") {
      return null;
    }
    if (e) {
      throw new Failure(`decision.get ${id}: ${e.code}: ${e.description}`);
    }
    return m.json();
  }

  // stateGet reads paths with the API: values, versions and the revision.
  async stateGet(paths) {
    const m = await this.nc.request(subjects.api("state.get"), JSON.stringify({ paths }), { timeout: REQUEST_TIMEOUT_MS });
    const e = serviceError(m);
    if (e) {
      throw new Failure(`state.get: ${e.code}: ${e.description}`);
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
  emit("claim", "api", claim);
  if (claim.outcome === "rejected") {
    throw new Failure(`claim of ${TASK} rejected (${claim.reason}): ${claim.detail || "no detail"}`, EXIT_CLAIM_REJECTED);
  }
  expect("claim", claim, "applied");

  // (b) Write the section in a transaction: propose what will be read and
  // written, then commit the value with the grant's txn and fence. If
  // someone else holds the section, the propose waits for it (queued, then
  // granted), up to 20 s.
  const grant = await agent.submit({
    kind: "propose",
    action: "write_section",
    reads: [{ path: section }],
    writes: [{ path: section, op: "set" }],
    lease_ms: 10000,
    on_conflict: "wait",
    wait_ms: 20000,
  });
  emit("propose", "api", grant);
  expect("propose", grant, "granted");

  const commit = await agent.submit({
    kind: "commit",
    action: "write_section",
    txn: grant.txn,
    fence: grant.fence,
    writes: [{ path: section, op: "set", value: TEXT }],
  });
  emit("commit", "api", commit);
  if (commit.outcome !== "committed") {
    // A rejected commit leaves the transaction open until its lease ends:
    // give it back now.
    const abort = await agent.submit({ kind: "abort", txn: grant.txn, fence: grant.fence });
    emit("abort", "api", abort);
  }
  expect("commit", commit, "committed");

  // (c) Count the run, store-and-forward: the intent is stored on the
  // stream and the agent could go on with other work (or exit, and collect
  // the decision on its next run); incr is commutative, so concurrent
  // counters merge.
  const id = await agent.publish({
    kind: "apply",
    action: "count_run",
    writes: [{ path: counter, op: "incr", value: 1 }],
  });
  const incr = await agent.decision(id);
  emit("incr", "stream", incr);
  expect("incr", incr, "applied");

  // (d) Read it all back.
  const state = await agent.stateGet([owner, section, counter]);
  emit("state", "api", state);
}

async function main() {
  if (!SEGMENT.test(AGENT) || !SEGMENT.test(TASK)) {
    throw new Failure(`AGENT ${JSON.stringify(AGENT)} and TASK ${JSON.stringify(TASK)} must be path segments: 1–128 letters, digits, '_' or '-'`);
  }
  if (!(REQUEST_TIMEOUT_MS > 0)) {
    throw new Failure(`REQUEST_TIMEOUT_MS ${JSON.stringify(process.env.REQUEST_TIMEOUT_MS)}: want a positive number of milliseconds`);
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
