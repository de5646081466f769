// Keel ops console: layout, sign-in and the hash router (#/, #/jobs, #/jobs/<id>, #/dlq, #/queues, #/schedules,
// #/workers, #/transfers, #/transfers/batches/<id>, #/audit).
import './style.css';
import { h, replace } from './dom';
import {
  currentAccess,
  currentSession,
  isOperatorClaimed,
  loadSession,
  setUnauthorizedHandler,
  signInWithKey,
  signOut,
  ApiError,
  type Session,
} from './api';
import { notice, show, showError, type Cleanup } from './ui';
import { overviewPage } from './pages/overview';
import { jobsPage, jobPage } from './pages/jobs';
import { dlqPage } from './pages/dlq';
import { queuesPage } from './pages/queues';
import { schedulesPage } from './pages/schedules';
import { workersPage } from './pages/workers';
import { transfersPage, batchPage } from './pages/transfers';
import { auditPage } from './pages/audit';

const app = document.getElementById('app')!;
let cleanup: Cleanup | null = null;
let signInMessage: string | null = null;

const NAV: [string, string][] = [
  ['#/', 'Overview'],
  ['#/jobs', 'Jobs'],
  ['#/dlq', 'Dead letters'],
  ['#/queues', 'Queues'],
  ['#/schedules', 'Schedules'],
  ['#/workers', 'Workers'],
  ['#/transfers', 'Transfers'],
  ['#/audit', 'Audit'],
];

function routePath(): string {
  const hash = window.location.hash;
  if (!hash.startsWith('#/')) return '/';
  const i = hash.indexOf('?');
  return hash.slice(1, i >= 0 ? i : undefined);
}

function identity(): HTMLElement {
  const a = currentAccess()!;
  const s = currentSession()!;
  const op = isOperatorClaimed();
  const who =
    a.kind === 'appservice'
      ? `${a.name ?? 'signed in'} · ${s.level ?? 'no Keel role: every page is refused'}`
      : `ops key${op ? ` · sends ${s.operatorRole}` : ' · no operator role'}`;
  const out = h(
    'button',
    {
      type: 'button',
      class: 'ghost small',
      onclick: () => {
        if (a.kind === 'appservice' && s.logoutUrl) {
          window.location.assign(s.logoutUrl);
          return;
        }
        signOut();
        signInMessage = 'Signed out. The key is forgotten in this tab.';
        void render(); // render reports its own failures on the page, like the other calls to it
      },
    },
    'Sign out',
  );
  return h('div', { class: 'identity' }, h('span', { class: 'who', 'data-test': 'identity' }, who), out);
}

function layout(): { main: HTMLElement } {
  const path = routePath();
  const nav = h(
    'nav',
    { 'aria-label': 'Console sections' },
    h(
      'ul',
      null,
      ...NAV.map(([href, label]) => {
        const target = href.slice(1);
        const current = target === '/' ? path === '/' : path === target || path.startsWith(`${target}/`);
        return h('li', null, h('a', { href, ...(current ? { 'aria-current': 'page' } : {}) }, label));
      }),
    ),
  );
  const main = h('main', { id: 'main', tabindex: -1 });
  replace(
    app,
    h(
      'header',
      { class: 'top' },
      h('a', { class: 'brand', href: '#/' }, 'Keel', h('span', null, ' console')),
      nav,
      identity(),
    ),
    main,
  );
  return { main };
}

