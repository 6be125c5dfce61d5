// The worker against a fake cairn server that plays the remote step
// protocol (docs/remote-steps-protocol.md) and records every call.
import { afterEach, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import {
  PermanentError,
  StepAbortedError,
  TransientError,
  Worker,
  WorkerError,
  type StepContext,
  type WorkerEvent,
  type WorkerOptions,
} from "../src/index.js";

interface Step {
  claim: string;
  task_id: string;
  namespace: string;
  position: number;
  name: string;
  attempt: number;
  input: unknown;
  lease_expires_at: string;
  heartbeat_timeout_ms: number;
  start_to_close_ms: number;
}

interface Call {
  route: "claim" | "heartbeat" | "stream" | "complete" | "fail" | "release";
  claim?: string;
  body: any;
  headers: Record<string, string | string[] | undefined>;
  /** Claims in flight when this claim arrived (claim calls only). */
  outstanding?: number;
  /** The client hung up before the server answered. */
  aborted?: boolean;
}

/** A reply the test scripts; "drop" closes the connection unanswered. */
type Reply = { status: number; body?: unknown; headers?: Record<string, string> } | "drop";

const problem = (status: number, code: string, detail: string, headers?: Record<string, string>): Reply => ({
  status,
  body: { type: "about:blank", title: code, status, detail, code },
  headers: { "content-type": "application/problem+json", ...headers },
});

class FakeServer {
  readonly calls: Call[] = [];
  /** Answers a call instead of the protocol's default when it returns a reply. */
  respond?: (call: Call) => Reply | undefined;
  private readonly ready: Step[] = [];
  private readonly outstanding = new Set<string>();
  private chunks = 0;
  private waiters: { max: number; res: ServerResponse }[] = [];
  private readonly server = createServer((req, res) => void this.handle(req, res));
  url = "";

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    const addr = this.server.address();
    this.url = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
    return this;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  /** Makes steps claimable, answering a waiting long poll at once. */
  add(...steps: Step[]): void {
    this.ready.push(...steps);
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) {
      if (this.ready.length === 0) this.waiters.push(w);
      else this.handOut(w.res, w.max);
    }
  }

  routes(route: Call["route"], claim?: string): Call[] {
    return this.calls.filter((c) => c.route === route && (claim === undefined || c.claim === claim));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const text = await readBody(req);
    const m = /^\/v1\/remote-steps\/(?:(claim)|([^/]+)\/(heartbeat|stream|complete|fail|release))$/.exec(req.url ?? "");
    if (req.method !== "POST" || !m) return send(res, problem(404, "not_found", String(req.url)));
    const call: Call = {
      route: (m[1] ?? m[3]) as Call["route"],
      claim: m[2] === undefined ? undefined : decodeURIComponent(m[2]),
      body: JSON.parse(text),
      headers: req.headers,
    };
    this.calls.push(call);
    const scripted = this.respond?.(call);
    if (scripted) return send(res, scripted);
    if (call.route === "claim") return this.claim(call, res);
    if (call.route === "heartbeat") return send(res, { status: 200, body: { lease_expires_at: new Date().toISOString(), cancel_requested: false } });
    if (call.route === "stream") return send(res, { status: 200, body: { seq: (this.chunks += call.body.chunks.length) } });
    this.outstanding.delete(call.claim!);
    send(res, { status: 200, body: { status: { complete: "completed", fail: "failed", release: "released" }[call.route] } });
  }

  private claim(call: Call, res: ServerResponse): void {
    call.outstanding = this.outstanding.size;
    if (this.ready.length > 0) return this.handOut(res, call.body.max);
    const waiter = { max: call.body.max, res };
    this.waiters.push(waiter);
    const timer = setTimeout(() => this.handOut(res, 0), call.body.wait_seconds * 1000);
    res.on("close", () => {
      clearTimeout(timer);
      this.waiters = this.waiters.filter((w) => w !== waiter);
      if (!res.writableEnded) call.aborted = true;
    });
  }

  private handOut(res: ServerResponse, max: number): void {
    if (res.writableEnded) return;
    const steps = this.ready.splice(0, max);
    for (const s of steps) this.outstanding.add(s.claim);
    send(res, { status: 200, body: { steps } });
  }
}

