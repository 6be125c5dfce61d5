/** Stream chunks: the checks the server makes of one, and the stream call's body. */
import { PermanentError } from "./errors.js";

export const MAX_STREAM_NAME_BYTES = 100;
export const MAX_CHUNK_BYTES = 64 << 10;
// Go's unicode.IsPrint without the space: letters, marks, numbers, punctuation, symbols.
const STREAM_NAME = /^[\p{L}\p{M}\p{N}\p{P}\p{S}]+$/u;

const utf8Bytes = (s: string) => new TextEncoder().encode(s).length;

/**
 * The body of POST /v1/remote-steps/{claim}/stream for one chunk. A name or
 * chunk the server would refuse throws a PermanentError; data that JSON
 * cannot hold throws as JSON.stringify does; undefined is sent as null.
 */
export function chunkBody(name: string, data: unknown): string {
  if (typeof name !== "string" || !STREAM_NAME.test(name) || utf8Bytes(name) > MAX_STREAM_NAME_BYTES) {
    throw new PermanentError(`cairn: stream name ${JSON.stringify(name)}: use 1–${MAX_STREAM_NAME_BYTES} bytes of printable UTF-8, no spaces`, {
      kind: "InvalidStreamName",
    });
  }
  const json = JSON.stringify(data) ?? "null";
  const size = utf8Bytes(json);
  if (size > MAX_CHUNK_BYTES) {
    throw new PermanentError(`cairn: stream ${name}: a chunk of ${size} bytes is over the limit of ${MAX_CHUNK_BYTES}`, { kind: "PayloadTooLarge" });
  }
  return `{"chunks":[{"stream":${JSON.stringify(name)},"data":${json}}]}`;
}
