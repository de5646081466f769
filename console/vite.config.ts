// Vite build of the ops console: plain TypeScript and CSS, no framework, no runtime dependencies. The output
// (dist/console) is served by Keel itself (shared/ops/console.ts) under /api/console/, so every asset URL is
// relative and nothing is inlined (the page runs under a CSP without 'unsafe-inline').
import { defineConfig } from 'vite';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

export default defineConfig({
  root: here,
  base: './',
  publicDir: false,
  logLevel: 'warn',
  build: {
    outDir: process.env.KEEL_CONSOLE_OUT_DIR
      ? path.resolve(process.env.KEEL_CONSOLE_OUT_DIR)
      : path.resolve(here, '../dist/console'),
    emptyOutDir: true,
    target: 'es2022',
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    reportCompressedSize: false,
  },
});
