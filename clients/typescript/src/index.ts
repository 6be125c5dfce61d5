/**
 * A worker for cairn's remote steps: it claims steps from a queue over HTTP,
 * runs them with the handlers registered by `step`, heartbeats them and
 * reports their outcome. The protocol is docs/remote-steps-protocol.md.
 */
import { hostname } from "node:os";
import { isClaimLost, isRetryable, PermanentError, problemError, shrinkError, StepAbortedError, toWireError, WorkerError } from "./errors.js";
import { chunkBody } from "./stream.js";
import { linkedController, retryDelay, sleep } from "./timing.js";

export { PermanentError, StepAbortedError, TransientError, WorkerError } from "./errors.js";

/** What a step handler gets besides its input. */
export interface StepContext {
  readonly taskId: string;
  readonly namespace: string;
  /** The step's position in the workflow's history. */
  readonly position: number;
  readonly name: string;
  /** Counts from 1. */
  readonly attempt: number;
  /** The opaque claim token that fences this run of the step. */
  readonly claim: string;
  /** When this run must be over (start_to_close_ms), if the workflow set a limit. */
  readonly deadline?: Date;
  /**
   * Aborted when the workflow is cancelled, the claim is lost, or the worker
   * stops before the step ends; `signal.reason` is a StepAbortedError.
   */
  readonly signal: AbortSignal;
  /** Heartbeats now. Never throws: what it learns shows in `signal`. */
  heartbeat(): Promise<void>;
  /**
   * Writes data (any JSON; undefined as null) as one chunk of the task's stream `name`, after
   * the step's earlier chunks and before its outcome. Rejects with a PermanentError, sending
   * nothing, for a name not 1–100 bytes of printable UTF-8 without spaces or a chunk over 64 KiB
   * of JSON, and on 413 (the claim's chunks over 32 MiB); with a StepAbortedError when the claim
   * lost the step ("claim_lost": `signal` aborts, the outcome is dropped) or was released.
   * Network errors, 429 and 5xx are retried, so a chunk whose answer was lost may be written twice.
   */
  stream(name: string, data: unknown): Promise<void>;
}

export type StepHandler = (input: any, ctx: StepContext) => unknown;

export interface Logger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** One line of what the worker does, for progress output and tests. */
export type WorkerEvent =
  | { event: "ready" }
  | { event: "claimed"; claim: string; name: string; position: number; attempt: number; task_id: string }
  | { event: "completed" | "failed" | "released" | "lost"; claim: string };

export interface WorkerOptions {
  /** The cairn server, e.g. http://localhost:8080. */
  url: string;
  queue: string;
  /** Sent as `Authorization: Bearer`; a token with the `work` role. */
  token?: string;
  /** Sent as `Cairn-Namespace`; default: the token's first. */
  namespace?: string;
  /** Recorded with each outcome (1–200 characters); default host:pid. */
  workerId?: string;
  /** How many steps run at once. Default 1. */
  concurrency?: number;
  /** The claim long poll, 0–60 s. Default 20. */
  pollWaitSeconds?: number;
  /** How long a graceful stop lets running steps finish before releasing them. Default 30000. */
  drainTimeoutMs?: number;
  /** Stop gracefully on SIGTERM and SIGINT while running. Default true. */
  handleSignals?: boolean;
  /** Default: lines on stderr, so stdout stays the program's own. */
  logger?: Logger;
  onEvent?: (event: WorkerEvent) => void;
}

/** A step as the claim answer gives it. */
interface ClaimedStep {
  claim: string;
  task_id: string;
  namespace: string;
  position: number;
  name: string;
  attempt: number;
  input: unknown;
  heartbeat_timeout_ms: number;
  start_to_close_ms: number;
}

/** The worker's bookkeeping for one claimed step. */
interface Running {
  step: ClaimedStep;
  abort: AbortController;
  phase: "running" | "reporting";
  lost: boolean;
  released: boolean;
  heartbeat?: Promise<void>;
  streaming?: Promise<void>; // the last chunk's delivery, settled or not
  settled?: Promise<void>;
}

const REQUEST_TIMEOUT_MS = 30_000;
const DELIVERY_ATTEMPTS = 5;
// The claim's status codes that retrying cannot fix: they end run().
const FATAL_CLAIM_STATUS = new Set([400, 401, 403]);

