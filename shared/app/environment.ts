// The one place of the shipped code (shared/, functions/, handlers/) that reads process.env (eslint.config.js forbids
// it elsewhere). The composition root (shared/app/runtime.ts and hostEnvironment.ts, functions/app.ts and setup.ts;
// the handler API's appSetting for handlers' own settings) takes the environment from here and hands it down:
// Settings is parsed from it once at startup, and the per-feature schemas (shared/app/settingsIndex.ts lists them)
// receive it as an explicit argument, each parsing it once (what the ops API and the console need per request:
// shared/app/hostEnvironment.ts). It is the live object, not a copy: the local host (dev/boot.ts) fills its settings
// in before the app reads them.
export type AppEnv = NodeJS.ProcessEnv;

export function processEnv(): AppEnv {
  return process.env;
}
