// The package's ESM entry point: the one implementation, in lib/ (CommonJS).
import sluice from "./lib/index.cjs";

export const { Gate, Turn, Outcome, FakeApi, ConfigError, SluiceDeferred } = sluice;