export class Worker {
  readonly workerId: string;
  private readonly opts: Required<Pick<WorkerOptions, "concurrency" | "pollWaitSeconds" | "drainTimeoutMs" | "handleSignals">>;
  private readonly handlers = new Map<string, StepHandler>();
  private readonly running = new Map<string, Running>();
  private readonly headers: Record<string, string>;
  private readonly base: string;
  private readonly log: Logger;
  private readonly stopCtl = new AbortController(); // aborts the long poll and backoff sleeps
  private readonly forceCtl = new AbortController(); // a second stop() cuts the drain short
  private wakeUp?: () => void;
  private runPromise?: Promise<void>;

  constructor(private readonly options: WorkerOptions) {
    this.workerId = options.workerId ?? `${hostname()}:${process.pid}`;
    this.opts = {
      concurrency: options.concurrency ?? 1,
      pollWaitSeconds: options.pollWaitSeconds ?? 20,
      drainTimeoutMs: options.drainTimeoutMs ?? 30_000,
      handleSignals: options.handleSignals ?? true,
    };
    if (!Number.isInteger(this.opts.concurrency) || this.opts.concurrency < 1) throw new RangeError("concurrency must be an integer ≥ 1");
    const { pollWaitSeconds: wait, drainTimeoutMs: drain } = this.opts;
    if (!Number.isInteger(wait) || wait < 0 || wait > 60) throw new RangeError("pollWaitSeconds must be an integer 0–60");
    if (!(drain >= 0)) throw new RangeError("drainTimeoutMs must be ≥ 0");
    if (this.workerId.length < 1 || this.workerId.length > 200) throw new RangeError("workerId must be 1–200 characters");
    this.base = `${options.url.replace(/\/+$/, "")}/v1/remote-steps`;
    this.headers = { "content-type": "application/json", accept: "application/json, application/problem+json" };
    if (options.token) this.headers.authorization = `Bearer ${options.token}`;
    if (options.namespace) this.headers["cairn-namespace"] = options.namespace;
    this.log = options.logger ?? stderrLogger;
  }

  /** Registers the handler for steps of this name; its result must be JSON-serialisable. */
  step(name: string, handler: StepHandler): this {
    this.handlers.set(name, handler);
    return this;
  }

  /**
   * Claims and runs steps until stop() (or SIGTERM/SIGINT), then drains.
   * Rejects with a WorkerError when the server refuses the claim for good (400, 401, 403).
   */
  run(): Promise<void> {
    if (this.runPromise) return Promise.reject(new Error("cairn: run() was already called"));
    if (this.handlers.size === 0) return Promise.reject(new Error("cairn: register a step before run()"));
    this.runPromise = this.loop();
    return this.runPromise;
  }

  /**
   * Stops claiming and drains: running steps get drainTimeoutMs to finish,
   * then are released. A second call releases them at once. Resolves when
   * run() is over, whether or not it failed.
   */
  stop(): Promise<void> {
    if (this.stopCtl.signal.aborted) this.forceCtl.abort();
    this.stopCtl.abort();
    this.wake();
    return (this.runPromise ?? Promise.resolve()).catch(() => {});
  }

  private get stopping(): boolean {
    return this.stopCtl.signal.aborted;
  }

  private async loop(): Promise<void> {
    const unhook = this.opts.handleSignals ? this.hookSignals() : () => {};
    try {
      this.emit({ event: "ready" });
      await this.claimLoop();
    } catch (err) {
      this.stopCtl.abort(); // a fatal claim error still drains what runs
      throw err;
    } finally {
      await this.drain();
      unhook();
    }
  }

  private async claimLoop(): Promise<void> {
    let failures = 0;
    while (!this.stopping) {
      const free = this.opts.concurrency - this.running.size;
      if (free <= 0) {
        await new Promise<void>((resolve) => (this.wakeUp = resolve));
        continue;
      }
      let steps: ClaimedStep[];
      try {
        steps = await this.claim(Math.min(free, 100));
        failures = 0;
      } catch (err) {
        if (this.stopping) return;
        if (err instanceof WorkerError && FATAL_CLAIM_STATUS.has(err.status)) throw err;
        const delay = retryDelay(err, ++failures, 500, 30_000);
        this.log.warn("claim failed; retrying", { error: String(err), delay_ms: delay });
        await sleep(delay, this.stopCtl.signal);
        continue;
      }
      // A claim answered just as stop() ran: hand its steps straight back.
      if (this.stopping) await Promise.all(steps.map((s) => this.release(this.track(s))));
      else for (const s of steps) this.start(s);
    }
  }