function send(res: ServerResponse, reply: Reply): void {
  if (reply === "drop") return res.socket?.destroy();
  res.statusCode = reply.status;
  res.setHeader("content-type", "application/json");
  for (const [k, v] of Object.entries(reply.headers ?? {})) res.setHeader(k, v);
  res.end(JSON.stringify(reply.body ?? {}));
}

function readBody(req: IncomingMessage): Promise<string> {
  const decoder = new TextDecoder();
  let text = "";
  return new Promise((resolve) => {
    req.on("data", (chunk) => (text += decoder.decode(chunk, { stream: true })));
    req.on("end", () => resolve(text + decoder.decode()));
  });
}

let seq = 0;
function step(name: string, input: unknown, extra: Partial<Step> = {}): Step {
  seq++;
  return {
    claim: `claim-${seq}`,
    task_id: `task-${seq}`,
    namespace: "default",
    position: seq,
    name,
    attempt: 1,
    input,
    lease_expires_at: new Date(Date.now() + 30_000).toISOString(),
    heartbeat_timeout_ms: 30_000,
    start_to_close_ms: 0,
    ...extra,
  };
}

/** Waits until cond holds; the deadline only turns a hang into a clear failure. */
async function until(what: string, cond: () => boolean, ms = 5_000): Promise<void> {
  const giveUp = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > giveUp) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A promise with its resolve, to hold a handler until the test lets it go. */
function gate<T = void>(): { promise: Promise<T>; open: (v: T) => void } {
  let open!: (v: T) => void;
  const promise = new Promise<T>((r) => (open = r));
  return { promise, open };
}

const aborted = (signal: AbortSignal) => new Promise<void>((r) => signal.addEventListener("abort", () => r(), { once: true }));

const cleanup: (() => Promise<void>)[] = [];
afterEach(
  async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  },
  { timeout: 10_000 },
);

interface Harness {
  server: FakeServer;
  worker: Worker;
  events: WorkerEvent[];
  logs: string[];
  run: Promise<void>;
}

/** A fake server and a worker on it; register steps in setup, before run(). */
async function harness(opts: Partial<WorkerOptions>, setup: (w: Worker) => void): Promise<Harness> {
  const server = await new FakeServer().start();
  const events: WorkerEvent[] = [];
  const logs: string[] = [];
  const log = (msg: string) => void logs.push(msg);
  const worker = new Worker({
    url: server.url,
    queue: "q",
    workerId: "w-1",
    pollWaitSeconds: 1,
    handleSignals: false,
    logger: { info: log, warn: log, error: log },
    onEvent: (e) => void events.push(e),
    ...opts,
  });
  setup(worker);
  const run = worker.run();
  run.catch(() => {}); // tests that expect a rejection await it themselves
  cleanup.push(() => server.close(), () => worker.stop());
  return { server, worker, events, logs, run };
}

/** Every test gets a deadline, so a hang fails instead of stalling the run. */
const it = (name: string, fn: () => Promise<void>) => test(name, { timeout: 10_000 }, fn);

const claimsOf = (events: WorkerEvent[], kind: WorkerEvent["event"]) =>
  events.filter((e) => e.event === kind).map((e) => ("claim" in e ? e.claim : ""));

