// The one place under shared/ (and functions/) that reads process.env (eslint.config.js forbids it elsewhere). The
// composition root (shared/app/runtime.ts, functions/app.ts, functions/setup.ts, functions/console.ts) takes the
// environment from here and hands it down: Settings is parsed from it once at startup, and the per-feature readers
// below (shared/app/settingsIndex.ts lists them) receive it as an explicit argument. It is the live object: the
// platform's markers and the principal-trust setting are read from it per request by the ops API, so a test that
// changes them between calls sees the change, as the host would after a restart.
export type AppEnv = NodeJS.ProcessEnv;

export function processEnv(): AppEnv {
  return process.env;
}