  private async claim(max: number): Promise<ClaimedStep[]> {
    const body = {
      queue: this.options.queue,
      worker: this.workerId,
      names: [...this.handlers.keys()],
      max,
      wait_seconds: this.opts.pollWaitSeconds,
    };
    const timeout = this.opts.pollWaitSeconds * 1000 + REQUEST_TIMEOUT_MS;
    const res = await this.call("/claim", JSON.stringify(body), this.stopCtl.signal, timeout);
    return Array.isArray(res?.steps) ? res.steps : [];
  }

  private track(step: ClaimedStep): Running {
    const r: Running = { step, abort: new AbortController(), phase: "running", lost: false, released: false };
    this.running.set(step.claim, r);
    return r;
  }

  private start(step: ClaimedStep): void {
    const r = this.track(step);
    const { claim, name, position, attempt, task_id } = step;
    this.emit({ event: "claimed", claim, name, position, attempt, task_id });
    r.settled = this.execute(r)
      .catch((err) => this.log.error("step bookkeeping failed", { claim, error: String(err) }))
      .finally(() => {
        this.running.delete(claim);
        this.wake();
      });
  }

  /** Runs the handler while heartbeating, then reports its outcome. */
  private async execute(r: Running): Promise<void> {
    const { step } = r;
    const every = Math.max(10, (step.heartbeat_timeout_ms > 0 ? step.heartbeat_timeout_ms : 30_000) / 3);
    const timer = setInterval(() => void this.heartbeat(r), every);
    let route: "complete" | "fail";
    let body: string;
    try {
      const output = await this.invoke(r);
      route = "complete";
      body = JSON.stringify({ output: output ?? null }); // throws on what JSON cannot hold
    } catch (err) {
      route = "fail";
      body = JSON.stringify({ error: toWireError(err) });
    } finally {
      await r.streaming; // chunks the handler did not await still go before the outcome
      clearInterval(timer);
    }
    r.phase = "reporting";
    if (r.lost || r.released) return; // the outcome would be refused, or the step is back on its queue
    await this.report(r, route, body);
  }

  private async invoke(r: Running): Promise<unknown> {
    const { step } = r;
    const handler = this.handlers.get(step.name);
    if (!handler) throw Object.assign(new Error(`no handler for step ${step.name}`), { kind: "UnknownStep" });
    const ctx: StepContext = {
      taskId: step.task_id,
      namespace: step.namespace,
      position: step.position,
      name: step.name,
      attempt: step.attempt,
      claim: step.claim,
      deadline: step.start_to_close_ms > 0 ? new Date(Date.now() + step.start_to_close_ms) : undefined,
      signal: r.abort.signal,
      heartbeat: () => this.heartbeat(r),
      stream: (name, data) => this.stream(r, name, data),
    };
    return handler(step.input, ctx);
  }

  /** One heartbeat at a time per step; a manual call joins the one in flight. */
  private heartbeat(r: Running): Promise<void> {
    if (r.phase !== "running" || r.lost || r.released) return Promise.resolve();
    r.heartbeat ??= this.sendHeartbeat(r).finally(() => (r.heartbeat = undefined));
    return r.heartbeat;
  }

  private async sendHeartbeat(r: Running): Promise<void> {
    try {
      const res = await this.call(this.path(r, "heartbeat"), "{}");
      if (res?.cancel_requested === true) this.abortStep(r, "cancel_requested");
    } catch (err) {
      if (isClaimLost(err)) this.markLost(r);
      else this.log.warn("heartbeat failed", { claim: r.step.claim, error: String(err) });
    }
  }

  /** Queues one chunk behind the step's earlier ones. */
  private async stream(r: Running, name: string, data: unknown): Promise<void> {
    const body = chunkBody(name, data); // checked and encoded at the call, as data is then
    const sent = (r.streaming ?? Promise.resolve()).then(() => this.sendChunk(r, name, body));
    r.streaming = sent.catch(() => {}); // the handler gets the rejection
    return sent;
  }

  private async sendChunk(r: Running, name: string, body: string): Promise<void> {
    if (r.lost || r.released) throw new StepAbortedError(r.lost ? "claim_lost" : "stopping");
    if (r.phase !== "running") throw new Error(`cairn: stream ${name}: the step has returned; its streams are closed`);
    try {
      await this.deliver(r, "stream", body);
    } catch (err) {
      if (isClaimLost(err)) {
        this.markLost(r);
        throw new StepAbortedError("claim_lost");
      }
      if (!(err instanceof WorkerError && err.status === 413)) throw err;
      throw new PermanentError(`cairn: stream ${name}: ${err.detail || "over the claim's limit"}`, { kind: "PayloadTooLarge", status: 413 });
    }
  }