it("completes a step with its output, claiming only its names", async () => {
  let ctx: StepContext | undefined;
  const h = await harness({ token: "tok", namespace: "ns1" }, (w) =>
    w
      .step("double", async (input: { n: number }, c) => {
        ctx = c;
        return { n: input.n * 2 };
      })
      .step("nothing", () => undefined),
  );
  const s = step("double", { n: 21 }, { claim: "c/1 x", namespace: "ns1", position: 3, attempt: 2, start_to_close_ms: 60_000 });
  const n = step("nothing", {});
  h.server.add(s, n);
  await until("both completed events", () => claimsOf(h.events, "completed").length === 2);

  assert.deepEqual(h.server.routes("complete", "c/1 x")[0].body, { output: { n: 42 } });
  assert.deepEqual(h.server.routes("complete", n.claim)[0].body, { output: null });
  const claim = h.server.routes("claim")[0];
  assert.deepEqual(claim.body, { queue: "q", worker: "w-1", names: ["double", "nothing"], max: 1, wait_seconds: 1 });
  assert.equal(claim.headers.authorization, "Bearer tok");
  assert.equal(claim.headers["cairn-namespace"], "ns1");

  assert.ok(ctx);
  assert.deepEqual(
    { taskId: ctx.taskId, namespace: ctx.namespace, position: ctx.position, name: ctx.name, attempt: ctx.attempt, claim: ctx.claim },
    { taskId: s.task_id, namespace: "ns1", position: 3, name: "double", attempt: 2, claim: "c/1 x" },
  );
  assert.ok(ctx.deadline instanceof Date);
  const ahead = ctx.deadline.getTime() - Date.now();
  assert.ok(ahead > 50_000 && ahead <= 60_000, `deadline ${ahead} ms ahead`);
  assert.equal(ctx.signal.aborted, false);

  assert.deepEqual(h.events[0], { event: "ready" });
  assert.deepEqual(h.events[1], { event: "claimed", claim: "c/1 x", name: "double", position: 3, attempt: 2, task_id: s.task_id });
  assert.deepEqual(claimsOf(h.events, "completed").sort(), ["c/1 x", n.claim].sort());
});

it("maps thrown errors to the protocol's error object", async () => {
  class QuotaError extends TransientError {}
  const throwers: Record<string, () => never> = {
    transient: () => {
      throw new TransientError("ocr backend unavailable", { kind: "Unavailable", status: 503, attributes: { page: 3, big: true, o: { a: 1 } }, retryAfterMs: 2000 });
    },
    permanent: () => {
      throw new PermanentError("page is not an image", { kind: "BadInput" });
    },
    plain: () => {
      throw new TypeError("unreadable page");
    },
    subclass: () => {
      throw new QuotaError("quota spent");
    },
    string: () => {
      throw "boom";
    },
  };
  const h = await harness({ concurrency: 5 }, (w) => w.step("explode", (input: { how: string }) => throwers[input.how]()));
  const steps = Object.keys(throwers).map((how) => step("explode", { how }));
  h.server.add(...steps);
  await until("five failed events", () => claimsOf(h.events, "failed").length === 5);

  const errorOf = (i: number) => h.server.routes("fail", steps[i].claim)[0].body.error;
  assert.deepEqual(errorOf(0), {
    message: "ocr backend unavailable",
    type: "TransientError",
    class: "transient",
    kind: "Unavailable",
    status: 503,
    attributes: { page: "3", big: "true", o: '{"a":1}' },
    retry_after_ms: 2000,
  });
  assert.deepEqual(errorOf(1), { message: "page is not an image", type: "PermanentError", class: "permanent", kind: "BadInput" });
  assert.deepEqual(errorOf(2), { message: "unreadable page", type: "TypeError", class: "", kind: "TypeError" });
  assert.deepEqual(errorOf(3), { message: "quota spent", type: "QuotaError", class: "transient", kind: "QuotaError" });
  assert.deepEqual(errorOf(4), { message: "boom", type: "String", class: "", kind: "String" });
  assert.equal(h.server.routes("fail").length, 5);
});

it("claims no more than its free slots and runs at most concurrency steps", async () => {
  const hold = gate();
  let active = 0;
  let most = 0;
  const h = await harness({ concurrency: 2 }, (w) =>
    w.step("work", async (input: { hold: boolean }) => {
      most = Math.max(most, ++active);
      if (input.hold) await hold.promise;
      active--;
      return "done";
    }),
  );
  h.server.add(step("work", { hold: true }), step("work", { hold: false }), step("work", { hold: false }), step("work", { hold: false }));
  await until("the three quick steps", () => h.server.routes("complete").length === 3);
  await until("a claim for the one free slot", () => h.server.routes("claim").length >= 4);
  hold.open();
  await until("the held step", () => h.server.routes("complete").length === 4);

  const claims = h.server.routes("claim");
  assert.equal(claims[0].body.max, 2);
  assert.deepEqual(claims.slice(1, 4).map((c) => c.body.max), [1, 1, 1]); // one slot held throughout
  for (const c of claims) assert.ok(c.outstanding! + c.body.max <= 2, `claim max ${c.body.max} with ${c.outstanding} outstanding`);
  assert.equal(most, 2);
});

