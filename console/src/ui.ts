// Shared pieces of the pages: notices, the preview -> confirm step, page headings, status badges.
import { h, replace, type Child } from './dom';
import { ApiError } from './api';

export function notice(): HTMLDivElement {
  return h('div', { class: 'notices', 'aria-live': 'polite' });
}

export function show(box: HTMLElement, kind: 'ok' | 'error' | 'info', ...message: Child[]): void {
  replace(box, h('div', { class: `notice ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, ...message));
}

export function showError(box: HTMLElement, err: unknown): void {
  show(
    box,
    'error',
    err instanceof ApiError ? err.describe() : `Unexpected error: ${(err as Error).message ?? String(err)}`,
  );
}

export function clear(box: HTMLElement): void {
  box.replaceChildren();
}

export function pageHead(title: string, ...extra: Child[]): HTMLElement {
  return h(
    'div',
    { class: 'page-head' },
    h('h1', { id: 'page-title', tabindex: -1 }, title),
    h('div', { class: 'page-tools' }, ...extra),
  );
}

export function badge(text: string, tone: 'ok' | 'warn' | 'bad' | 'muted' | 'info'): HTMLSpanElement {
  return h('span', { class: `badge ${tone}` }, text);
}

// A warning's kind (GET /warnings) as a badge says it; long: the overview's list, else a queue row's flag.
export function warningLabel(kind: string, long = false): string {
  switch (kind) {
    case 'stale_heartbeat':
      return long ? 'stale heartbeat' : 'stale';
    case 'stale_worker':
      return 'worker silent';
    case 'queue_lag':
      return 'lag';
    default:
      return 'DLQ growing';
  }
}

export function empty(text: string): HTMLParagraphElement {
  return h('p', { class: 'empty' }, text);
}

// Runs an action from a button: disables it meanwhile, reports errors in `box`.
export async function busy<T>(
  button: HTMLButtonElement | null,
  box: HTMLElement,
  fn: () => Promise<T>,
): Promise<T | undefined> {
  if (button) button.disabled = true;
  try {
    return await fn();
  } catch (err) {
    showError(box, err);
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

// A preview followed by an explicit confirm: `preview` renders what would happen (and returns false when there is
// nothing to do); the confirm button runs `commit`.
export function confirmStep(opts: {
  host: HTMLElement;
  title: string;
  preview: Child[];
  confirmLabel: string;
  danger?: boolean;
  onConfirm: (button: HTMLButtonElement) => Promise<void>;
}): void {
  const confirm = h(
    'button',
    { type: 'button', class: opts.danger ? 'danger' : 'primary', 'data-test': 'confirm' },
    opts.confirmLabel,
  );
  const cancel = h('button', { type: 'button', class: 'ghost' }, 'Cancel');
  const panel = h(
    'section',
    { class: 'confirm', 'aria-label': opts.title, role: 'group' },
    h('h3', null, opts.title),
    ...opts.preview,
    h('div', { class: 'actions' }, confirm, cancel),
  );
  // Closing the panel gives focus back to what opened it (when that is still on the page).
  const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
  confirm.addEventListener('click', () => void opts.onConfirm(confirm));
  cancel.addEventListener('click', () => {
    opts.host.replaceChildren();
    if (opener?.isConnected) opener.focus();
  });
  replace(opts.host, panel);
  confirm.focus();
}

// What identifies a control across a re-render that builds new elements: its tag, id, name, data-test, link
// target, label and text.
function focusKey(el: Element): string {
  return [
    el.tagName,
    el.id,
    el.getAttribute('name'),
    el.getAttribute('data-test'),
    el.getAttribute('href'),
    el.getAttribute('aria-label'),
    el.textContent?.trim().slice(0, 80),
  ].join('\u0000');
}

// Runs a re-render of `root` and puts keyboard focus back on the matching control, so a periodic refresh does not
// throw the keyboard user back to the top of the page.
export function keepFocus(root: HTMLElement, render: () => void): void {
  const active = document.activeElement;
  const key = active && active !== document.body && root.contains(active) ? focusKey(active) : null;
  render();
  if (!key || document.activeElement === active) return;
  // Moving an element (detach, re-append) drops its focus too: the same element first, else its rebuilt twin.
  const match =
    active instanceof HTMLElement && active.isConnected && root.contains(active)
      ? active
      : [...root.querySelectorAll('a, button, input, select, textarea, [tabindex]')].find((el) => focusKey(el) === key);
  if (match instanceof HTMLElement) match.focus({ preventScroll: true });
}

export function kv(rows: [string, Child][]): HTMLDListElement {
  return h('dl', { class: 'kv' }, ...rows.map(([k, v]) => [h('dt', null, k), h('dd', null, v ?? '—')]));
}

export function pre(value: unknown): HTMLPreElement {
  return h('pre', { class: 'code', tabindex: 0 }, typeof value === 'string' ? value : JSON.stringify(value, null, 2));
}

// A block of text with a "Copy" button: the clipboard when the browser allows it, else the text is selected for
// Ctrl+C. The button says which happened.
export function copyable(value: unknown, what: string): HTMLDivElement {
  const block = pre(value);
  const status = h('span', { class: 'muted', 'aria-live': 'polite' });
  const button = h('button', { type: 'button', class: 'small ghost', 'data-test': 'copy' }, `Copy ${what}`);
  button.addEventListener('click', () => {
    const text = block.textContent ?? '';
    const selectIt = () => {
      const range = document.createRange();
      range.selectNodeContents(block);
      const sel = window.getSelection();
      sel?.removeAllRanges();
      sel?.addRange(range);
      status.textContent = 'selected: press Ctrl+C';
    };
    if (!navigator.clipboard) {
      selectIt();
      return;
    }
    navigator.clipboard.writeText(text).then(
      () => {
        status.textContent = 'copied';
      },
      () => selectIt(),
    );
  });
  return h('div', null, h('div', { class: 'copy-row' }, status, ' ', button), block);
}

export function table(
  head: string[],
  rows: Child[][],
  opts: { caption?: string; className?: string } = {},
): HTMLDivElement {
  return h(
    'div',
    { class: 'table-wrap', tabindex: 0, role: 'region', 'aria-label': opts.caption ?? head.join(', ') },
    h(
      'table',
      { class: opts.className ?? '' },
      opts.caption ? h('caption', null, opts.caption) : null,
      h('thead', null, h('tr', null, ...head.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', null, ...rows.map((r) => h('tr', null, ...r.map((c) => h('td', null, c))))),
    ),
  );
}

export function field(label: string, control: HTMLElement, hint?: string): HTMLLabelElement {
  return h(
    'label',
    { class: 'field' },
    h('span', { class: 'label' }, label),
    control,
    hint ? h('span', { class: 'hint' }, hint) : null,
  );
}

export function select(name: string, options: [string, string][], value: string): HTMLSelectElement {
  return h(
    'select',
    { name },
    ...options.map(([v, t]) => h('option', { value: v, ...(v === value ? { selected: true } : {}) }, t)),
  );
}

export function hashParams(): URLSearchParams {
  const hash = window.location.hash;
  const i = hash.indexOf('?');
  return new URLSearchParams(i >= 0 ? hash.slice(i + 1) : '');
}

export function go(path: string, params?: Record<string, string | undefined>): void {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params ?? {})) if (v) u.set(k, v);
  const s = u.toString();
  window.location.hash = `#${path}${s ? `?${s}` : ''}`;
}

export type Cleanup = () => void;
