// The ops console in a real browser: Debian's Chromium driven by playwright-core against the local host (booted
// in-process by bootLocal, as `npm start` does), with the console built by Vite into a scratch folder.
// Sign-in with the key; the overview matches GET /api/ops/stats; a dead letter found by search, previewed,
// resurrected and then archived; a transfer batch's journal timeline; operator-only actions refused without
// the role (nothing changes); App Service authentication mode (no key, role still enforced); no request leaves
// localhost; no console errors. Screenshots of every page go to .tmp/console/.
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Page, ConsoleMessage } from 'playwright-core';
import { createTestDatabase } from '../support/pg.js';
import { encodeClientPrincipal } from '../../shared/ops/auth.js';
import { rereadHostEnvironment } from '../../shared/app/hostEnvironment.js';
import { migratePostgresChangeCapture } from '../../shared/engines/postgres/changeCapture.js';
import type { LocalKeel } from '../../dev/boot.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHROMIUM = process.env.KEEL_CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = path.join(ROOT, '.tmp', 'console');
const haveChromium = existsSync(CHROMIUM);
const PACKAGE_VERSION = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string })
  .version;
const QUEUE = 'console-e2e';
const OTHER = 'console-other';
const KEY = 'console-e2e-key-0123456789abcdef';
const TEST_CLIENT = '192.0.2.1';
const STALE = 'console-stale';
const LAGGING = 'console-lag';
// A handlers folder of the test's own (KEEL_HANDLERS_DIR) with one schedule, ticking at 03:00 Paris time: it makes
// no job while the tests run, so every count stays still.
const PROBE_DIR = path.join(ROOT, '.tmp', `console-e2e-handlers-${process.pid}`);