it("heartbeats a running step, and cancel_requested aborts its signal", async () => {
  let reason: unknown;
  const h = await harness({}, (w) =>
    w.step("long", async (_input, ctx) => {
      await aborted(ctx.signal);
      reason = ctx.signal.reason;
      throw ctx.signal.reason;
    }),
  );
  const s = step("long", {}, { heartbeat_timeout_ms: 60 }); // a heartbeat every 20 ms
  h.server.respond = (call) =>
    call.route === "heartbeat" && h.server.routes("heartbeat").length >= 3
      ? { status: 200, body: { lease_expires_at: new Date().toISOString(), cancel_requested: true } }
      : undefined;
  h.server.add(s);
  await until("the failure", () => h.server.routes("fail").length === 1);

  assert.ok(h.server.routes("heartbeat", s.claim).length >= 3);
  assert.ok(reason instanceof StepAbortedError);
  assert.equal(reason.code, "cancel_requested");
  assert.deepEqual(h.server.routes("fail", s.claim)[0].body.error, {
    message: "cairn: step aborted: cancel_requested",
    type: "StepAbortedError",
    class: "",
    kind: "StepAbortedError",
  });
});

it("a manual heartbeat never throws on network errors or 503", async () => {
  const h = await harness({}, (w) =>
    w.step("beat", async (_input, ctx) => {
      await ctx.heartbeat();
      await ctx.heartbeat();
      return { beats: 2, aborted: ctx.signal.aborted };
    }),
  );
  h.server.respond = (call) =>
    call.route !== "heartbeat" ? undefined : h.server.routes("heartbeat").length === 1 ? "drop" : problem(503, "unavailable", "db down");
  const s = step("beat", {});
  h.server.add(s);
  await until("the outcome", () => h.server.routes("complete").length === 1);
  assert.deepEqual(h.server.routes("complete", s.claim)[0].body, { output: { beats: 2, aborted: false } });
  assert.equal(h.server.routes("heartbeat", s.claim).length, 2);
});

it("claim_lost on a heartbeat aborts the step and drops its outcome", async () => {
  let reason: unknown;
  const done = gate();
  const h = await harness({}, (w) =>
    w.step("long", async (_input, ctx) => {
      await aborted(ctx.signal);
      reason = ctx.signal.reason;
      done.open();
      return "too late";
    }),
  );
  h.server.respond = (call) => (call.route === "heartbeat" ? problem(409, "claim_lost", "lease expired") : undefined);
  const s = step("long", {}, { heartbeat_timeout_ms: 30 });
  h.server.add(s);
  await done.promise;
  await h.worker.stop();

  assert.ok(reason instanceof StepAbortedError);
  assert.equal(reason.code, "claim_lost");
  assert.equal(h.server.routes("complete").length, 0);
  assert.deepEqual(claimsOf(h.events, "lost"), [s.claim]);
  assert.equal(h.server.routes("release").length, 0);
});

it("claim_lost on complete is dropped, not retried", async () => {
  const h = await harness({}, (w) => w.step("quick", () => "out"));
  h.server.respond = (call) => (call.route === "complete" ? problem(409, "claim_lost", "task cancelled") : undefined);
  const s = step("quick", {});
  h.server.add(s);
  await until("the lost event", () => claimsOf(h.events, "lost").length === 1);
  await h.worker.stop();
  assert.equal(h.server.routes("complete", s.claim).length, 1);
  assert.deepEqual(claimsOf(h.events, "completed"), []);
});

