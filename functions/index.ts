// Azure Functions entry point (package.json "main": dist/functions/index.js). Stack traces from the compiled dist/
// should name the TypeScript lines (both `tsc` and `npm run package` emit source maps), but Node reads the maps only
// of modules loaded after source maps are switched on, and ESM loads every static import before running any code:
// so switch them on here, then load the app (functions/app.ts registers the functions) dynamically. The worker
// awaits this module, top-level await included, before it indexes the functions.
process.setSourceMapsEnabled(true);
await import('./app.js');
