// `sluice/ai` for ESM: the one implementation, in lib/ai.cjs.
import ai from "./lib/ai.cjs";

export const { gateTools } = ai;