if (!haveChromium) {
  describe('ops console in Chromium', () => {
    if (process.env.CI === 'true') {
      it('needs Chromium under CI', () => {
        throw new Error(`Chromium not found at ${CHROMIUM}: .ci/run installs it (apt-get install -y chromium)`);
      });
    } else {
      it.skip(`skipped: Chromium not found at ${CHROMIUM} (apt-get install -y chromium, or set KEEL_CHROMIUM)`, () =>
        undefined);
    }
  });
} else {
  describe('ops console in Chromium', () => {
    let keel: LocalKeel;
    let browser: Browser;
    let context: BrowserContext;
    let page: Page;
    let dataDir: string;
    let base: string;
    const pools: pg.Pool[] = [];
    const blocked: string[] = [];
    const consoleErrors: string[] = [];
    const refusals: string[] = []; // 401/403 responses the browser saw (each deliberate)
    const requestUrls: string[] = [];
    // Every non-GET ops call the browser made ("<method> <path>", at the request), and the answers it saw ("<status>
    // <method> <path>"; a context closed right after a click may lose the last answer's event, never the request's).
    const browserWrites: string[] = [];
    const browserAnswers: string[] = [];
    let cancelledId: string;
    let fatalId: string;
    let batchId: string;
    let keelUrl: string; // the owner's URL of Keel's database
    let owner: pg.Pool; // the job store's database, to stage a worker that stopped heartbeating

    async function api(
      method: string,
      route: string,
      body?: unknown,
      operator = false,
    ): Promise<{ status: number; json: any }> {
      const res = await fetch(`${base}/api/ops${route}`, {
        method,
        headers: {
          'x-functions-key': KEY,
          'content-type': 'application/json',
          // Marks the test's own calls in the audit trail (the browser's carry no forwarded address locally).
          'x-forwarded-for': TEST_CLIENT,
          ...(operator
            ? { 'x-ms-client-principal': encodeClientPrincipal({ name: 'e2e', roles: ['Keel.Operator'] }) }
            : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      return { status: res.status, json: await res.json() };
    }

    async function until<T>(
      what: string,
      probe: () => Promise<T | null | undefined | false>,
      timeoutMs = 30_000,
    ): Promise<T> {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const v = await probe();
        if (v) return v;
        await new Promise((r) => setTimeout(r, 200));
      }
      throw new Error(`timed out waiting for ${what}`);
    }

    async function hot(queue: string): Promise<number> {
      const q = ((await api('GET', '/stats')).json.queues as any[]).find((x) => x.queue === queue);
      return q ? q.pending + q.fetched + q.processing : -1;
    }

    function watch(p: Page): void {
      p.on('console', (m: ConsoleMessage) => {
        if (m.type() === 'error' || m.type() === 'warning') consoleErrors.push(`${m.type()}: ${m.text()}`);
      });
      p.on('pageerror', (err) => consoleErrors.push(`pageerror: ${err.message}`));
      p.on('request', (r) => {
        requestUrls.push(r.url());
        const u = new URL(r.url());
        if (r.method() !== 'GET' && /^\/api\/(ops|console-api\/ops)\//.test(u.pathname))
          browserWrites.push(`${r.method()} ${u.pathname}`);
      });
      p.on('response', (r) => {
        if (r.status() === 401 || r.status() === 403)
          refusals.push(`${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}`);
        const u = new URL(r.url());
        if (r.request().method() !== 'GET' && /^\/api\/(ops|console-api\/ops)\//.test(u.pathname))
          browserAnswers.push(`${r.status()} ${r.request().method()} ${u.pathname}`);
      });
    }

    async function newContext(
      extraHTTPHeaders?: Record<string, string>,
      viewport = { width: 1280, height: 900 },
    ): Promise<BrowserContext> {
      const ctx = await browser.newContext({ viewport, ...(extraHTTPHeaders ? { extraHTTPHeaders } : {}) });
      await ctx.route('**/*', (route) => {
        const u = new URL(route.request().url());
        if (u.hostname === '127.0.0.1' || u.hostname === 'localhost') return route.continue();
        blocked.push(route.request().url());
        return route.abort('blockedbyclient');
      });
      return ctx;
    }

    // The dead-letter page loads its groups and its list after it renders, and each pushes the filter forms below it
    // down: a click aimed before both are in can land on whatever moved under the pointer.
    // The queue picker names the page's queue once loaded, which tells this page from the one before it.
    async function dlqLoaded(p: Page, queue = ''): Promise<void> {
      await p.waitForFunction((queue) => {
        const picker = document.querySelector<HTMLSelectElement>('select[name=queue]');
        if (picker?.value !== queue) return false;
        const groups = document.querySelector('section[aria-labelledby=groups-h]');
        const listBox = document.querySelector('section[aria-labelledby=list-h] > h2 + div');
        return !!groups && !groups.querySelector('.loading') && !!listBox && listBox.children.length > 0;
      }, queue);
    }

    async function shot(p: Page, name: string): Promise<void> {
      await p.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
    }

    async function signIn(p: Page, key: string, operator: boolean): Promise<void> {
      await p.goto(`${base}/api/console`);
      await p.locator('#key').fill(key);
      if (operator) await p.locator('#operator').check();
      await p.getByRole('button', { name: 'Sign in' }).click();
    }

    beforeAll(async () => {
      await mkdir(SHOTS, { recursive: true });
      dataDir = await mkdtemp(path.join(os.tmpdir(), 'keel-console-'));
      // The console, built exactly as `npm run build:console` does, into a scratch folder the host serves.
      const outDir = path.join(dataDir, 'console');
      const { build } = await import('vite');
      await build({
        configFile: path.join(ROOT, 'console', 'vite.config.ts'),
        logLevel: 'error',
        build: { outDir, emptyOutDir: true },
      });
      process.env.KEEL_CONSOLE_DIR = outDir;

      const url = await createTestDatabase('console');
      keelUrl = url;
      owner = new pg.Pool({ connectionString: url, max: 1 });
      const srcUrl = await createTestDatabase('console_src');
      const tgtUrl = await createTestDatabase('console_tgt');
      const ddl =
        'create table public.orders (id bigint primary key, customer text not null, amount numeric(12,2) not null)';
      for (const u of [srcUrl, tgtUrl]) {
        const p = new pg.Pool({ connectionString: u, max: 1 });
        pools.push(p);
        await p.query(ddl);
      }
      await pools[0]!.query(
        `insert into public.orders select n, 'customer-' || (n % 7), n * 1.5 from generate_series(1, 300) n`,
      );
      // A changes transfer (change capture on the source) and a key transfer comparing key sets, for their buttons.
      for (const p of pools) {
        await p.query(ddl.replace('public.orders', 'public.things'));
        await p.query(ddl.replace('public.orders', 'public.kc'));
      }
      await migratePostgresChangeCapture(pools[0]!);
      await pools[0]!.query(`insert into public.things select n, 'thing-' || n, n from generate_series(1, 25) n`);
      await pools[0]!.query(`select keel_changes.enable('public.things', array['id'])`);
      await pools[0]!.query(`insert into public.kc select n, 'kc-' || n, n from generate_series(1, 20) n`);
      Object.assign(process.env, {
        KEEL_PG_URL: url,
        KEEL_OPS_KEY: KEY,
        KEEL_AZURITE_PORT: '0',
        KEEL_DEMO_HANDLERS: 'true',
        KEEL_DISPATCH_SCHEDULE: '*/1 * * * * *',
        KEEL_DISPATCH_BUDGET_MS: '800',
        KEEL_MAINTENANCE_SCHEDULE: '*/2 * * * * *',
        CONSOLE_SRC: srcUrl,
        CONSOLE_TGT: tgtUrl,
        KEEL_TRANSFERS: JSON.stringify([
          {
            name: 'orders',
            source: { engine: 'postgres', connectionSetting: 'CONSOLE_SRC', table: 'public.orders' },
            target: { engine: 'postgres', connectionSetting: 'CONSOLE_TGT', table: 'public.orders' },
            keyColumns: ['id'],
            boundary: { column: 'id', kind: 'key' },
            columns: ['id', 'customer', 'amount'].map((c) => ({ source: c, target: c })),
            batchSize: 10_000,
            chunkSize: 100,
          },
          {
            name: 'things',
            source: { engine: 'postgres', connectionSetting: 'CONSOLE_SRC', table: 'public.things' },
            target: { engine: 'postgres', connectionSetting: 'CONSOLE_TGT', table: 'public.things' },
            keyColumns: ['id'],
            boundary: { kind: 'changes' },
            columns: ['id', 'customer', 'amount'].map((c) => ({ source: c, target: c })),
            batchSize: 10,
          },
          {
            name: 'kc',
            source: { engine: 'postgres', connectionSetting: 'CONSOLE_SRC', table: 'public.kc' },
            target: { engine: 'postgres', connectionSetting: 'CONSOLE_TGT', table: 'public.kc' },
            keyColumns: ['id'],
            boundary: { column: 'id', kind: 'key' },
            columns: ['id', 'customer', 'amount'].map((c) => ({ source: c, target: c })),
            batchSize: 10,
            keyCompare: 'apply',
          },
        ]),
      });
      await mkdir(PROBE_DIR, { recursive: true });
      await writeFile(
        path.join(PROBE_DIR, 'nightly.ts'),
        `import { defineHandler, defineSchedule } from '../../shared/jobs/define.js';\n` +
          `export const tick = defineHandler('console.tick', { queue: 'console-sched', async handle() {} });\n` +
          `export const nightly = defineSchedule('console-nightly', { cron: '0 0 3 * * *', timeZone: 'Europe/Paris', type: 'console.tick', missed: 'once' });\n`,
      );
      Object.assign(process.env, {
        KEEL_HANDLERS_DIR: PROBE_DIR,
        KEEL_WARN_STALE_HEARTBEAT_MS: '60000',
        KEEL_WARN_QUEUE_LAG_MS: '3000',
      });
      delete process.env.WEBSITE_SITE_NAME;
      delete process.env.WEBSITE_AUTH_ENABLED;
      const { bootLocal } = await import('../../dev/boot.js');
      const { definitions } = await import('../../functions/definitions.js');
      keel = await bootLocal({ definitions, dataDir, port: 0, log: () => undefined });
      base = keel.baseUrl;

      // Jobs: some succeed, one dead-letters (fatal), one is cancelled while it waits (DLQ "cancelled": it runs
      // fine once resurrected), and a second queue.
      const enq = await api('POST', '/jobs', {
        jobs: [
          { queue: QUEUE, type: 'demo.echo', payload: { message: 'one' } },
          { queue: QUEUE, type: 'demo.echo', payload: { message: 'two' } },
          { queue: QUEUE, type: 'demo.fatal', payload: { message: 'bad input' }, tags: ['fatal'] },
          {
            queue: QUEUE,
            type: 'demo.echo',
            payload: { message: 'resurrect-me' },
            delayMs: 3_600_000,
            tags: ['to-cancel'],
          },
          { queue: OTHER, type: 'demo.echo', payload: { message: 'other' } },
          // Enough archived jobs on one queue for two pages of 20.
          ...Array.from({ length: 24 }, (_, i) => ({
            queue: OTHER,
            type: 'demo.echo',
            payload: { message: `page-${i}` },
          })),
        ],
      });
      expect(enq.status).toBe(201);
      const ids = (enq.json.jobs as { id: string }[]).map((j) => j.id);
      fatalId = ids[2]!;
      cancelledId = ids[3]!;
      expect((await api('POST', `/jobs/${cancelledId}/cancel`, {}, true)).json.result).toBe('cancelled');
      await until('the jobs to finish', async () => (await hot(QUEUE)) === 0 && (await hot(OTHER)) === 0);
      expect((await api('GET', `/jobs/${fatalId}`)).json.location).toBe('dlq');

      const started = await api('POST', '/transfers/orders/start', {}, true);
      expect(started.status).toBe(202);
      batchId = started.json.batch.batchId;
      await until(
        'the batch to commit',
        async () => (await api('GET', `/transfers/batches/${batchId}`)).json.state === 'committed',
        60_000,
      );

      // The two transfers of the delete buttons' test stay paused until it runs (an hourly timer tick in between
      // would start them).
      for (const name of ['things', 'kc'])
        expect((await api('POST', `/transfers/${name}/pause`, { reason: 'until its test' }, true)).status).toBe(200);

      browser = await (
        await import('playwright-core')
      ).chromium.launch({
        executablePath: CHROMIUM,
        headless: true,
        args: [
          '--no-sandbox',
          '--headless',
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-gpu',
          '--no-first-run',
          '--disable-sync',
          '--disable-quic',
        ],
      });
      context = await newContext();
      page = await context.newPage();
      watch(page);
    }, 180_000);

    afterAll(async () => {
      await browser?.close();
      await keel?.stop();
      for (const p of pools) await p.end();
      await owner?.end();
      if (dataDir) await rm(dataDir, { recursive: true, force: true });
      await rm(PROBE_DIR, { recursive: true, force: true });
    });

    it('serves the console with a strict CSP; a wrong key is refused, the right one signs in and never goes into a URL', async () => {
      const res = await page.goto(`${base}/api/console`);
      expect(new URL(page.url()).pathname).toBe('/api/console/');
      const csp = res!.headers()['content-security-policy']!;
      expect(csp).toContain("script-src 'self'");
      expect(csp).not.toContain('unsafe-inline');
      await page.locator('#key').waitFor();
      await shot(page, 'signin');
      await page.locator('#key').fill('not-the-key');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('alert').filter({ hasText: 'that key was refused' }).waitFor();
      await page.locator('#key').fill(KEY);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('navigation', { name: 'Console sections' }).waitFor();
      expect(await page.locator('[data-test=identity]').textContent()).toContain('no operator role');
      expect(await page.evaluate(() => sessionStorage.getItem('keel.console.key'))).toBe(KEY);
      expect(requestUrls.filter((u) => u.includes(KEY))).toEqual([]);
    });

    it('overview: every queue with the counts of GET /api/ops/stats, the outcome chart and health', async () => {
      await page.goto(`${base}/api/console/#/`);
      const table = page.locator('table.queues-table');
      await table.waitFor();
      const stats = (await api('GET', '/stats')).json;
      const rows = await table
        .locator('tbody tr')
        .evaluateAll((trs) =>
          trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent?.trim() ?? '')),
        );
      expect(rows.map((r) => r[0]).sort()).toEqual((stats.queues as any[]).map((q) => q.queue).sort());
      for (const q of stats.queues as any[]) {
        const r = rows.find((x) => x[0] === q.queue)!;
        // queue, state, pending, due, processing, DLQ, lag, concurrency, attempts, succeeded, failed, retried
        expect([r[2], r[3], r[4], r[5], r[9], r[10], r[11]]).toEqual(
          [q.pending, q.due, q.fetched + q.processing, q.dlq, q.succeeded, q.failed, q.retried].map((n: number) =>
            n.toLocaleString('en-US'),
          ),
        );
      }
      expect(await page.locator('[data-total=succeeded]').textContent()).toBe(String(stats.totals.succeeded));
      expect(await page.locator('[data-total="in DLQ"]').textContent()).toBe(String(stats.totals.dlq));
      await page.locator('svg.chart rect.bar.ok').first().waitFor();
      const legend = await page.locator('.legend').textContent();
      expect(legend).toContain(`succeeded ${stats.totals.succeeded}`);
      expect(legend).toContain(`failed ${stats.totals.failed} (`);
      await page.getByRole('button', { name: 'Last day' }).click();
      await page.getByRole('heading', { name: /Last day/ }).waitFor();
      expect(await page.locator('.health').textContent()).toContain('reachable');
      await shot(page, 'overview');

      // Keyboard only: Tab reaches the navigation, Enter follows it.
      let reached = false;
      for (let i = 0; i < 12 && !reached; i++) {
        await page.keyboard.press('Tab');
        reached = await page.evaluate(() => document.activeElement?.textContent === 'Dead letters');
      }
      expect(reached).toBe(true);
      await page.keyboard.press('Enter');
      await page.getByRole('heading', { name: 'Dead letters', exact: true, level: 1 }).waitFor();

      // Phone width: nothing wider than the screen (tables scroll inside their own box).
      const phone = await newContext(undefined, { width: 390, height: 844 });
      const p2 = await phone.newPage();
      watch(p2);
      await p2.goto(`${base}/api/console/`);
      await p2.evaluate((k) => sessionStorage.setItem('keel.console.key', k), KEY);
      await p2.reload();
      await p2.locator('table.queues-table').waitFor();
      expect(await p2.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
      await shot(p2, 'overview-phone');
      await phone.close();
    });

    it('an operator-only action without the role shows the refusal and changes nothing', async () => {
      const dlqBefore = (await api('GET', '/stats')).json.totals.dlq;
      await page.goto(`${base}/api/console/#/queues`);
      await page.locator(`[data-test="toggle-${QUEUE}"]`).click();
      const alert = page.getByRole('alert');
      await alert.filter({ hasText: 'Refused (403' }).waitFor();
      expect(await alert.textContent()).toContain('Keel.Operator');
      // Signed in with the key alone on the local host: the refusal says how to get the role.
      expect(await alert.textContent()).toContain('sign in again with "Act as operator" ticked');
      expect((await api('GET', `/queues/${QUEUE}`)).json.paused).toBe(false);
      await shot(page, 'queues-refused');

      await page.goto(`${base}/api/console/#/dlq`);
      await dlqLoaded(page);
      await page.locator('[data-test=preview-resurrect]').click();
      await page.getByRole('alert').filter({ hasText: 'Refused (403' }).waitFor();
      expect((await api('GET', '/stats')).json.totals.dlq).toBe(dlqBefore);
      expect(refusals.filter((r) => r.startsWith('403'))).toEqual([
        `403 POST /api/ops/queues/${QUEUE}/pause`,
        '403 POST /api/ops/dlq/resurrect',
      ]);
    });

    it('every button of every page, clicked by a key holder without the operator role: each operator call it makes is refused (403) and shown, every read answers, nothing changes', async () => {
      // Its own context with a forwarded address: its refusals are told apart from the browser writes the audit test
      // counts (clientIp null), and its page errors are its own.
      const ctx = await newContext({ 'x-forwarded-for': '198.51.100.9' });
      const p = await ctx.newPage();
      const pageErrors: string[] = [];
      p.on('pageerror', (err) => pageErrors.push(err.message));
      // The forms that ask in a browser dialog (a transfer's Pause reason, Replay's bounds, a batch's Abandon reason)
      // are filled in, so their operator call is made and refused like every other; without a handler Playwright
      // dismisses each prompt and the button makes no call at all. A confirm is declined: its preview came first.
      const prompts: string[] = [];
      p.on('dialog', (d) => {
        const message = d.message();
        if (d.type() !== 'prompt') return void d.dismiss().catch(() => undefined);
        prompts.push(message.split(':')[0]!);
        const value = /high bound/.test(message) ? '1000' : /low bound/.test(message) ? '' : 'sweep';
        void d.accept(value).catch(() => undefined);
      });
      const calls: { method: string; path: string; status: number; principal: string | undefined }[] = [];
      // Ops requests sent and finished (answered or failed): a click is settled once every request it sent is finished.
      let requested = 0;
      let finished = 0;
      const isOps = (r: { url(): string }) => new URL(r.url()).pathname.startsWith('/api/ops/');
      p.on('request', (r) => void (isOps(r) && requested++));
      p.on('requestfinished', (r) => void (isOps(r) && finished++));
      p.on('requestfailed', (r) => void (isOps(r) && finished++));
      p.on('response', (r) => {
        const u = new URL(r.url());
        if (!u.pathname.startsWith('/api/ops/')) return;
        calls.push({
          method: r.request().method(),
          path: u.pathname,
          status: r.status(),
          principal: r.request().headers()['x-ms-client-principal'],
        });
      });
      const { allRoutes } = await import('../../shared/ops/routes.js');
      const routes = allRoutes();
      const roleOf = (method: string, pathname: string) =>
        routes.find(
          (r) =>
            r.method === method && new RegExp(`^/api/ops${r.path.replace(/:[A-Za-z]+/g, '[^/]+')}$`).test(pathname),
        )?.role;
      const stateOf = async () => ({
        totals: (await api('GET', '/stats')).json.totals,
        queues: (await api('GET', '/queues')).json.items,
        transfers: ((await api('GET', '/transfers')).json.items as any[]).map((t) => [t.name, t.paused, t.openBatch]),
        schedules: ((await api('GET', '/schedules')).json.items as any[]).map((x) => [x.name, x.state]),
      });
      const before = await stateOf();
      await signIn(p, KEY, false);
      await p.getByRole('navigation', { name: 'Console sections' }).waitFor();
      const pages = [
        '#/',
        '#/jobs',
        `#/jobs/${fatalId}`,
        `#/jobs/${cancelledId}`,
        '#/dlq',
        '#/queues',
        '#/schedules',
        '#/workers',
        '#/transfers',
        `#/transfers/batches/${batchId}`,
      ];
      const refused: string[] = [];
      let clicked = 0;
      for (const hash of pages) {
        // A fresh load of the page (a goto that changes only the hash would keep the page as the last click left it),
        // its buttons counted once its data is in: the count stops changing.
        const open = async () => {
          await p.goto('about:blank');
          await p.goto(`${base}/api/console/${hash}`);
          await p.locator('#page-title').waitFor();
          await p.waitForLoadState('networkidle');
          let n = -1;
          for (let w = 0; w < 20; w++) {
            const now = await p.locator('main button').count();
            if (now === n && now > 0) break;
            n = now;
            await p.waitForTimeout(100);
          }
          return n;
        };
        const labels = async () =>
          p
            .locator('main button')
            .evaluateAll((bs) => bs.map((b) => `${b.textContent?.trim()}|${b.getAttribute('data-test') ?? ''}`));
        // Clicks the i-th button (and, when that only opened a form or a confirm step, then the j-th button it
        // added), then judges every ops call the clicks made.
        const press = async (i: number, j: number | null): Promise<string[]> => {
          await open();
          const first = p.locator('main button').nth(i);
          const label = `${hash} "${((await first.textContent()) ?? '').trim()}" ${(await first.getAttribute('data-test')) ?? ''}`;
          if (!(await first.isVisible()) || !(await first.isEnabled())) return [];
          const shown = await labels();
          const from = calls.length;
          const fromRequested = requested;
          const fromAnswered = prompts.length; // a prompt opens within the click (it holds the click until answered)
          await first.click({ timeout: 5_000 });
          // Until the click made an ops request, or changed the buttons (it opened a form or a confirm step: what it
          // does is in the page already), or 1.5 s passed; then until every ops request sent is finished. Only a
          // click that does neither waits the whole 1.5 s (before, every click without a call did).
          const settle = async (before: string, sent: number, answered: number) => {
            for (let w = 0; w < 30 && calls.length === from && requested === sent; w++) {
              await p.waitForTimeout(50);
              if (JSON.stringify(await labels()) !== before) break;
            }
            // A prompt filled in leads to its operator call (the page's own refreshes may have ended the wait
            // above first): wait for that call's answer.
            const operatorCall = () => calls.slice(from).some((c) => roleOf(c.method, c.path) === 'operator');
            for (let w = 0; w < 200 && prompts.length !== answered && !operatorCall(); w++) await p.waitForTimeout(50);
            // Every request sent so far answered (waitForLoadState('networkidle') would not wait: the page reached
            // that state once, at its load).
            for (let w = 0; w < 200 && finished < requested; w++) await p.waitForTimeout(50);
            await p.waitForLoadState('networkidle');
          };
          await settle(JSON.stringify(shown), fromRequested, fromAnswered);
          clicked++;
          let what = label;
          const added = (await labels()).map((l, k) => [l, k] as const).filter(([l]) => !shown.includes(l));
          if (j !== null) {
            const target = added[j];
            if (!target || calls.length > from) return [];
            const second = p.locator('main button').nth(target[1]);
            if (!(await second.isVisible()) || !(await second.isEnabled())) return [];
            what = `${label} then "${target[0]}"`;
            const shownBeforeSecond = JSON.stringify(await labels());
            const sentBeforeSecond = requested;
            const answeredBeforeSecond = prompts.length;
            await second.click({ timeout: 5_000 });
            await settle(shownBeforeSecond, sentBeforeSecond, answeredBeforeSecond);
            clicked++;
          }
          const made = calls.slice(from);
          for (const c of made) {
            const role = roleOf(c.method, c.path);
            expect(role, `${what}: ${c.method} ${c.path} is a route`).toBeDefined();
            expect(c.principal, `${what}: no operator principal is sent without the role`).toBeUndefined();
            if (role === 'operator') {
              expect(c.status, `${what}: ${c.method} ${c.path}`).toBe(403);
              refused.push(`${c.method} ${c.path}`);
            } else {
              expect(c.status, `${what}: ${c.method} ${c.path}`).toBeLessThan(500);
              expect([401, 403], `${what}: ${c.method} ${c.path}`).not.toContain(c.status);
            }
          }
          if (made.some((c) => roleOf(c.method, c.path) === 'operator')) {
            const alert = p.getByRole('alert').filter({ hasText: 'Refused (403' });
            await alert.first().waitFor({ timeout: 5_000 });
            expect(await alert.first().textContent(), what).toContain('Keel.Operator');
          }
          // What a second click may try: the buttons this click added, when it made no call itself.
          return j === null && made.length === 0 ? added.map(([l]) => l) : [];
        };
        const count = await open();
        for (let i = 0; i < count; i++) {
          const added = await press(i, null);
          // Not the buttons that only close what the first click opened.
          for (let j = 0; j < added.length; j++) if (!/^(Cancel|Close)\|/.test(added[j]!)) await press(i, j);
        }
      }
      await ctx.close();
      expect(pageErrors).toEqual([]);
      expect(clicked).toBeGreaterThan(20);
      // The operator buttons of every page that has them were among them (a job's resurrect is under /dlq/).
      for (const route of ['/queues/', '/dlq/', '/purge', '/schedules/', '/transfers/', '/transfers/batches/'])
        expect(
          refused.some((r) => r.includes(`/api/ops${route}`)),
          `a refused call under ${route}`,
        ).toBe(true);
      // The dialog forms among them: a transfer's Pause (its reason asked) and Replay (its bounds asked, then the
      // preview, refused before any confirm).
      expect(prompts.some((m) => m.startsWith('Pause transfer'))).toBe(true);
      expect(prompts.some((m) => m.startsWith('Replay'))).toBe(true);
      expect(refused.some((r) => /^POST \/api\/ops\/transfers\/[^/]+\/pause$/.test(r))).toBe(true);
      expect(refused.some((r) => /^POST \/api\/ops\/transfers\/[^/]+\/replay$/.test(r))).toBe(true);
      expect(await stateOf()).toEqual(before);
    }, 480_000); // some 60 fresh page loads; minutes on a loaded machine

    it('a dead-lettered job is found by search, previewed, resurrected and then appears archived', async () => {
      await page.getByRole('button', { name: 'Sign out' }).click();
      await signIn(page, KEY, true);
      await page.locator('[data-test=identity]').filter({ hasText: 'sends Keel.Operator' }).waitFor();

      // An empty hot search (the page's default) points at where finished jobs are.
      await page.goto(`${base}/api/console/#/jobs?location=hot&queue=console-none-such`);
      await page.getByText('Finished jobs are in Archive (succeeded) or Dead letters').waitFor();

      // Search the DLQ by text.
      await page.goto(`${base}/api/console/#/jobs`);
      await page.locator('select[name=location]').selectOption('dlq');
      await page.locator('input[name=text]').fill('resurrect-me');
      await page.getByRole('button', { name: 'Search' }).click();
      const link = page.locator('table.jobs-table a', { hasText: cancelledId });
      await link.waitFor();
      expect(await page.locator('table.jobs-table tbody tr').count()).toBe(1);
      await shot(page, 'jobs-dlq-search');
      await link.click();
      await page.getByRole('heading', { name: `Job ${cancelledId}` }).waitFor();
      expect(await page.locator('.kv').textContent()).toContain('DLQ · cancelled');
      await shot(page, 'job-detail-dlq');

      // Dead letters: grouped by reason and type; resurrect the "cancelled" group through preview -> confirm.
      await page.goto(`${base}/api/console/#/dlq?queue=${QUEUE}`);
      await dlqLoaded(page, QUEUE);
      const groups = page.locator('section[aria-labelledby=groups-h] tbody tr');
      await groups.first().waitFor();
      const groupRows = await groups.evaluateAll((trs) =>
        trs.map((tr) => [...tr.querySelectorAll('td')].slice(0, 4).map((td) => td.textContent)),
      );
      expect(groupRows.sort()).toEqual([
        ['cancelled', 'demo.echo', QUEUE, '1'],
        ['fatal', 'demo.fatal', QUEUE, '1'],
      ]);
      await groups.filter({ hasText: 'cancelled' }).getByRole('button', { name: 'Resurrect group…' }).click();
      const preview = page.locator('[data-test=preview-count]');
      await preview.waitFor();
      expect(await preview.textContent()).toContain('1 job matches');
      expect(await page.locator('.confirm .sample').textContent()).toContain(cancelledId);
      expect((await api('GET', `/jobs/${cancelledId}`)).json.location).toBe('dlq'); // a preview changes nothing
      await shot(page, 'dlq-preview');
      await page.locator('[data-test=confirm]').click();
      await page.locator('[data-test=result]').filter({ hasText: 'Resurrected 1 job' }).waitFor();
      await shot(page, 'dlq-resurrected');

      await until(
        'the resurrected job to be archived',
        async () => (await api('GET', `/jobs/${cancelledId}`)).json.location === 'archive',
      );
      await page.goto(`${base}/api/console/#/jobs?location=archive&text=resurrect-me`);
      const row = page.locator('table.jobs-table tbody tr', { hasText: cancelledId });
      await row.waitFor();
      expect(await row.textContent()).toContain('succeeded');
      await shot(page, 'jobs-archive');

      // Keyset paging: 25 archived jobs on the other queue are 20 + 5, and back.
      await page.goto(`${base}/api/console/#/jobs?location=archive&queue=${OTHER}&limit=20`);
      const rowsOf = () => page.locator('table.jobs-table tbody tr');
      await page.locator('.pager', { hasText: '20 jobs on this page' }).waitFor();
      const first = await rowsOf().locator('td:first-child').allTextContents();
      await page.getByRole('button', { name: 'Older →' }).click();
      await page.locator('.pager', { hasText: '5 jobs on this page' }).waitFor();
      const second = await rowsOf().locator('td:first-child').allTextContents();
      expect(new Set([...first, ...second]).size).toBe(25);
      expect(Math.min(...first.map(Number))).toBeGreaterThan(Math.max(...second.map(Number)));
      expect(await page.getByRole('button', { name: 'Older →' }).count()).toBe(0);
      await page.getByRole('button', { name: '← Newer' }).click();
      await page.locator('.pager', { hasText: '20 jobs on this page' }).waitFor();
      expect(await rowsOf().locator('td:first-child').allTextContents()).toEqual(first);
    });

    it('resurrect by filter acts on exactly the previewed set: a job dead-lettered between preview and confirm is reported, not resurrected', async () => {
      const RACE = 'console-race';
      const made = await api('POST', '/jobs', {
        jobs: [0, 1, 2].map((i) => ({ queue: RACE, type: 'demo.echo', payload: { i }, delayMs: 3_600_000 })),
      });
      const ids = (made.json.jobs as { id: string }[]).map((j) => j.id);
      const pre = await api('POST', '/jobs/cancel', { ids, dryRun: false }, true);
      expect(pre.json.count).toBe(3);
      await page.goto(`${base}/api/console/#/dlq?queue=${RACE}`);
      await dlqLoaded(page, RACE);
      await page.locator('table.groups-table caption', { hasText: '3 dead letters in 1 group' }).waitFor();
      await page.locator('select[name=reason]').selectOption('cancelled');
      await page.locator('[data-test=preview-resurrect]').click();
      const preview = page.locator('[data-test=preview-count]');
      await preview.waitFor();
      expect(await preview.textContent()).toContain('3 jobs match');

      // Between preview and confirm: a fourth job is dead-lettered with the same reason, and one previewed job is
      // resurrected by someone else.
      const late = (await api('POST', '/jobs', { queue: RACE, type: 'demo.echo', delayMs: 3_600_000 })).json.id;
      expect((await api('POST', `/jobs/${late}/cancel`, {}, true)).json.result).toBe('cancelled');
      expect((await api('POST', `/dlq/${ids[0]}/resurrect`, {}, true)).status).toBe(200);

      await page.locator('[data-test=confirm]').click();
      const result = page.locator('[data-test=result]');
      await result.filter({ hasText: 'Resurrected 2 jobs of the 3 previewed' }).waitFor();
      expect(await page.locator(`[data-test=skipped] li[data-id="${ids[0]}"]`).textContent()).toContain(
        'no longer in the DLQ',
      );
      expect(await page.locator('[data-test=arrived]').textContent()).toContain(late);
      await shot(page, 'dlq-preview-race');
      expect((await api('GET', `/jobs/${late}`)).json.location).toBe('dlq'); // never acted on
      for (const id of ids.slice(1)) expect((await api('GET', `/jobs/${id}`)).json.location).not.toBe('dlq');
    });

    it('cancels hot jobs by filter and by selection through a preview bound to its ids', async () => {
      const CQ = 'console-cancel';
      const made = await api('POST', '/jobs', {
        jobs: [0, 1].map((i) => ({ queue: CQ, type: 'demo.echo', payload: { i }, delayMs: 3_600_000 })),
      });
      const ids = (made.json.jobs as { id: string }[]).map((j) => j.id);
      await page.goto(`${base}/api/console/#/jobs?location=hot&queue=${CQ}`);
      await page.locator('[data-test=cancel-matching]').click();
      await page.locator('[data-test=preview-count]', { hasText: '2 hot jobs match' }).waitFor();
      const late = (await api('POST', '/jobs', { queue: CQ, type: 'demo.echo', delayMs: 3_600_000 })).json.id;
      await page.locator('[data-test=confirm]').click();
      await page.locator('[data-test=result]', { hasText: 'Cancelled 2 of the 2 previewed jobs' }).waitFor();
      expect(await page.locator('[data-test=arrived]').textContent()).toContain(late);
      for (const id of ids) expect((await api('GET', `/jobs/${id}`)).json.location).toBe('dlq');
      expect((await api('GET', `/jobs/${late}`)).json.location).toBe('hot');

      await page.goto(`${base}/api/console/#/jobs?location=hot&queue=${CQ}&type=demo.echo`);
      await page.getByRole('checkbox', { name: `Select job ${late}` }).check();
      await page.locator('[data-test=cancel-selected]').click();
      await page.locator('[data-test=preview-count]', { hasText: '1 of the 1 selected job is hot' }).waitFor();
      await page.locator('[data-test=confirm]').click();
      await page.locator('[data-test=result]', { hasText: 'Cancelled 1 of the 1 previewed job' }).waitFor();
      expect((await api('GET', `/jobs/${late}`)).json).toMatchObject({ location: 'dlq', reason: 'cancelled' });
    });

    it('dead letters: groups counted in SQL past the old 500-row window, and the list paged', async () => {
      const MANY = 'console-many';
      const made = await api('POST', '/jobs', {
        jobs: Array.from({ length: 55 }, (_, i) => ({
          queue: MANY,
          type: 'demo.echo',
          payload: { i },
          delayMs: 3_600_000,
        })),
      });
      const ids = (made.json.jobs as { id: string }[]).map((j) => j.id);
      expect((await api('POST', '/jobs/cancel', { ids, dryRun: false }, true)).json.count).toBe(55);
      await page.goto(`${base}/api/console/#/dlq?queue=${MANY}`);
      await dlqLoaded(page, MANY);
      const row = page.locator('table.groups-table tbody tr');
      await row.first().waitFor();
      expect(await row.first().locator('td').allTextContents()).toEqual(
        expect.arrayContaining(['cancelled', 'demo.echo', MANY, '55']),
      );
      const list = page.locator('section[aria-labelledby=list-h] table.jobs-table tbody tr');
      await page.locator('section[aria-labelledby=list-h] .pager', { hasText: '50 on this page' }).waitFor();
      const first = await list.locator('td:nth-child(2)').allTextContents();
      await page.locator('section[aria-labelledby=list-h]').getByRole('button', { name: 'Older →' }).click();
      await page.locator('section[aria-labelledby=list-h] .pager', { hasText: '5 on this page' }).waitFor();
      const second = await list.locator('td:nth-child(2)').allTextContents();
      expect(new Set([...first, ...second])).toEqual(new Set(ids));
      await page.locator('section[aria-labelledby=list-h]').getByRole('button', { name: '← Newer' }).click();
      await page.locator('section[aria-labelledby=list-h] .pager', { hasText: '50 on this page' }).waitFor();
      await shot(page, 'dlq-paged');
      const purge = await api(
        'POST',
        '/purge',
        { target: 'dlq', queue: MANY, olderThan: new Date().toISOString(), dryRun: false },
        true,
      );
      expect(purge.json.deleted).toBe(55);
    });

    it("a transfer batch's detail shows its state, next action and journal timeline", async () => {
      await page.goto(`${base}/api/console/#/transfers`);
      await page.locator('[data-test="start-orders"]').waitFor();
      const link = page.locator('table.batches-table a', { hasText: batchId.slice(0, 8) });
      await link.waitFor();
      // Every source row is committed: nothing behind (counted at the source by GET /transfers).
      expect(await page.locator('[data-test="behind-orders"]').textContent()).toBe('caught up');
      await shot(page, 'transfers');
      await link.click();
      await page.locator('[data-test=timeline]').waitFor();
      const batch = (await api('GET', `/transfers/batches/${batchId}`)).json;
      expect(await page.locator('[data-test=state-words]').textContent()).toBe('Committed on the target');
      // The server's text, its ISO UTC instants shown in local time (each kept as the <time>'s datetime).
      const iso = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z/g;
      const instants = String(batch.nextAction).match(iso) ?? [];
      expect(instants.length).toBeGreaterThan(0); // "committed at <instant> with 300 rows"
      const shown = (await page.locator('.next-action').textContent())!;
      for (const part of String(batch.nextAction).split(iso)) expect(shown).toContain(part);
      for (const instant of instants) expect(shown).not.toContain(instant);
      expect(
        await page.locator('.next-action time').evaluateAll((ts) => ts.map((t) => t.getAttribute('datetime'))),
      ).toEqual(instants);
      const events = await page.locator('[data-test=timeline] .ev-name').allTextContents();
      expect(events).toEqual((batch.events as any[]).map((e) => e.event));
      expect(events.length).toBeGreaterThan(2);
      expect(await page.getByRole('button', { name: 'Resume' }).isDisabled()).toBe(true);
      await shot(page, 'batch');
    });

    it('starts a batch from the browser and follows it to committed', async () => {
      await pools[0]!.query(`insert into public.orders select n, 'late-' || n, n from generate_series(301, 340) n`);
      await page.goto(`${base}/api/console/#/transfers`);
      await page.locator('[data-test="start-orders"]').click();
      const follow = page.getByRole('link', { name: 'Follow it →' });
      await follow.waitFor();
      expect(await page.getByRole('status').textContent()).toContain('40 rows in the manifest');
      await follow.click();
      // The detail refreshes itself every 3 s until the batch is committed or failed.
      await page
        .locator('[data-test=state-words]', { hasText: 'Committed on the target' })
        .waitFor({ timeout: 60_000 });
      const id = page.url().split('/').pop()!;
      const batch = (await api('GET', `/transfers/batches/${id}`)).json;
      expect(batch).toMatchObject({ state: 'committed', appliedCount: 40, boundary: { low: '300', high: '340' } });
      expect(await page.locator('[data-test=timeline] .ev-name').allTextContents()).toEqual(
        (batch.events as any[]).map((e) => e.event),
      );
      await shot(page, 'batch-started');
    });

    it("an open batch's page, refreshed every 3 s, sends an action once: its button stays disabled until it answers", async () => {
      // A context of its own, not watched (its calls never reach Keel: the batch is shown open and the reconcile is
      // answered here, 6 s late). The refresh rebuilt the page meanwhile with the button enabled: a second click
      // sent the reconcile twice.
      const ctx = await newContext();
      try {
        const p = await ctx.newPage();
        const real = (await api('GET', `/transfers/batches/${batchId}`)).json;
        const open = { ...real, state: 'applying', status: 'unresolved', retryable: false };
        const sent: string[] = [];
        await p.route(`**/api/ops/transfers/batches/${batchId}`, (route) => route.fulfill({ json: open }));
        await p.route(`**/api/ops/transfers/batches/${batchId}/reconcile`, async (route) => {
          sent.push(route.request().method());
          await new Promise((r) => setTimeout(r, 6_000));
          await route.fulfill({ json: open });
        });
        await signIn(p, KEY, true);
        await p.getByRole('navigation', { name: 'Console sections' }).waitFor();
        await p.goto(`${base}/api/console/#/transfers/batches/${batchId}`);
        const reconcile = p.getByRole('button', { name: 'Reconcile now' });
        await reconcile.click();
        await p.waitForTimeout(4_500); // past a refresh
        if (await reconcile.isEnabled()) await reconcile.click();
        await p.getByRole('status').filter({ hasText: 'Reconciled' }).waitFor({ timeout: 15_000 });
        expect(sent).toEqual(['POST']);
      } finally {
        await ctx.close();
      }
    });

    it('re-baselines a changes transfer and compares key sets, each through its preview and a confirm', async () => {
      const count = async (table: string) =>
        (await pools[1]!.query(`select count(*)::int as n from public.${table}`)).rows[0].n as number;
      const status = page.getByRole('status');
      const dialogs: string[] = [];
      const onDialog = (d: import('playwright-core').Dialog) => {
        dialogs.push(d.message());
        void d.accept();
      };
      page.on('dialog', onDialog);
      try {
        // Signed in with the key, sending the operator role (both routes are operator only; filtered runs of this
        // file sign in without it).
        await page.goto(`${base}/api/console/#/transfers`);
        await page.evaluate(() => sessionStorage.setItem('keel.console.operator', '1'));
        await page.reload();
        await page.locator('[data-test=identity]').filter({ hasText: 'sends Keel.Operator' }).waitFor();
        // Re-baseline: refused by its preview while the transfer is paused (no confirm asked, nothing created).
        await page.goto(`${base}/api/console/#/transfers`);
        expect(await page.locator('[data-test="replay-things"]').count()).toBe(0); // a changes transfer re-baselines
        await page.locator('[data-test="rebaseline-things"]').click();
        await status.filter({ hasText: 'Refused: transfer things is paused' }).waitFor();
        expect(dialogs).toEqual([]);
        expect((await api('GET', '/transfers/batches?transfer=things')).json.items).toEqual([]);
        expect((await api('POST', '/transfers/things/resume', {}, true)).status).toBe(200);
        // Resumed: the preview's effect is confirmed, the first key window queued, and catch-up runs the rest.
        await page.goto(`${base}/api/console/#/transfers`);
        await page.locator('[data-test="rebaseline-things"]').click();
        await page.getByRole('link', { name: 'Follow it →' }).waitFor();
        expect(dialogs).toHaveLength(1);
        expect(dialogs[0]).toMatch(/^Re-baseline "things"\?/);
        expect(dialogs[0]).toContain('in key windows of up to 10 rows');
        expect(dialogs[0]).toContain('this is the first baseline');
        expect(await status.textContent()).toContain('10 rows in the manifest');
        await until('the baseline to reach the target', async () => (await count('things')) === 25, 60_000);
        // The journal records a window committed after the target's commit (the outcome is the target's): the last
        // window's rows can be there while its batch still reads applying (CI saw it once, under load).
        const committed = async () =>
          (await api('GET', '/transfers/batches?transfer=things&state=committed')).json.items as any[];
        await until(
          'the baseline windows to be journalled committed',
          async () => (await committed()).length >= 3,
          60_000,
        );
        const windows = await committed();
        expect(windows.map((b) => b.boundary.low).reverse()).toEqual([
          null,
          expect.stringMatching(/^baseline@\d+:10$/),
          expect.stringMatching(/^baseline@\d+:20$/),
        ]);

        // Compare keys: the report first (nothing deleted), then the confirm deletes the keys gone at the source.
        expect((await api('POST', '/transfers/kc/resume', {}, true)).status).toBe(200);
        expect((await api('POST', '/transfers/kc/start', {}, true)).status).toBe(202);
        await until(
          'kc to reach the target, its windows journalled committed',
          async () =>
            (await count('kc')) === 20 &&
            ((await api('GET', '/transfers/batches?transfer=kc')).json.items as any[]).every(
              (b) => b.state === 'committed',
            ),
          60_000,
        );
        await pools[0]!.query(`delete from public.kc where id in (3, 17)`);
        await page.goto(`${base}/api/console/#/transfers`);
        expect(await page.locator('[data-test="compare-keys-orders"]').count()).toBe(0); // keyCompare off
        await page.locator('[data-test="compare-keys-kc"]').click();
        await status.filter({ hasText: 'target row(s) deleted' }).waitFor();
        expect(dialogs).toHaveLength(2);
        expect(dialogs[1]).toMatch(/^"kc": 2 target key\(s\) gone at the source in 2 window\(s\) \(e\.g\. 3; 17\)/);
        expect(await status.textContent()).toContain('"kc": 2 target row(s) deleted');
        expect(await count('kc')).toBe(18);
        await shot(page, 'transfers-deletes');
      } finally {
        page.off('dialog', onDialog);
      }
    });

    it('queues: limits with the validation message of the API, then pause and resume as operator', async () => {
      await page.goto(`${base}/api/console/#/queues`);
      const row = page.locator('table.queues-table tbody tr', { hasText: QUEUE });
      await row.getByRole('button', { name: 'Limits…' }).click();
      await page.locator('input[name=maxAttempts]').fill('0');
      await page.getByRole('button', { name: 'Save' }).click();
      const alert = page.getByRole('alert').filter({ hasText: 'maxAttempts' });
      await alert.waitFor();
      expect(await alert.textContent()).toMatch(/Invalid \(400 invalid_request\) — maxAttempts/);
      expect(await page.locator('input[name=maxAttempts]').getAttribute('aria-invalid')).toBe('true');
      await shot(page, 'queues-validation');
      await page.locator('input[name=maxAttempts]').fill('7');
      await page.getByRole('button', { name: 'Save' }).click();
      await page.getByRole('status').filter({ hasText: 'saved: maxAttempts' }).waitFor();
      expect((await api('GET', `/queues/${QUEUE}`)).json.maxAttempts).toBe(7);

      await page.locator(`[data-test="toggle-${QUEUE}"]`).click();
      // The pause answers once the claims in flight have committed, with the jobs still running (inFlight).
      await page
        .getByRole('status')
        .filter({
          hasText:
            /paused: no new claims until resumed; (no job in flight|\d+ jobs? already claimed run to their end)\./,
        })
        .waitFor();
      // The status line can show before a second read sees the write (CI saw it once): wait for the API to agree.
      await expect.poll(async () => (await api('GET', `/queues/${QUEUE}`)).json.paused, { timeout: 5_000 }).toBe(true);
      await shot(page, 'queues');
      await page.locator(`[data-test="toggle-${QUEUE}"]`, { hasText: 'Resume' }).click();
      await page.getByRole('status').filter({ hasText: 'resumed' }).waitFor();
      await expect.poll(async () => (await api('GET', `/queues/${QUEUE}`)).json.paused, { timeout: 5_000 }).toBe(false);
      // Who did what to the queue, in its editor: the pause, the resume and the limits saved, newest first.
      await row.getByRole('button', { name: 'Limits…' }).click();
      const who = page.locator('[data-test=audit-card] table.audit-table tbody tr');
      await who.first().waitFor();
      const actions = await who.locator('td:nth-child(3)').allTextContents();
      expect(actions.slice(0, 3)).toEqual(['POST resumeQueue', 'POST pauseQueue', 'PATCH updateQueue']);
      await page.getByRole('button', { name: 'Close' }).click();

      // Lowering a retention that would purge rows: the API's preview, then an explicit confirm. On a queue of its
      // own: the maintenance timer (every 2 s here) purges its archive right after.
      const RETAIN = 'console-retain';
      for (let i = 0; i < 3; i++) await api('POST', '/jobs', { queue: RETAIN, type: 'demo.echo', payload: { i } });
      await until('the retention queue archived', async () => {
        const items = (await api('GET', `/jobs?location=archive&queue=${RETAIN}&limit=10`)).json.items;
        return items.length === 3;
      });
      const owner = new pg.Client({ connectionString: keelUrl });
      await owner.connect();
      try {
        await owner.query(
          `update keel.jobs_archive set finished_at = finished_at - interval '2 hours' where queue = $1`,
          [RETAIN],
        );
      } finally {
        await owner.end();
      }
      const archived = 3;
      const before = (await api('GET', `/queues/${RETAIN}`)).json.archiveRetentionSeconds;
      // The page is already on #/queues: reload it so it lists the new queue.
      await page.goto(`${base}/api/console/#/queues`);
      await page.reload();
      await page
        .locator('table.queues-table tbody tr', { hasText: RETAIN })
        .getByRole('button', { name: 'Limits…' })
        .click();
      await page.locator('input[name=archiveRetentionSeconds]').fill('3600');
      await page.getByRole('button', { name: 'Save' }).click();
      // The console's own warning first, then, as rows would go, the API's count.
      await page.locator('[data-test=confirm-retention]').click();
      const preview = page.locator('[data-test=retention-preview]');
      await preview.waitFor();
      expect(await preview.textContent()).toContain(`deletes ${archived} rows`);
      expect((await api('GET', `/queues/${RETAIN}`)).json.archiveRetentionSeconds).toBe(before); // nothing changed yet
      await shot(page, 'queues-retention-preview');
      await page.locator('[data-test=confirm]').click();
      await page.getByRole('status').filter({ hasText: 'saved: archiveRetentionSeconds' }).waitFor();
      expect((await api('GET', `/queues/${RETAIN}`)).json.archiveRetentionSeconds).toBe(3600);
    });

    it('cancels a waiting job from its detail page, and purges dead letters by age through preview and confirm', async () => {
      const job = (
        await api('POST', '/jobs', {
          queue: QUEUE,
          type: 'demo.echo',
          payload: { message: 'cancel-me' },
          delayMs: 3_600_000,
        })
      ).json;
      await page.goto(`${base}/api/console/#/jobs/${job.id}`);
      await page.getByRole('button', { name: 'Cancel job…' }).click();
      await page.locator('[data-test=confirm]').click();
      await page.getByRole('status').filter({ hasText: 'cancelled (now in the DLQ)' }).waitFor();
      expect((await api('GET', `/jobs/${job.id}`)).json).toMatchObject({ location: 'dlq', reason: 'cancelled' });
      // Who did it, on the job's own page: the cancel, from the audit trail.
      await page.goto(`${base}/api/console/#/jobs/${job.id}`);
      const who = page.locator('[data-test=audit-card] table.audit-table tbody tr');
      await who.first().waitFor();
      expect(await who.first().textContent()).toMatch(/POST cancelJob.*ok · 200/);

      const inDlq = ((await api('GET', `/jobs?location=dlq&queue=${QUEUE}`)).json.items as any[])
        .map((j) => j.id)
        .sort();
      expect(inDlq).toEqual([fatalId, job.id].sort());
      await page.goto(`${base}/api/console/#/dlq?queue=${QUEUE}`);
      await dlqLoaded(page, QUEUE);
      await page.locator('section[aria-labelledby=groups-h] tbody tr').first().waitFor();
      await page.locator('input[name=olderThan]').fill(
        await page.evaluate(() => {
          const d = new Date(Date.now() + 60_000); // the input has minutes only: the next minute covers every row
          const pad = (n: number) => String(n).padStart(2, '0');
          return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
        }),
      );
      await page.getByRole('button', { name: 'Preview purge' }).click();
      const confirm = page.locator('.confirm');
      await confirm.waitFor();
      expect(await confirm.locator('h3').textContent()).toBe('Delete 2 dead letters for good?');
      expect(((await api('GET', `/jobs?location=dlq&queue=${QUEUE}`)).json.items as any[]).length).toBe(2); // a preview deletes nothing
      await page.locator('[data-test=confirm]').click();
      await page.getByRole('status').filter({ hasText: 'Deleted 2 dead letters' }).waitFor();
      expect((await api('GET', `/jobs?location=dlq&queue=${QUEUE}`)).json.items).toEqual([]);
      await shot(page, 'dlq-purged');
    });

    it('schedules: cron, time zone, missed-tick policy, next tick in local time, the jobs it made, pause and resume', async () => {
      const api0 = (await api('GET', '/schedules')).json.items.find((x: any) => x.name === 'console-nightly');
      expect(api0).toMatchObject({ state: 'active', timeZone: 'Europe/Paris', missed: 'once' });
      await page.goto(`${base}/api/console/#/schedules`);
      const row = page.locator('table.schedules-table tbody tr', { hasText: 'console-nightly' });
      await row.waitFor();
      const cells = await row.locator('td').allTextContents();
      expect(cells.slice(0, 6)).toEqual([
        'console-nightly',
        '0 0 3 * * *',
        'Europe/Paris',
        'console.tick → console-sched',
        'once: one job for the latest',
        'active',
      ]);
      // The next tick is the API's instant, shown in the browser's local time (the UTC instant on hover).
      const next = row.locator('td:nth-child(7) time');
      expect(await next.getAttribute('datetime')).toBe(api0.nextTick);
      expect(await next.textContent()).toBe(
        await page.evaluate(
          (iso) =>
            new Date(iso).toLocaleString(undefined, {
              year: 'numeric',
              month: 'short',
              day: 'numeric',
              hour: '2-digit',
              minute: '2-digit',
              second: '2-digit',
            }),
          api0.nextTick,
        ),
      );
      const made = await row
        .locator('[data-test="made-console-nightly"] a')
        .evaluateAll((as) => as.map((a) => a.getAttribute('href')));
      expect(made).toEqual(['hot', 'archive', 'dlq'].map((l) => `#/jobs?location=${l}&tag=schedule%3Aconsole-nightly`));
      await shot(page, 'schedules');
      await page.locator('[data-test="toggle-schedule-console-nightly"]').click();
      await page.getByRole('status').filter({ hasText: 'Schedule "console-nightly" paused' }).waitFor();
      await row.locator('td', { hasText: 'paused' }).first().waitFor();
      expect((await api('GET', '/schedules')).json.items[0]).toMatchObject({ state: 'paused', nextTick: null });
      await page.locator('[data-test="toggle-schedule-console-nightly"]', { hasText: 'Resume' }).click();
      await page.getByRole('status').filter({ hasText: 'resumed' }).waitFor();
      expect((await api('GET', '/schedules')).json.items[0].state).toBe('active');
    });

    it('workers and warnings: the live and idle workers with their versions, a worker gone silent holding a job whose heartbeat stopped, and a lagging queue, on the overview', async () => {
      // A job held by a worker that stopped heartbeating 10 minutes ago; the queue's zombie timeout (a day) keeps
      // rescue away, as a long timeout would in production.
      expect((await api('PATCH', `/queues/${STALE}`, { zombieTimeoutSeconds: 86_400 }, true)).status).toBe(200);
      const held = (await api('POST', '/jobs', { queue: STALE, type: 'demo.echo', delayMs: 3_600_000 })).json.id;
      await owner.query(
        `update keel.jobs_hot set state = 'processing', worker_id = 'ghost-worker-1', lease_id = gen_random_uuid(),
                attempts = 1, fetched_at = now() - interval '10 minutes', started_at = now() - interval '10 minutes',
                heartbeat_at = now() - interval '10 minutes', lease_expires_at = now() + interval '1 hour'
         where id = $1`,
        [held],
      );
      // The ghost was a registered processor of an older version, last seen 20 minutes ago (silent: the bound is twice
      // KEEL_WORKER_REFRESH_MS, 10 minutes); a peer of another version reported just now, holding nothing.
      await owner.query(
        `insert into keel.workers (worker_id, host, instance_id, pid, app_version, build_id, queues, concurrency,
                                   jobs_done, started_at, last_seen_at)
         values ('ghost-worker-1', 'ghost-host', 'inst-ghost', 4711, '0.0.9', 'old-build', null, 32, 41,
                 now() - interval '3 hours', now() - interval '20 minutes'),
                ('peer-worker-2', 'peer-host', null, 4712, '0.0.9', 'old-build', $1, 8, 0,
                 now() - interval '1 hour', now())`,
        [`${STALE},${LAGGING}`],
      );
      // A paused queue with a due job: its lag passes KEEL_WARN_QUEUE_LAG_MS (3 s here).
      await api('POST', `/queues/${LAGGING}/pause`, {}, true);
      await api('POST', '/jobs', { queue: LAGGING, type: 'demo.echo' });

      await page.goto(`${base}/api/console/#/workers`);
      const rows = page.locator('table.workers-table tbody tr');
      const ghost = rows.filter({ hasText: 'ghost-worker-1' });
      await ghost.waitFor();
      // worker, state, version, host, serves, concurrency, jobs held, held in, oldest heartbeat, last seen, started, done
      const cells = await ghost.locator('td').allTextContents();
      expect(cells[1]).toBe('silent, holds jobsstale heartbeat');
      expect(cells[2]).toBe('0.0.9 (old-build)');
      expect(cells[3]).toBe('ghost-host · inst-ghost');
      expect(cells[4]).toBe('all queues');
      expect(cells[6]).toBe('1 (1 processing)');
      expect(cells[7]).toBe(STALE);
      expect(cells[8]).toMatch(/^1\d min ago$|^10 min ago$/);
      expect(cells[9]).toMatch(/^2\d min ago$/);
      // Done as the ghost last reported it, and when: a count written with the registry row is not live.
      expect(cells[11]).toMatch(/^41 as of 2\d min ago$/);
      // This local host's own processor: registered by its first job, idle now, on package.json's version.
      const mine = rows.filter({ hasText: '(this instance)' });
      const me = await mine.locator('td').allTextContents();
      expect(me[1]).toBe('idle');
      expect(me[2]).toBe(PACKAGE_VERSION);
      expect(me[4]).toBe('all queues');
      expect(me[6]).toBe('0');
      const peer = await rows.filter({ hasText: 'peer-worker-2' }).locator('td').allTextContents();
      expect(peer.slice(1, 5)).toEqual(['idle', '0.0.9 (old-build)', 'peer-host', `${STALE}, ${LAGGING}`]);
      // Lease holders first, then the idle.
      const order = await rows.locator('td:first-child').allTextContents();
      const at = (id: string) => order.findIndex((t) => t.includes(id));
      expect(at('ghost-worker-1')).toBeLessThan(at('(this instance)'));
      expect(at('ghost-worker-1')).toBeLessThan(at('peer-worker-2'));
      // Two versions live at once (the silent ghost's is not counted): flagged.
      const versions = page.locator('[data-test=worker-versions]');
      expect(await versions.textContent()).toBe(
        `Versions live: ${PACKAGE_VERSION} × 1, 0.0.9 (old-build) × 1 mixed versions`,
      );
      expect(await page.locator('[data-test=worker-counts]').textContent()).toMatch(
        /^2 live \(2 idle\) · 1 silent · \d+ not registered$/,
      );
      await shot(page, 'workers');

      await page.goto(`${base}/api/console/#/`);
      const warnings = page.locator('[data-test=warnings]');
      await warnings.locator('li[data-kind=stale_heartbeat]', { hasText: 'ghost-worker-1' }).waitFor();
      const silent = warnings.locator('li[data-kind=stale_worker]', { hasText: 'ghost-worker-1' });
      expect(await silent.textContent()).toMatch(
        /^worker silent worker ghost-worker-1 \(ghost-host, version 0\.0\.9\) holds 1 job\(s\) but has not reported for \d+ s/,
      );
      expect(await silent.locator('a').getAttribute('href')).toBe('#/workers');
      await warnings.locator('li[data-kind=queue_lag]', { hasText: LAGGING }).waitFor({ timeout: 15_000 });
      const staleRow = page.locator('table.queues-table tbody tr', { hasText: STALE });
      expect(await staleRow.locator('td:nth-child(2)').textContent()).toContain('stale');
      const lagRow = page.locator('table.queues-table tbody tr', { hasText: LAGGING });
      expect(await lagRow.locator('td:nth-child(2)').textContent()).toContain('lag');
      await page.goto(`${base}/api/console/#/queues`);
      const onQueues = page.locator('table.queues-table tbody tr', { hasText: LAGGING });
      await onQueues.locator('[data-kind=queue_lag]').waitFor();
      expect(await onQueues.locator('[data-kind=queue_lag]').getAttribute('title')).toContain(`queue ${LAGGING}`);
      const w = (await api('GET', '/warnings')).json;
      expect(w.thresholds).toEqual({
        staleHeartbeatMs: 60_000,
        queueLagMs: 3000,
        dlqPer15Min: 10,
        workerSilentMs: 600_000,
        workerRetentionMs: 3_600_000,
      });
      await shot(page, 'overview-warnings');

      // Clean up: the ghost's job dead-letters through rescue, the lagging queue drains.
      await api('PATCH', `/queues/${STALE}`, { zombieTimeoutSeconds: 60, zombiePolicy: 'dlq' }, true);
      await api('POST', `/queues/${LAGGING}/resume`, {}, true);
      await until(
        'the stale job to be rescued',
        async () => (await api('GET', `/jobs/${held}`)).json.location === 'dlq',
      );
      await until('the lagging queue to drain', async () => (await hot(LAGGING)) === 0);
      await owner.query(`delete from keel.workers where worker_id in ('ghost-worker-1', 'peer-worker-2')`);
    });

    it('smaller points: focus kept across refreshes and returned after a panel, all-time labels, a confirm before lowering retention, a payload copy button, and every queue action reachable at 390 px', async () => {
      // The overview refreshes every 5 s by rebuilding itself: the focused control keeps the focus.
      await page.goto(`${base}/api/console/#/`);
      await page.locator('table.queues-table').waitFor();
      expect(await page.locator('.totals dt').allTextContents()).toContain('succeeded (all time)');
      const before = await page.locator('.updated').textContent();
      await page.getByRole('button', { name: 'Last day' }).focus();
      await expect.poll(async () => page.locator('.updated').textContent(), { timeout: 12_000 }).not.toBe(before);
      expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Last day');

      // Closing a panel gives the focus back to what opened it.
      await page.goto(`${base}/api/console/#/queues`);
      await page.locator(`[data-test="limits-${QUEUE}"]`).click();
      await page.getByRole('button', { name: 'Close' }).click();
      expect(await page.evaluate(() => document.activeElement?.getAttribute('data-test'))).toBe(`limits-${QUEUE}`);

      // Save with nothing changed sends nothing (it sent {} and showed the API's 400 as the answer).
      const patches = () => browserWrites.filter((w) => w === `PATCH /api/ops/queues/${QUEUE}`).length;
      const patchesBefore = patches();
      await page.locator(`[data-test="limits-${QUEUE}"]`).click();
      await page.getByRole('button', { name: 'Save' }).click();
      await page.locator('[data-test=nothing-to-save]').waitFor();
      expect(patches()).toBe(patchesBefore);
      await page.getByRole('button', { name: 'Close' }).click();

      // Lowering a retention asks first; nothing changes until confirmed. A double click on the confirm sends one
      // change (it submitted the form twice: two PATCHes).
      const was = (await api('GET', `/queues/${QUEUE}`)).json.dlqRetentionSeconds;
      await page.locator(`[data-test="limits-${QUEUE}"]`).click();
      await page.locator('input[name=dlqRetentionSeconds]').fill('3600');
      await page.getByRole('button', { name: 'Save' }).click();
      await page.locator('[data-test=retention-warning]', { hasText: 'DLQ retention' }).waitFor();
      expect((await api('GET', `/queues/${QUEUE}`)).json.dlqRetentionSeconds).toBe(was);
      await page.locator('[data-test=confirm-retention]').dblclick();
      await page.getByRole('status').filter({ hasText: 'saved: dlqRetentionSeconds' }).waitFor();
      expect((await api('GET', `/queues/${QUEUE}`)).json.dlqRetentionSeconds).toBe(3600);
      expect(patches()).toBe(patchesBefore + 1);
      // Raising it back needs no confirm.
      await page.locator(`[data-test="limits-${QUEUE}"]`).click();
      await page.locator('input[name=dlqRetentionSeconds]').fill(String(was));
      await page.getByRole('button', { name: 'Save' }).click();
      await expect
        .poll(async () => (await api('GET', `/queues/${QUEUE}`)).json.dlqRetentionSeconds, { timeout: 5_000 })
        .toBe(was);
      expect(await page.locator('[data-test=retention-warning]').count()).toBe(0);

      // Copy a payload.
      await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
      const archived = (await api('GET', `/jobs?location=archive&queue=${OTHER}&limit=1`)).json.items[0];
      await page.goto(`${base}/api/console/#/jobs/${archived.id}`);
      await page.locator('[data-test=copy]').click();
      await page.locator('.copy-row', { hasText: 'copied' }).waitFor();
      expect(JSON.parse(await page.evaluate(() => navigator.clipboard.readText()))).toEqual(
        (await api('GET', `/jobs/${archived.id}`)).json.payload,
      );

      // 390 px: the queue actions stay on screen (the table scrolls under them) and dates keep to one line.
      const phone = await newContext(undefined, { width: 390, height: 844 });
      const p2 = await phone.newPage();
      watch(p2);
      await p2.goto(`${base}/api/console/`);
      await p2.evaluate((k) => sessionStorage.setItem('keel.console.key', k), KEY);
      await p2.goto(`${base}/api/console/#/queues`);
      await p2.reload(); // a hash change alone does not reload: the page reads the key at load
      for (const name of [QUEUE, OTHER]) {
        const b = p2.locator(`[data-test="limits-${name}"]`);
        await b.waitFor();
        const box = (await b.boundingBox())!;
        expect(box.x + box.width).toBeLessThanOrEqual(390);
        const hit = await p2.evaluate(
          ([x, y]) => document.elementFromPoint(x!, y!)?.getAttribute('data-test'),
          [box.x + box.width / 2, box.y + box.height / 2],
        );
        expect(hit).toBe(`limits-${name}`);
      }
      expect(await p2.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
      await shot(p2, 'queues-phone');
      await p2.goto(`${base}/api/console/#/jobs?location=archive&queue=${OTHER}&limit=20`);
      const dateCell = p2.locator('table.jobs-table tbody tr:first-child td:nth-child(6)');
      await dateCell.waitFor();
      const lineHeight = await dateCell.evaluate((td) => parseFloat(getComputedStyle(td).lineHeight) || 20);
      expect((await dateCell.boundingBox())!.height).toBeLessThan(lineHeight * 2 + 14);
      await phone.close();
    });

    it("a job's page shows what it returned and logged once archived, and its progress while it runs", async () => {
      const done = (await api('POST', '/jobs', { queue: QUEUE, type: 'demo.echo', payload: { message: 'shown' } }))
        .json;
      await until(
        'the echo job to be archived',
        async () => (await api('GET', `/jobs/${done.id}`)).json.location === 'archive',
      );
      await page.goto(`${base}/api/console/#/jobs/${done.id}`);
      const result = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Result' }) });
      expect(JSON.parse((await result.locator('pre').textContent())!)).toEqual({ echoed: 'shown' });
      const log = page.locator('table.job-log');
      await log.waitFor();
      expect(await log.locator('tbody tr').count()).toBe(1);
      expect(await log.locator('tbody tr td').nth(3).textContent()).toBe('echo {"message":"shown"}');

      const slow = (await api('POST', '/jobs', { queue: QUEUE, type: 'demo.slow', payload: { ms: 8000 } })).json;
      await until(
        'the slow job to report progress',
        async () => ((await api('GET', `/jobs/${slow.id}`)).json.progress?.done ?? 0) >= 2,
        15_000,
      );
      await page.goto(`${base}/api/console/#/jobs/${slow.id}`);
      const bar = page.locator('progress[aria-label=progress]');
      await bar.waitFor();
      expect(Number(await bar.getAttribute('value'))).toBeGreaterThanOrEqual(0.2);
      expect(await page.locator('.progress').textContent()).toMatch(/\d+ of 10 · step \d+ of 10/);
      await shot(page, 'job-progress');
      expect((await api('POST', `/jobs/${slow.id}/cancel`, {}, true)).json.result).toBe('cancel_requested');
    });

    it("a flow on the job's page: the child waits for its parent, each links to the other, and the child runs once the parent is archived", async () => {
      const parent = (await api('POST', '/jobs', { queue: QUEUE, type: 'demo.slow', payload: { ms: 3000 } })).json;
      const child = (
        await api('POST', '/jobs', {
          queue: QUEUE,
          type: 'demo.echo',
          payload: { message: 'after the parent' },
          after: [parent.id],
        })
      ).json;
      expect((await api('GET', `/jobs/${child.id}`)).json.state).toBe('waiting');
      await page.goto(`${base}/api/console/#/jobs/${child.id}`);
      const flow = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Flow' }) });
      await flow.waitFor();
      expect(await flow.getByRole('heading', { name: 'Waits for (1)' }).count()).toBe(1);
      expect(await flow.locator(`a[href="#/jobs/${parent.id}"]`).count()).toBe(1);
      expect(await flow.textContent()).toContain('waiting');
      await shot(page, 'job-flow-waiting');
      // From the parent's page to the child's, through the graph.
      await flow.locator(`a[href="#/jobs/${parent.id}"]`).click();
      const parentFlow = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Flow' }) });
      await parentFlow.getByRole('heading', { name: 'Then (1)' }).waitFor();
      expect(await parentFlow.locator(`a[href="#/jobs/${child.id}"]`).count()).toBe(1);
      // The child is claimed only after the parent's own move: archived after it, never before.
      await until(
        'the child to be archived after its parent',
        async () => (await api('GET', `/jobs/${child.id}`)).json.location === 'archive',
        30_000,
      );
      const [p, c] = [(await api('GET', `/jobs/${parent.id}`)).json, (await api('GET', `/jobs/${child.id}`)).json];
      expect(p.location).toBe('archive');
      expect(Date.parse(c.startedAt)).toBeGreaterThanOrEqual(Date.parse(p.finishedAt));
      await page.goto(`${base}/api/console/#/jobs/${child.id}`);
      await page
        .locator('section.card')
        .filter({ has: page.getByRole('heading', { name: 'Result' }) })
        .waitFor();
    });

    it("a job's page lists every attempt: two failed ones and the success, and a running job's attempt, lease expiry and heartbeat age, then its zombie end", async () => {
      const dd = (p: Page, label: string) =>
        p.locator('dl.kv dt', { hasText: new RegExp(`^${label}$`) }).locator('+ dd');
      // Fails twice, then succeeds: "No error recorded" and "Attempts 1" were all the page used to say.
      const flaky = (await api('POST', '/jobs', { queue: QUEUE, type: 'demo.flaky', payload: { failTimes: 2 } })).json;
      await until(
        'the flaky job to succeed on its third attempt',
        async () => (await api('GET', `/jobs/${flaky.id}`)).json.location === 'archive',
      );
      await page.goto(`${base}/api/console/#/jobs/${flaky.id}`);
      const attempts = page.locator('table.attempts tbody tr');
      await attempts.first().waitFor();
      expect(await attempts.count()).toBe(3);
      const rows = await Promise.all([0, 1, 2].map(async (i) => attempts.nth(i).locator('td').allTextContents()));
      // Its limit is its queue's (an earlier test changed it): the API's attemptLimit, which the page shows.
      const limit = (await api('GET', `/jobs/${flaky.id}`)).json.attemptLimit;
      expect(limit).toBe((await api('GET', `/queues/${QUEUE}`)).json.maxAttempts);
      expect(rows.map((r) => [r[0], r[5]])).toEqual([
        [`1 of ${limit}`, 'retried'],
        [`2 of ${limit}`, 'retried'],
        [`3 of ${limit}`, 'succeeded'],
      ]);
      expect(rows[0]![6]).toContain('flaky failure on attempt 1 of 3 needed');
      expect(rows[1]![6]).toContain('flaky failure on attempt 2 of 3 needed');
      expect(rows[2]![6]).toBe('—');
      for (const r of rows) expect(r[1]).not.toBe('—'); // the worker of each attempt
      expect(await dd(page, 'Attempts').textContent()).toBe(`3 of ${limit} used`);
      await shot(page, 'job-attempts');

      // A running job held by a worker whose last heartbeat was two minutes ago, its lease an hour ahead.
      const RUNNING = 'console-running';
      expect((await api('PATCH', `/queues/${RUNNING}`, { zombieTimeoutSeconds: 86_400 }, true)).status).toBe(200);
      const held = (await api('POST', '/jobs', { queue: RUNNING, type: 'demo.echo', delayMs: 3_600_000 })).json.id;
      await owner.query(
        `update keel.jobs_hot set state = 'processing', worker_id = 'worker-attempts', lease_id = gen_random_uuid(),
                attempts = 1, fetched_at = now() - interval '3 minutes', started_at = now() - interval '3 minutes',
                heartbeat_at = now() - interval '2 minutes', lease_expires_at = now() + interval '1 hour'
         where id = $1`,
        [held],
      );
      await page.goto(`${base}/api/console/#/jobs/${held}`);
      await page.locator('table.attempts').waitFor();
      expect(await dd(page, 'Attempts').textContent()).toBe('attempt 1 of 5');
      expect(await dd(page, 'Last heartbeat').textContent()).toMatch(/\((2|3) min ago\)$/);
      expect(await dd(page, 'Lease expires').textContent()).toMatch(/\(in (59|60) min\)$/);
      const running = await page.locator('table.attempts tbody tr').allTextContents();
      expect(running).toHaveLength(1);
      expect(running[0]).toContain('worker-attempts');
      expect(running[0]).toContain('running');
      await shot(page, 'job-running');

      // Rescue finds it dead: the DLQ row keeps the attempt, ended as a zombie.
      await api('PATCH', `/queues/${RUNNING}`, { zombieTimeoutSeconds: 60, zombiePolicy: 'dlq' }, true);
      await until('the job to be rescued', async () => (await api('GET', `/jobs/${held}`)).json.location === 'dlq');
      await page.reload();
      const dead = page.locator('table.attempts tbody tr');
      await dead.first().waitFor();
      const cells = await dead.first().locator('td').allTextContents();
      expect([cells[0], cells[1], cells[5]]).toEqual(['1 of 5', 'worker-attempts', 'zombie']);
      expect(cells[6]).toBe('zombie: heartbeat timed out');
    });

    it("jobs list: open a job by id, filter by priority, oldest first, and a job's idempotency key links to its siblings", async () => {
      const SMALL = 'console-smaller';
      const SIB = 'console-sibling';
      const later = 3_600_000; // delayed: they stay hot, pending, for the whole test
      const made = (
        await api('POST', '/jobs', {
          jobs: [
            { queue: SMALL, type: 'demo.echo', payload: { n: 1 }, priority: 0, delayMs: later },
            { queue: SMALL, type: 'demo.echo', payload: { n: 2 }, priority: 5, delayMs: later },
            {
              queue: SMALL,
              type: 'demo.echo',
              payload: { n: 3 },
              priority: 5,
              delayMs: later,
              idempotencyKey: 'sib-1',
            },
            { queue: SIB, type: 'demo.echo', payload: { n: 4 }, delayMs: later, idempotencyKey: 'sib-1' },
            { queue: SIB, type: 'demo.echo', payload: { n: 5 }, delayMs: later, idempotencyKey: 'sib-2' },
          ],
        })
      ).json.jobs.map((j: { id: string }) => j.id) as string[];
      // The list re-renders after each navigation: wait until it shows exactly these rows.
      const expectRows = async (ids: (string | undefined)[]) => {
        const want = JSON.stringify(ids);
        let got = '';
        await until(
          `rows ${want}`,
          async () => {
            got = JSON.stringify(await page.locator('table.jobs-table tbody tr td a').allTextContents());
            return got === want;
          },
          10_000,
        ).catch(() => {
          throw new Error(`expected rows ${want}, saw ${got}`);
        });
      };

      // The id lookup: straight to the job; anything but digits is refused in words.
      await page.goto(`${base}/api/console/#/jobs`);
      await page.getByLabel('Job id').fill('12ab');
      await page.getByRole('button', { name: 'Open' }).click();
      await page.locator('.notice', { hasText: 'A job id is a whole number' }).waitFor();
      await page.getByLabel('Job id').fill(made[1]!);
      await page.getByRole('button', { name: 'Open' }).click();
      await page.waitForURL(new RegExp(`#/jobs/${made[1]}$`));
      await page.getByRole('heading', { name: `Job ${made[1]}` }).waitFor();

      // Priority 5 of the queue, newest first, then oldest first.
      await page.goto(`${base}/api/console/#/jobs`);
      const form = page.locator('form.filters');
      await form.locator('input[name=queue]').fill(SMALL);
      await form.locator('input[name=priority]').fill('5');
      await form.getByRole('button', { name: 'Search' }).click();
      await page.waitForURL(/priority=5/);
      await expectRows([made[2], made[1]]);
      await page.locator('form.filters select[name=order]').selectOption('oldest');
      await page.locator('form.filters').getByRole('button', { name: 'Search' }).click();
      await page.waitForURL(/order=oldest/);
      await page.locator('table.jobs-table caption', { hasText: 'Oldest first' }).waitFor();
      await expectRows([made[1], made[2]]);
      // The whole queue, oldest first, two a page: "Newer →" walks up.
      await page.goto(`${base}/api/console/#/jobs?location=hot&queue=${SMALL}&order=oldest&limit=20`);
      await expectRows([made[0], made[1], made[2]]);
      // A priority outside the API's bounds: its message, naming the field.
      await page.goto(`${base}/api/console/#/jobs?location=hot&priority=9999999`);
      await page.locator('.notice', { hasText: 'priority' }).waitFor();

      // The key on a job's page links to the jobs sharing it, here in two queues.
      await page.goto(`${base}/api/console/#/jobs/${made[2]}`);
      const keyLinks = page.locator('.key-links');
      await keyLinks.waitFor();
      expect(await keyLinks.locator('a').first().textContent()).toBe('sib-1');
      await keyLinks.locator('a').first().click();
      await page.waitForURL(/idempotencyKey=sib-1/);
      await expectRows([made[3], made[2]]);
      expect(await page.locator('form.filters input[name=idempotencyKey]').inputValue()).toBe('sib-1');
      await shot(page, 'jobs-siblings');
    });

    it('behind App Service authentication: no key, the reader role to read, and the operator role still enforced', async () => {
      process.env.WEBSITE_SITE_NAME = 'keel-console-e2e';
      process.env.WEBSITE_AUTH_ENABLED = 'True';
      // Azure: the local host's trust setting would be refused here (a hosting environment), so it is not set.
      const localTrust = process.env.KEEL_TRUST_CLIENT_PRINCIPAL;
      delete process.env.KEEL_TRUST_CLIENT_PRINCIPAL;
      // Read once (shared/app/hostEnvironment.ts): again, for the platform this test switches to and back.
      rereadHostEnvironment();
      const before = refusals.length;
      try {
        // Stands in for App Service authentication, which sets this header on every request it fronts.
        const ctx = await newContext({
          'x-ms-client-principal': encodeClientPrincipal({ name: 'alice@contoso.example', roles: ['Keel.Reader'] }),
        });
        const p = await ctx.newPage();
        watch(p);
        await p.goto(`${base}/api/console/`);
        await p.locator('[data-test=identity]').filter({ hasText: 'alice@contoso.example · reader' }).waitFor();
        expect(await p.locator('#key').count()).toBe(0);
        await p.locator('table.queues-table').waitFor();
        await shot(p, 'overview-entra');
        await p.goto(`${base}/api/console/#/queues`);
        await p.locator(`[data-test="toggle-${QUEUE}"]`).click();
        await p.getByRole('alert').filter({ hasText: 'Refused (403' }).waitFor();
        expect((await api('GET', `/queues/${QUEUE}`)).json.paused).toBe(false);
        expect(refusals.slice(before)).toEqual([`403 POST /api/console-api/ops/queues/${QUEUE}/pause`]);
        await ctx.close();

        const op = await newContext({
          'x-ms-client-principal': encodeClientPrincipal({ name: 'bob@contoso.example', roles: ['Keel.Operator'] }),
        });
        const p3 = await op.newPage();
        watch(p3);
        await p3.goto(`${base}/api/console/#/queues`);
        await p3.locator(`[data-test="toggle-${QUEUE}"]`).click();
        await p3.getByRole('status').filter({ hasText: 'paused' }).waitFor();
        expect((await api('GET', `/queues/${QUEUE}`)).json.paused).toBe(true);
        await p3.locator(`[data-test="toggle-${QUEUE}"]`, { hasText: 'Resume' }).click();
        await p3.getByRole('status').filter({ hasText: 'resumed' }).waitFor();
        await op.close();

        // Review F1: any tenant principal gets signed in; without a Keel role it reads nothing.
        const tenant = await newContext({
          'x-ms-client-principal': encodeClientPrincipal({ name: 'carol@contoso.example', roles: [] }),
        });
        const p4 = await tenant.newPage();
        watch(p4);
        await p4.goto(`${base}/api/console/#/jobs?location=archive`);
        await p4.locator('[data-test=identity]').filter({ hasText: 'carol@contoso.example · no Keel role' }).waitFor();
        await p4.getByRole('alert').filter({ hasText: 'Refused (403' }).first().waitFor();
        expect(await p4.locator('table.jobs-table').count()).toBe(0);
        await tenant.close();
      } finally {
        delete process.env.WEBSITE_SITE_NAME;
        delete process.env.WEBSITE_AUTH_ENABLED;
        if (localTrust !== undefined) process.env.KEEL_TRUST_CLIENT_PRINCIPAL = localTrust;
        rereadHostEnvironment();
      }
    });

    it('the audit page and GET /audit show every write of this run exactly once, with the right actor', async () => {
      const all: any[] = [];
      let beforeId: string | null = null;
      do {
        const r = await api('GET', `/audit?limit=500${beforeId ? `&beforeId=${beforeId}` : ''}`, undefined, true);
        expect(r.status).toBe(200);
        all.push(...r.json.items);
        beforeId = r.json.nextBeforeId;
      } while (beforeId);
      // The browser's writes (no forwarded address locally): one record each, with the status the browser saw.
      const fromBrowser = all.filter((a) => a.httpMethod !== 'GET' && a.clientIp === null);
      expect(fromBrowser.map((a) => a.httpMethod).sort()).toEqual(browserWrites.map((w) => w.split(' ')[0]).sort());
      const recorded = fromBrowser.map((a) => a.status as number);
      for (const answer of browserAnswers) {
        const status = Number(answer.split(' ')[0]);
        expect(recorded, answer).toContain(status);
        recorded.splice(recorded.indexOf(status), 1);
      }
      expect(fromBrowser.length).toBeGreaterThan(8);
      const one = (match: (a: any) => boolean, what: string) => {
        const found = all.filter(match);
        expect(found, what).toHaveLength(1);
        return found[0];
      };
      // Behind App Service authentication (console channel): alice refused, bob paused and resumed.
      expect(
        one((a) => a.principalName === 'alice@contoso.example' && a.action === 'pauseQueue', 'alice refused pause'),
      ).toMatchObject({ outcome: 'refused', status: 403, role: 'reader', channel: 'console', authMethod: 'principal' });
      for (const action of ['pauseQueue', 'resumeQueue'])
        expect(
          one((a) => a.principalName === 'bob@contoso.example' && a.action === action, `bob ${action}`),
        ).toMatchObject({ outcome: 'ok', status: 200, role: 'operator', target: `queue:${QUEUE}`, channel: 'console' });
      // carol, signed in with no Keel role: her reads were refused and recorded.
      const carol = all.filter((a) => a.principalName === 'carol@contoso.example');
      expect(carol.length).toBeGreaterThan(0);
      for (const a of carol) expect(a).toMatchObject({ outcome: 'refused', status: 403, role: null });
      // The key-holder without the operator role: the two refusals of the browser.
      const keyRefusals = all.filter((a) => a.clientIp === null && a.authMethod === 'key' && a.outcome === 'refused');
      expect(keyRefusals.map((a) => a.action).sort()).toEqual(['pauseQueue', 'resurrectByFilter']);
      // As operator through the key (the console's local operator principal): the resurrect, the cancel, the purge.
      const resurrect = all.filter(
        (a) => a.action === 'resurrectByFilter' && a.outcome === 'ok' && a.clientIp === null,
      );
      // The previews (dry runs) affected nothing; the confirmed ones moved jobs.
      expect(resurrect.map((a) => a.affected)).toContain(0);
      expect(resurrect.some((a) => a.affected > 0)).toBe(true);
      expect(one((a) => a.action === 'cancelJob' && a.clientIp === null, 'cancel')).toMatchObject({
        outcome: 'ok',
        principalName: 'console',
        authMethod: 'local',
        affected: 1,
      });
      const purges = all.filter((a) => a.action === 'purge' && a.clientIp === null).map((a) => a.affected);
      expect(purges).toContain(0);
      expect(purges.some((n) => n > 0)).toBe(true);
      expect(one((a) => a.action === 'startTransfer' && a.clientIp === null, 'start')).toMatchObject({
        outcome: 'ok',
        target: 'transfer:orders',
      });

      // The page lists them; filtered to one target, newest first.
      await page.goto(`${base}/api/console/#/audit?target=queue:${QUEUE}`);
      const rows = page.locator('table.audit-table tbody tr');
      await rows.first().waitFor();
      const apiRows = (await api('GET', `/audit?target=queue:${QUEUE}&limit=50`, undefined, true)).json.items as any[];
      expect(await rows.count()).toBe(apiRows.length);
      expect(await rows.first().textContent()).toContain(apiRows[0].action);
      expect(await page.locator('table.audit-table').textContent()).toContain('bob@contoso.example');
      await shot(page, 'audit');
      // A filter the API refuses shows its message naming the field.
      await page.goto(`${base}/api/console/#/audit?action=drop%20table`);
      await page.getByRole('alert').filter({ hasText: 'action' }).waitFor();
    });

    it('no request left localhost, and the console logged no errors beyond the deliberate refusals', () => {
      expect(blocked).toEqual([]);
      expect(requestUrls.length).toBeGreaterThan(20);
      expect(requestUrls.filter((u) => !u.startsWith(base) && !u.startsWith('data:'))).toEqual([]);
      // Chromium logs every 4xx answer to fetch as "Failed to load resource"; those are the refusals above.
      const unexpected = consoleErrors.filter(
        (e) => !/^error: Failed to load resource: the server responded with a status of (400|401|403|409)/.test(e),
      );
      expect(unexpected).toEqual([]);
    });
  });
}
