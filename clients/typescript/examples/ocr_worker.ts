/**
 * A demo OCR worker, also driven by the Go integration tests.
 *
 *   node clients/typescript/dist/examples/ocr_worker.js --url http://localhost:8080 \
 *     --queue ocr --concurrency 2 --worker-id ts-1
 *
 * The token comes from CAIRN_TOKEN. stdout carries one JSON line per event
 * (ready, claimed, completed, failed, released, lost) for a test to read;
 * logs go to stderr. SIGTERM or SIGINT stops it gracefully. Each page read
 * writes a progress chunk ({done, total, message}, as activities.Progress)
 * to the task's stream "progress".
 */
import { parseArgs } from "node:util";
import { PermanentError, TransientError, Worker, type StepContext } from "../src/index.js";

interface PageInput {
  page: number;
  delay_ms?: number;
  error?: null | "transient" | "permanent" | "unmarked";
}

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    queue: { type: "string", default: "ocr" },
    concurrency: { type: "string", default: "1" },
    "worker-id": { type: "string" },
    namespace: { type: "string" },
    "poll-wait-seconds": { type: "string", default: "20" },
    "drain-timeout-ms": { type: "string", default: "30000" },
  },
});

main().catch((err) => {
  process.stderr.write(`ocr_worker: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});

async function main(): Promise<void> {
  if (typeof values.url !== "string") {
    throw new Error("usage: ocr_worker --url URL [--queue ocr] [--concurrency N] [--worker-id ID] [--namespace NS]");
  }
  const worker = new Worker({
    url: values.url,
    queue: String(values.queue),
    token: process.env.CAIRN_TOKEN || undefined,
    namespace: values.namespace as string | undefined,
    workerId: values["worker-id"] as string | undefined,
    concurrency: Number(values.concurrency),
    pollWaitSeconds: Number(values["poll-wait-seconds"]),
    drainTimeoutMs: Number(values["drain-timeout-ms"]),
    onEvent: (event) => process.stdout.write(JSON.stringify(event) + "\n"),
  });

  worker.step("ocr.page", async (input: PageInput, ctx: StepContext) => {
    await pause(input.delay_ms ?? 0, ctx.signal);
    const page = input.page;
    switch (input.error) {
      case "transient":
        throw new TransientError("ocr backend unavailable", { kind: "Unavailable", status: 503, attributes: { page: String(page) } });
      case "permanent":
        throw new PermanentError("page is not an image", { kind: "BadInput" });
      case "unmarked":
        throw new TypeError("unreadable page");
    }
    await ctx.stream("progress", { done: 1, total: 1, message: `read page ${page}` }); // as activities.Progress
    return { page, text: `text of page ${page}`, worker: worker.workerId };
  });
  worker.step("noop", (input: unknown) => input);

  await worker.run();
}

/** Waits ms, or less if the step's signal aborts (cancel, lost claim, stop). */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