it("complete is retried after 503 and a dropped connection", async () => {
  const h = await harness({}, (w) => w.step("quick", () => ({ ok: true })));
  h.server.respond = (call) => {
    if (call.route !== "complete") return undefined;
    const n = h.server.routes("complete").length;
    return n === 1 ? problem(503, "unavailable", "db down", { "retry-after": "0" }) : n === 2 ? "drop" : undefined;
  };
  const s = step("quick", {});
  h.server.add(s);
  await until("the completed event", () => claimsOf(h.events, "completed").length === 1);
  const completes = h.server.routes("complete", s.claim);
  assert.equal(completes.length, 3);
  for (const c of completes) assert.deepEqual(c.body, { output: { ok: true } });
});

it("an output over the server's limit fails the step instead", async () => {
  const h = await harness({}, (w) => w.step("big", () => "x".repeat(100)));
  h.server.respond = (call) => (call.route === "complete" ? problem(413, "payload_too_large", "output over 1 MiB") : undefined);
  const s = step("big", {});
  h.server.add(s);
  await until("the failure", () => h.server.routes("fail").length === 1);
  assert.deepEqual(h.server.routes("fail", s.claim)[0].body.error, {
    message: "the step's output is larger than the server accepts",
    type: "PayloadTooLarge",
    kind: "PayloadTooLarge",
    status: 413,
    class: "",
  });
});

it("a graceful stop aborts the long poll, lets quick steps finish and releases the rest", async () => {
  const stopping = gate();
  let slowReason: unknown;
  const h = await harness({ concurrency: 3, pollWaitSeconds: 20, drainTimeoutMs: 200 }, (w) =>
    w
      .step("slow", async (_input, ctx) => {
        await aborted(ctx.signal);
        slowReason = ctx.signal.reason;
        return "unfinished";
      })
      .step("quick", async () => {
        await stopping.promise;
        return "finished";
      }),
  );
  const slow = step("slow", {});
  const quick = step("quick", {});
  h.server.add(slow, quick);
  await until("a third, waiting claim", () => h.server.routes("claim").length === 2);
  const stopped = h.worker.stop();
  stopping.open();
  await stopped;
  await h.run;

  await until("the long poll to hang up", () => h.server.routes("claim")[1].aborted === true);
  assert.deepEqual(h.server.routes("complete").map((c) => [c.claim, c.body]), [[quick.claim, { output: "finished" }]]);
  assert.deepEqual(h.server.routes("release").map((c) => [c.claim, c.body]), [[slow.claim, {}]]);
  assert.ok(slowReason instanceof StepAbortedError);
  assert.equal(slowReason.code, "stopping");
  assert.deepEqual(claimsOf(h.events, "released"), [slow.claim]);
  assert.equal(h.server.routes("fail").length, 0);
});

it("a second stop releases running steps without waiting out the drain", async () => {
  const h = await harness({ drainTimeoutMs: 60_000 }, (w) => w.step("slow", (_input, ctx) => aborted(ctx.signal)));
  const s = step("slow", {});
  h.server.add(s);
  await until("the claim", () => claimsOf(h.events, "claimed").length === 1);
  void h.worker.stop();
  await h.worker.stop();
  assert.deepEqual(h.server.routes("release").map((c) => c.claim), [s.claim]);
});

it("a 401 on claim rejects run() with the problem's code and detail", async () => {
  const h = await harness({}, (w) => w.step("any", () => null));
  h.server.respond = (call) => (call.route === "claim" ? problem(401, "unauthenticated", "unknown token") : undefined);
  await assert.rejects(h.run, (err: unknown) => {
    assert.ok(err instanceof WorkerError);
    assert.deepEqual([err.status, err.code, err.detail], [401, "unauthenticated", "unknown token"]);
    return true;
  });
  assert.equal(h.server.routes("claim").length, 1);
});

it("claim retries a 503 and a dropped connection, then works", async () => {
  const h = await harness({}, (w) => w.step("quick", () => "ok"));
  h.server.respond = (call) => {
    if (call.route !== "claim") return undefined;
    const n = h.server.routes("claim").length;
    return n === 1 ? problem(503, "unavailable", "db down", { "retry-after": "0" }) : n === 2 ? "drop" : undefined;
  };
  const s = step("quick", {});
  h.server.add(s);
  await until("the outcome", () => h.server.routes("complete").length === 1);
  assert.ok(h.server.routes("claim").length >= 3);
  assert.deepEqual(h.server.routes("complete", s.claim)[0].body, { output: "ok" });
  assert.ok(h.logs.some((l) => l.startsWith("claim failed")));
});

