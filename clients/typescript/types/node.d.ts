// The few Node built-ins this package uses, declared by hand so that the
// only dev dependency is typescript (no @types/node). fetch, AbortController
// and timers come from TypeScript's own "DOM" lib. Not shipped: nothing in
// the public API (dist/src/index.d.ts) refers to these.

declare const process: {
  readonly pid: number;
  readonly argv: string[];
  readonly env: Record<string, string | undefined>;
  exitCode?: number;
  readonly stdout: { write(chunk: string): boolean };
  readonly stderr: { write(chunk: string): boolean };
  on(event: "SIGTERM" | "SIGINT", listener: () => void): unknown;
  off(event: "SIGTERM" | "SIGINT", listener: () => void): unknown;
};

declare module "node:os" {
  export function hostname(): string;
}

declare module "node:util" {
  interface OptionSpec {
    type: "string" | "boolean";
    short?: string;
    default?: string | boolean;
  }
  export function parseArgs(config: {
    args?: string[];
    options: Record<string, OptionSpec>;
    strict?: boolean;
    allowPositionals?: boolean;
  }): { values: Record<string, string | boolean | undefined>; positionals: string[] };
}

declare module "node:http" {
  export interface IncomingMessage {
    method?: string;
    url?: string;
    headers: Record<string, string | string[] | undefined>;
    on(event: "data", listener: (chunk: Uint8Array) => void): this;
    on(event: "end", listener: () => void): this;
  }
  export interface ServerResponse {
    statusCode: number;
    readonly writableEnded: boolean;
    readonly socket: { destroy(): void } | null;
    setHeader(name: string, value: string | number): this;
    end(body?: string): this;
    on(event: "close", listener: () => void): this;
  }
  export interface Server {
    listen(port: number, host: string, callback: () => void): this;
    address(): { port: number } | string | null;
    close(callback?: (err?: Error) => void): this;
    closeAllConnections(): void;
  }
  export function createServer(handler: (req: IncomingMessage, res: ServerResponse) => void): Server;
}

declare module "node:test" {
  type TestFn = () => void | Promise<void>;
  export function test(name: string, fn: TestFn): Promise<void>;
  export function test(name: string, options: { timeout?: number }, fn: TestFn): Promise<void>;
  export function afterEach(fn: TestFn, options?: { timeout?: number }): void;
}

declare module "node:assert/strict" {
  function assert(value: unknown, message?: string): asserts value;
  namespace assert {
    function ok(value: unknown, message?: string): asserts value;
    function equal<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    function notEqual(actual: unknown, expected: unknown, message?: string): void;
    function deepEqual<T>(actual: unknown, expected: T, message?: string): asserts actual is T;
    function match(value: string, pattern: RegExp, message?: string): void;
    function rejects(
      block: Promise<unknown> | (() => Promise<unknown>),
      expected?: RegExp | object | ((err: unknown) => boolean),
      message?: string,
    ): Promise<void>;
  }
  export default assert;
}
