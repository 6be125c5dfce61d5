"""An OCR worker for the demo and the Go integration tests.

    CAIRN_TOKEN=... python3 clients/python/examples/ocr_worker.py \
        --url http://localhost:8080 --queue ocr --concurrency 2 --worker-id py-1

It prints one JSON line per event on stdout (ready, claimed, completed,
failed, released, lost); logs go to stderr. Each page read writes a
progress chunk ({done, total, message}, as activities.Progress) to the
task's stream "progress".
"""

import argparse
import json
import logging
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from cairn_worker import Permanent, Transient, Worker, WorkerError  # noqa: E402

_print_lock = threading.Lock()


def emit(event, fields):
    """One JSON line per event, flushed at once: the tests read stdout as it comes."""
    with _print_lock:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


def ocr_page(worker_id):
    def handler(input, ctx):
        page = input["page"]
        end = time.monotonic() + input.get("delay_ms", 0) / 1000
        # Sleep in slices so a cancel or a hard stop ends the wait early.
        while not ctx.cancelled.is_set() and time.monotonic() < end:
            ctx.cancelled.wait(min(0.05, max(0.0, end - time.monotonic())))
        error = input.get("error")
        if error == "transient":
            raise Transient("ocr backend unavailable", kind="Unavailable", status=503,
                            attributes={"page": str(page)})
        if error == "permanent":
            raise Permanent("page is not an image", kind="BadInput")
        if error == "unmarked":
            raise ValueError("unreadable page")
        ctx.stream("progress", {"done": 1, "total": 1, "message": f"read page {page}"})  # as activities.Progress
        return {"page": page, "text": f"text of page {page}", "worker": worker_id}
    return handler


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--queue", default="ocr")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--worker-id")
    p.add_argument("--namespace")
    p.add_argument("--poll-wait", type=int, default=20)
    p.add_argument("--drain-timeout", type=float, default=30.0)
    args = p.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    worker = Worker(args.url, args.queue, token=os.environ.get("CAIRN_TOKEN") or None,
                    namespace=args.namespace, worker_id=args.worker_id,
                    concurrency=args.concurrency, poll_wait=args.poll_wait,
                    drain_timeout=args.drain_timeout, on_event=emit)
    worker.register("ocr.page", ocr_page(worker.worker_id))
    worker.register("noop", lambda input, ctx: input)
    try:
        worker.run()
    except WorkerError as e:  # refused by the server (bad token, queue not allowed): do not restart blindly
        logging.error("worker stopped: %s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