/** The chunks of a claim's stream calls, one per call as the worker sends them. */
const chunksOf = (server: FakeServer, claim?: string) =>
  server.routes("stream", claim).map((c) => {
    assert.equal(c.body.chunks.length, 1);
    return c.body.chunks[0];
  });

it("streams chunks to the step's claim, in order, before its outcome", async () => {
  const results: unknown[] = [];
  const h = await harness({}, (w) =>
    w.step("talk", async (_input, ctx) => {
      results.push(await ctx.stream("progress", { page: 3, stage: "read" }));
      await ctx.stream("tokens", "Hé");
      void ctx.stream("tokens", "llo"); // not awaited: still sent, after "Hé", before the outcome
      void ctx.stream("tokens", undefined);
      return "said";
    }),
  );
  const s = step("talk", {}, { claim: "c/2 ü?" });
  // "llo" is refused once: the null behind it waits for its retry.
  h.server.respond = (call) =>
    call.route === "stream" && call.body.chunks[0].data === "llo" && h.server.routes("stream").length === 3
      ? problem(503, "database_unavailable", "db down", { "retry-after": "0" })
      : undefined;
  h.server.add(s);
  await until("the completed event", () => claimsOf(h.events, "completed").length === 1);

  assert.deepEqual(results, [undefined]);
  assert.deepEqual(chunksOf(h.server, "c/2 ü?"), [
    { stream: "progress", data: { page: 3, stage: "read" } },
    { stream: "tokens", data: "Hé" },
    { stream: "tokens", data: "llo" },
    { stream: "tokens", data: "llo" },
    { stream: "tokens", data: null },
  ]);
  assert.deepEqual(
    h.server.calls.filter((c) => c.claim === s.claim && c.route !== "heartbeat").map((c) => c.route),
    ["stream", "stream", "stream", "stream", "stream", "complete"],
  );
  assert.deepEqual(h.server.routes("complete", s.claim)[0].body, { output: "said" });
});

it("stream retries a 503 and a dropped connection", async () => {
  const h = await harness({}, (w) =>
    w.step("talk", async (_input, ctx) => {
      await ctx.stream("progress", 1);
      return "ok";
    }),
  );
  h.server.respond = (call) => {
    if (call.route !== "stream") return undefined;
    const n = h.server.routes("stream").length;
    return n === 1 ? problem(503, "database_unavailable", "db down", { "retry-after": "0" }) : n === 2 ? "drop" : undefined;
  };
  const s = step("talk", {});
  h.server.add(s);
  await until("the completed event", () => claimsOf(h.events, "completed").length === 1);
  assert.deepEqual(chunksOf(h.server, s.claim), Array(3).fill({ stream: "progress", data: 1 }));
  assert.deepEqual(h.server.routes("complete", s.claim)[0].body, { output: "ok" });
});

it("claim_lost on stream rejects with StepAbortedError, aborts the step and sends no outcome", async () => {
  const seen: Record<string, { first: unknown; again: unknown; reason: unknown }> = {};
  const h = await harness({ concurrency: 2 }, (w) =>
    w.step("talk", async (input: { rethrow: boolean }, ctx) => {
      const first = await ctx.stream("progress", 1).catch((err) => err);
      const again = await ctx.stream("progress", 2).catch((err) => err); // no request: the claim is gone
      seen[ctx.claim] = { first, again, reason: ctx.signal.reason };
      if (input.rethrow) throw first;
      return "too late";
    }),
  );
  h.server.respond = (call) => (call.route === "stream" ? problem(409, "claim_lost", "task cancelled") : undefined);
  const caught = step("talk", { rethrow: false });
  const thrown = step("talk", { rethrow: true });
  h.server.add(caught, thrown);
  await until("two lost events", () => claimsOf(h.events, "lost").length === 2);
  await h.worker.stop();

  for (const s of [caught, thrown]) {
    const { first, again, reason } = seen[s.claim];
    for (const err of [first, again, reason]) {
      assert.ok(err instanceof StepAbortedError, String(err));
      assert.equal(err.code, "claim_lost");
    }
    assert.equal(h.server.routes("stream", s.claim).length, 1);
  }
  assert.deepEqual(claimsOf(h.events, "lost").sort(), [caught.claim, thrown.claim].sort());
  for (const route of ["complete", "fail", "release"] as const) assert.equal(h.server.routes(route).length, 0, route);
});