function signInPage(s: Session): void {
  const box = notice();
  if (signInMessage) show(box, 'info', signInMessage);
  signInMessage = null;
  const key = h('input', {
    type: 'password',
    name: 'key',
    id: 'key',
    autocomplete: 'off',
    required: true,
    spellcheck: 'false',
  });
  const operator = h('input', { type: 'checkbox', name: 'operator', id: 'operator' });
  const submit = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h(
    'form',
    { class: 'signin-form' },
    h(
      'label',
      { for: 'key', class: 'label' },
      s.mode === 'caller'
        ? 'Ops key (printed by npm start, stored in .data/ops-key)'
        : 'Function key of the ops function',
    ),
    key,
    s.mode === 'caller'
      ? h(
          'label',
          { class: 'check' },
          operator,
          h(
            'span',
            null,
            `Act as operator: send the "${s.operatorRole}" role. The local host has no sign-in and takes the role as given; without it, destructive actions are refused.`,
          ),
        )
      : null,
    submit,
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    signInWithKey(key.value.trim(), operator.checked)
      .then(() => render())
      .catch((err) => {
        showError(
          box,
          err instanceof ApiError && err.status === 401
            ? new ApiError(401, 'unauthorized', 'that key was refused; check it and try again', undefined, null)
            : err,
        );
        submit.disabled = false;
        key.focus();
      });
  });
  const appService =
    s.mode === 'appservice'
      ? h(
          'div',
          { class: 'signin-alt' },
          h(
            'p',
            null,
            'This app is behind App Service authentication: sign in with your organisation account; no key is needed.',
          ),
          h(
            'a',
            { class: 'button primary', href: s.loginUrl ?? '/.auth/login/aad' },
            'Sign in with Microsoft Entra ID',
          ),
          h('p', { class: 'hint' }, 'Or use a function key:'),
        )
      : null;
  replace(
    app,
    h(
      'main',
      { id: 'main', class: 'signin', tabindex: -1 },
      h('h1', null, 'Keel console'),
      s.mode === 'untrusted'
        ? h(
            'p',
            { class: 'hint' },
            'App Service authentication is not enabled on this app: read with a function key; operator-only actions will be refused (docs/operations.md).',
          )
        : null,
      box,
      appService,
      form,
      h(
        'p',
        { class: 'hint' },
        'The key stays in this browser tab (session storage) and is sent only as a request header to this app.',
      ),
    ),
  );
  key.focus();
}

async function render(): Promise<void> {
  cleanup?.();
  cleanup = null;
  const session = currentSession();
  if (!session) return;
  if (!currentAccess()) {
    signInPage(session);
    return;
  }
  const { main } = layout();
  const path = routePath();
  let m: RegExpExecArray | null;
  if (path === '/' || path === '') cleanup = overviewPage(main);
  else if (path === '/jobs') cleanup = jobsPage(main);
  else if ((m = /^\/jobs\/([0-9]+)$/.exec(path))) cleanup = jobPage(main, m[1]!);
  else if (path === '/dlq') cleanup = dlqPage(main);
  else if (path === '/queues') cleanup = queuesPage(main);
  else if (path === '/schedules') cleanup = schedulesPage(main);
  else if (path === '/workers') cleanup = workersPage(main);
  else if (path === '/transfers') cleanup = transfersPage(main);
  else if ((m = /^\/transfers\/batches\/([0-9a-fA-F-]{36})$/.exec(path))) cleanup = batchPage(main, m[1]!);
  else if (path === '/audit') cleanup = auditPage(main);
  else {
    replace(
      main,
      h('h1', { id: 'page-title', tabindex: -1 }, 'Not found'),
      h('p', null, 'No such page. ', h('a', { href: '#/' }, 'Back to the overview.')),
    );
  }
  const title = document.getElementById('page-title');
  const label = NAV.find(([href]) => href.slice(1) === path)?.[1];
  document.title = `${label ?? 'Keel'} · Keel console`;
  if (title && document.activeElement === document.body) title.focus({ preventScroll: true });
}

setUnauthorizedHandler((message) => {
  if (currentAccess()?.kind === 'key') {
    signOut();
    signInMessage = `Signed out: ${message}`;
    void render();
  } else {
    // The App Service authentication session ended: ask again who this is (the sign-in page if nobody).
    signInMessage = `Your sign-in has ended: ${message}`;
    void loadSession().then(() => render());
  }
});

window.addEventListener('hashchange', () => {
  if (window.location.hash === '#main') return;
  void render();
});
document.addEventListener('click', (ev) => {
  const a = (ev.target as Element | null)?.closest?.('a.skip');
  if (a) {
    ev.preventDefault();
    document.getElementById('main')?.focus();
  }
});

loadSession()
  .then(() => render())
  .catch((err) => {
    replace(
      app,
      h(
        'main',
        { id: 'main', class: 'signin' },
        h('h1', null, 'Keel console'),
        h(
          'div',
          { class: 'notice error', role: 'alert' },
          `The console could not reach Keel: ${(err as Error).message}. Reload to try again.`,
        ),
      ),
    );
  });
