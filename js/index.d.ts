// Types for `sluice`: the engine in-process, `gate.fetch`, and the fake API.

/** What the model is told about one call. */
export interface OutcomeJSON {
  status: "ok" | "rate_limited" | "quota_exhausted" | "timed_out" | "error";
  http_status?: number;
  body?: unknown;
  scope?: string;
  reason?: string;
  retry_after_ms?: number;
  window?: string;
  hint?: string;
  after_ms?: number;
  message?: string;
}

/** The model-facing result of one call; fields that do not apply are null. */
export declare class Outcome {
  private constructor();
  readonly status: OutcomeJSON["status"];
  /** When to come back (rate_limited, quota_exhausted). */
  readonly retryAfterMs: number | null;
  /** Why it was deferred, e.g. "throttled". */
  readonly reason: string | null;
  /** The scope (bucket) that deferred it, e.g. "api_key". */
  readonly scope: string | null;
  /** One sentence the model can act on. */
  readonly hint: string | null;
  /** The upstream HTTP status, when there was a response. */
  readonly httpStatus: number | null;
  /** The upstream body of an `ok` outcome, parsed when it is JSON. */
  readonly body: unknown;
  /** What went wrong, for an `error`. */
  readonly message: string | null;
  /** The deadline a `timed_out` call had. */
  readonly afterMs: number | null;
  /** The window that deferred it, e.g. "3/1s". */
  readonly window: string | null;
  /** True when `status` is "ok". */
  readonly ok: boolean;
  /** The sidecar's JSON exactly: snake_case keys, in its order. */
  toJSON(): OutcomeJSON;
}

/** A configuration sluice refuses. */
export declare class ConfigError extends Error {
  /** The field at fault, e.g. `credentials.support.rate`. */
  readonly field: string | null;
}

/** sluice answered a `gate.fetch` request instead of the server. */
export declare class SluiceDeferred extends Error {
  readonly outcome: Outcome;
  readonly retryAfterMs: number | null;
}

/** Options of one call. */
export interface CallOptions {
  /** The call's deadline, overriding the tool's. */
  deadlineMs?: number;
  /** Cancels the call: it rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** One call for `turn.execute`. */
export interface CallSpec {
  tool: string;
  args?: Record<string, unknown>;
  deadlineMs?: number;
}

/** A function tool's settings. */
export interface ToolOptions {
  /** The credential its calls spend. */
  credential: string;
  /** A read: coalesced and cached within a turn, retried after server errors. */
  read?: boolean;
  /** Safe to repeat after a failure that may have reached the server. */
  idempotent?: boolean;
  /** The tool's deadline. */
  deadlineMs?: number;
}

/** One model step's calls: they share single-flight and a read cache. */
export declare class Turn {
  private constructor();
  call(tool: string, args?: Record<string, unknown>, options?: CallOptions): Promise<Outcome>;
  execute(calls: CallSpec[], options?: { signal?: AbortSignal }): Promise<Outcome[]>;
  /** Upstream requests (attempts) this turn has caused so far. */
  readonly upstreamRequests: number;
}

/** A fetch-compatible function. */
export type Fetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** sluice's engine over a configuration (sluice.toml's schema). */
export declare class Gate {
  /** @param config an object with sluice.toml's schema, or TOML text. Throws ConfigError. */
  constructor(config: Record<string, unknown> | string);
  readonly credentials: readonly string[];
  /** Configured and function tools' names. */
  readonly tools: string[];
  turn(): Turn;
  /** One call in a turn of its own. */
  call(tool: string, args?: Record<string, unknown>, options?: CallOptions): Promise<Outcome>;
  /** Calls in flight on a credential's own scope. */
  inFlight(credential: string): number;
  /** Registers `fn` as the tool `name`; it may return a fetch Response or any JSON value. */
  tool<F extends (args: any) => unknown>(name: string, options: ToolOptions, fn: F): F;
  /**
   * A fetch whose requests are calls on `credential`, sent from Rust when
   * the engine grants them. Rejects with SluiceDeferred when sluice answers.
   */
  fetch(credential: string, options?: { deadlineMs?: number }): Fetch;
}

/** One request the fake received. */
export interface FakeRequest {
  method: string;
  path: string;
  status: number;
  t_ms: number;
  end_ms: number;
  [field: string]: unknown;
}

/** The throttling fake API, served in-process on loopback. */
export declare class FakeApi {
  private constructor();
  static start(options?: {
    /** Requests allowed in any rolling window; none means unlimited. */
    allowed?: number;
    /** A fixed Retry-After, in seconds. */
    retryAfterS?: number;
    /** The window, in seconds (default retryAfterS, else 1). */
    windowS?: number;
    /** Each answer's latency, in seconds. */
    latencyS?: number;
    /** The rate-limit header style (default "retry-after"). */
    headers?: string;
  }): Promise<FakeApi>;
  /** `http://127.0.0.1:PORT`. */
  readonly url: string;
  /** When each request arrived, in seconds since the fake started, in order. */
  requestStarts(): number[];
  /** Every request so far, in order. */
  requests(): FakeRequest[];
  /** Forgets every request and every window. */
  reset(): void;
  /** Stops serving. */
  close(): void;
}
