/**
 * Errors: the two a step handler throws to classify its failure, the one a
 * worker meets when the server refuses a call, and their wire forms.
 */

interface Classification {
  /** What a workflow's retry policy reads as error.kind; default: the error's class name. */
  kind?: string;
  /** error.status for the policy, e.g. the HTTP status of the upstream failure. */
  status?: number;
  /** error.attrs for the policy; values are sent as strings. */
  attributes?: Record<string, unknown>;
}

/** The fields both classified errors carry. */
abstract class ClassifiedError extends Error {
  readonly kind?: string;
  readonly status?: number;
  readonly attributes?: Record<string, unknown>;
  constructor(message: string, opts: Classification = {}) {
    super(message);
    this.name = new.target.name;
    this.kind = opts.kind;
    this.status = opts.status;
    this.attributes = opts.attributes;
  }
}

/** A failure worth retrying: sent with class "transient". */
export class TransientError extends ClassifiedError {
  /** The least delay before the next attempt, e.g. a rate limit's Retry-After. */
  readonly retryAfterMs?: number;
  constructor(message: string, opts: Classification & { retryAfterMs?: number } = {}) {
    super(message, opts);
    this.retryAfterMs = opts.retryAfterMs;
  }
}

/** A failure that retrying cannot fix: sent with class "permanent". */
export class PermanentError extends ClassifiedError {}

/** An error answer from the server (application/problem+json). */
export class WorkerError extends Error {
  constructor(
    readonly status: number,
    /** The problem's code: invalid_request, unauthenticated, forbidden, claim_lost, … */
    readonly code: string,
    readonly detail: string,
    /** From Retry-After, when the server sent one. */
    readonly retryAfterMs?: number,
  ) {
    super(`cairn: ${status} ${code || "error"}: ${detail}`);
    this.name = "WorkerError";
  }
}

/** The reason a step's signal was aborted. */
export class StepAbortedError extends Error {
  constructor(readonly code: "cancel_requested" | "claim_lost" | "stopping") {
    super(`cairn: step aborted: ${code}`);
    this.name = "StepAbortedError";
  }
}

/** The protocol's `error` object for whatever a handler threw. */
export function toWireError(err: unknown): Record<string, unknown> {
  // Duck-typed, so that any error with a kind or status (an HTTP client's, say) informs the policy.
  const e = (typeof err === "object" && err !== null ? err : {}) as Record<string, any>;
  const type: string = err instanceof Error ? err.constructor.name || err.name : ((err as any)?.constructor?.name ?? typeof err);
  const message = err instanceof Error ? err.message : String(err);
  return {
    message: message || type,
    type,
    class: err instanceof TransientError ? "transient" : err instanceof PermanentError ? "permanent" : "",
    kind: typeof e.kind === "string" && e.kind ? e.kind : type,
    status: Number.isInteger(e.status) ? e.status : undefined,
    attributes: stringValues(e.attributes),
    retry_after_ms: err instanceof TransientError && err.retryAfterMs != null ? Math.max(0, Math.round(err.retryAfterMs)) : undefined,
  };
}

/** A smaller error for an outcome the server found too large (413), as the protocol asks. */
export function shrinkError(route: string, body: string): Record<string, unknown> {
  if (route === "complete") {
    return { message: "the step's output is larger than the server accepts", type: "PayloadTooLarge", kind: "PayloadTooLarge", status: 413, class: "" };
  }
  const { error } = JSON.parse(body);
  return { ...error, message: String(error.message).slice(0, 1000), attributes: undefined };
}

/** The WorkerError for a non-2xx answer. */
export function problemError(status: number, text: string, retryAfter: string | null): WorkerError {
  let p: { code?: unknown; detail?: unknown; title?: unknown };
  try {
    p = JSON.parse(text) ?? {};
  } catch {
    p = { detail: text.slice(0, 200) }; // a proxy's HTML page, say
  }
  const code = typeof p.code === "string" ? p.code : "";
  return new WorkerError(status, code, String(p.detail ?? p.title ?? ""), parseRetryAfter(retryAfter));
}

export function isClaimLost(err: unknown): boolean {
  return err instanceof WorkerError && (err.code === "claim_lost" || (err.status === 409 && !err.code));
}

/** Network errors and timeouts (anything not a WorkerError), 429 and 5xx may pass if tried again. */
export function isRetryable(err: unknown): boolean {
  return !(err instanceof WorkerError) || err.status === 429 || err.status >= 500;
}

function stringValues(attrs: unknown): Record<string, string> | undefined {
  if (typeof attrs !== "object" || attrs === null) return undefined;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined) out[k] = typeof v === "string" ? v : (safeJson(v) ?? String(v));
  }
  return out;
}

function safeJson(v: unknown): string | undefined {
  try {
    return JSON.stringify(v);
  } catch {
    return undefined; // a BigInt or a cycle
  }
}

/** Retry-After in seconds or as an HTTP date. */
function parseRetryAfter(value: string | null): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}