it("a 413 on stream rejects with a PermanentError that fails the step", async () => {
  let rejected: unknown;
  const h = await harness({}, (w) =>
    w.step("talk", async (_input, ctx) => {
      await ctx.stream("tokens", "more").catch((err) => {
        rejected = err;
        throw err;
      });
      return "unreachable";
    }),
  );
  h.server.respond = (call) => (call.route === "stream" ? problem(413, "payload_too_large", "the claim's chunks are over 32 MiB") : undefined);
  const s = step("talk", {});
  h.server.add(s);
  await until("the failure", () => h.server.routes("fail").length === 1);

  assert.ok(rejected instanceof PermanentError);
  assert.equal(h.server.routes("stream", s.claim).length, 1); // not retried
  assert.deepEqual(h.server.routes("fail", s.claim)[0].body.error, {
    message: "cairn: stream tokens: the claim's chunks are over 32 MiB",
    type: "PermanentError",
    class: "permanent",
    kind: "PayloadTooLarge",
    status: 413,
  });
  assert.equal(h.server.routes("complete").length, 0);
});

it("a bad stream name or an oversize chunk rejects without a request", async () => {
  const bad: [string, unknown][] = [
    ["", 1],
    ["has space", 1],
    ["tab\t", 1],
    ["nul\u0000", 1],
    ["x".repeat(101), 1],
    ["é".repeat(51), 1], // 51 characters, 102 bytes
    ["lone\ud800", 1],
    [42 as unknown as string, 1],
    ["big", "x".repeat(65535)], // 65537 bytes of JSON
    ["big", "é".repeat(32768)], // 32770 characters, 65538 bytes of UTF-8
  ];
  const good: [string, unknown][] = [
    ["ü".repeat(50), 1], // 100 bytes
    ["a/b:c-ü.€", { ok: true }],
    ["big", "x".repeat(65534)], // 65536 bytes
  ];
  let ctx: StepContext | undefined;
  const outcomes: unknown[] = [];
  const h = await harness({}, (w) =>
    w.step("talk", async (_input, c) => {
      ctx = c;
      for (const [name, data] of [...bad, ...good]) outcomes.push(await c.stream(name, data).catch((err) => err));
      const cycle: Record<string, unknown> = {};
      cycle.self = cycle;
      outcomes.push(await c.stream("cycle", cycle).catch((err) => err));
      return "done";
    }),
  );
  const s = step("talk", {});
  h.server.add(s);
  await until("the completed event", () => claimsOf(h.events, "completed").length === 1);

  bad.forEach(([name], i) => {
    const err = outcomes[i];
    assert.ok(err instanceof PermanentError, `${JSON.stringify(name)}: ${err}`);
    assert.equal(err.kind, i < 8 ? "InvalidStreamName" : "PayloadTooLarge");
    assert.match(err.message, i < 8 ? /printable UTF-8, no spaces/ : /over the limit of 65536/);
  });
  assert.deepEqual(outcomes.slice(bad.length, -1), [undefined, undefined, undefined]);
  assert.ok(outcomes.at(-1) instanceof TypeError); // JSON.stringify's own error
  assert.deepEqual(
    chunksOf(h.server, s.claim).map((c) => c.stream),
    good.map(([name]) => name),
  );

  // After the outcome the step's streams are closed: a late chunk is refused here too.
  assert.ok(ctx);
  await assert.rejects(ctx.stream("progress", 1), /the step has returned/);
  assert.equal(h.server.routes("stream").length, good.length);
});
