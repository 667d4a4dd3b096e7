// Types for `sluice/ai`: AI SDK tools through a gate.
import type { Gate } from "./index.js";

/** Which credential the tools spend, and how each may be retried. */
export interface GateToolsOptions {
  credential: string;
  /** Tools that only read: coalesced and cached within a step. */
  reads?: string[];
  /** Writes safe to repeat after a failure that may have reached the server. */
  idempotent?: string[];
  /** Each call's deadline. */
  deadlineMs?: number;
}

/**
 * The same tools, each call going through `gate`; a step's calls share a
 * turn. A call sluice does not answer `ok` resolves to its outcome's JSON.
 */
export declare function gateTools<T extends Record<string, any>>(gate: Gate, tools: T, options: GateToolsOptions): T;