  /** Sends complete or fail; a 413 becomes a smaller fail, once. */
  private async report(r: Running, route: "complete" | "fail", body: string, shrunk = false): Promise<void> {
    try {
      await this.deliver(r, route, body);
      this.emit({ event: route === "complete" ? "completed" : "failed", claim: r.step.claim });
    } catch (err) {
      if (isClaimLost(err)) return this.markLost(r);
      if (err instanceof WorkerError && err.status === 413 && !shrunk) {
        return this.report(r, "fail", JSON.stringify({ error: shrinkError(route, body) }), true);
      }
      this.log.error(`could not ${route} the step; its lease will run out`, { claim: r.step.claim, error: String(err) });
    }
  }

  /** Hands a step back to its queue and aborts its handler, whose outcome is then dropped. */
  private async release(r: Running): Promise<void> {
    r.released = true;
    this.abortStep(r, "stopping");
    try {
      await this.deliver(r, "release", "{}");
      this.emit({ event: "released", claim: r.step.claim });
    } catch (err) {
      if (isClaimLost(err)) this.markLost(r);
      else this.log.error("could not release the step", { claim: r.step.claim, error: String(err) });
    } finally {
      this.running.delete(r.step.claim);
    }
  }

  /** Posts an outcome, retrying network errors, 429 and 5xx: the server takes each once per claim. */
  private async deliver(r: Running, route: string, body: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.call(this.path(r, route), body);
        return;
      } catch (err) {
        if (!isRetryable(err) || attempt >= DELIVERY_ATTEMPTS) throw err;
        const delay = retryDelay(err, attempt, 200, 5_000);
        this.log.warn(`${route} failed; retrying`, { claim: r.step.claim, error: String(err), delay_ms: delay });
        await sleep(delay);
      }
    }
  }

  /** Waits up to drainTimeoutMs for running steps, then releases the unfinished. */
  private async drain(): Promise<void> {
    const settled = [...this.running.values()].map((r) => r.settled);
    const wait = linkedController(this.forceCtl.signal);
    await Promise.race([Promise.all(settled), sleep(this.opts.drainTimeoutMs, wait.signal)]);
    wait.abort(); // lets the drain timer go
    const all = [...this.running.values()];
    await Promise.all(all.filter((r) => r.phase === "running").map((r) => this.release(r)));
    // Steps already reporting finish their (bounded) delivery.
    await Promise.all(all.filter((r) => r.phase === "reporting").map((r) => r.settled));
  }

  private markLost(r: Running): void {
    if (r.lost) return;
    r.lost = true;
    this.abortStep(r, "claim_lost");
    this.log.warn("claim lost; the step's outcome will not be recorded", { claim: r.step.claim });
    this.emit({ event: "lost", claim: r.step.claim });
  }

  private abortStep(r: Running, code: StepAbortedError["code"]): void {
    if (!r.abort.signal.aborted) r.abort.abort(new StepAbortedError(code));
  }

  private path(r: Running, route: string): string {
    return `/${encodeURIComponent(r.step.claim)}/${route}`;
  }

  /** One POST; an answer other than 2xx throws a WorkerError, a network failure throws as fetch does. */
  private async call(path: string, body: string, stop?: AbortSignal, timeoutMs = REQUEST_TIMEOUT_MS): Promise<any> {
    const link = linkedController(stop);
    const timer = setTimeout(() => link.abort(new Error(`cairn: ${path} timed out after ${timeoutMs} ms`)), timeoutMs);
    try {
      const res = await fetch(this.base + path, { method: "POST", headers: this.headers, body, signal: link.signal });
      const text = await res.text();
      if (!res.ok) throw problemError(res.status, text, res.headers.get("retry-after"));
      return text ? JSON.parse(text) : {};
    } finally {
      clearTimeout(timer);
      link.abort(); // unhooks it from stop, which outlives many calls
    }
  }

  private hookSignals(): () => void {
    const onSignal = () => {
      this.log.info("signal received; stopping (again to release running steps at once)");
      void this.stop();
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    return () => {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    };
  }

  private wake(): void {
    const wakeUp = this.wakeUp;
    this.wakeUp = undefined;
    wakeUp?.();
  }

  private emit(event: WorkerEvent): void {
    try {
      this.options.onEvent?.(event);
    } catch (err) {
      this.log.warn("onEvent threw", { error: String(err) });
    }
  }
}

function stderrLine(level: string): Logger["info"] {
  return (msg, fields) => console.error(`cairn worker: ${level}${msg}`, ...(fields ? [fields] : []));
}
const stderrLogger: Logger = { info: stderrLine(""), warn: stderrLine("warning: "), error: stderrLine("error: ") };
