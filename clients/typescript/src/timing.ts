/** Waiting: backoff, interruptible sleeps and linked abort signals. */
import { WorkerError } from "./errors.js";

/** The server's Retry-After when it gave one, else capped exponential backoff with jitter. */
export function retryDelay(err: unknown, failures: number, baseMs: number, capMs: number): number {
  if (err instanceof WorkerError && err.retryAfterMs !== undefined) return Math.min(err.retryAfterMs, capMs);
  const ceiling = Math.min(capMs, baseMs * 2 ** (failures - 1));
  return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
}

/** Resolves after ms, or at once when signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * A controller that also aborts when parent does (AbortSignal.any is Node
 * 20.3+ only). Aborting it unhooks it, so a long-lived parent such as the
 * worker's stop signal does not collect a listener per request.
 */
export function linkedController(parent?: AbortSignal): AbortController {
  const ctl = new AbortController();
  if (!parent) return ctl;
  if (parent.aborted) {
    ctl.abort(parent.reason);
    return ctl;
  }
  const onParent = () => ctl.abort(parent.reason);
  parent.addEventListener("abort", onParent, { once: true });
  ctl.signal.addEventListener("abort", () => parent.removeEventListener("abort", onParent), { once: true });
  return ctl;
}
