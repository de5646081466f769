// Hand-drawn SVG bar chart of the per-minute metric buckets: succeeded, failed (non-zombie) and zombie per slot.
import { h, s } from './dom';

export interface Bucket {
  bucketStart: string;
  queue: string;
  outcome: 'succeeded' | 'failed';
  reason: string;
  count: number;
}

export interface Slot {
  start: number;
  succeeded: number;
  failed: number;
  zombie: number;
}

// Groups buckets into `slots` equal slots ending now.
export function slotsOf(buckets: Bucket[], windowMinutes: number, slotMinutes: number, now = Date.now()): Slot[] {
  const slotMs = slotMinutes * 60_000;
  const end = Math.ceil(now / 60_000) * 60_000;
  const count = Math.ceil(windowMinutes / slotMinutes);
  const first = end - count * slotMs;
  const out: Slot[] = Array.from({ length: count }, (_, i) => ({
    start: first + i * slotMs,
    succeeded: 0,
    failed: 0,
    zombie: 0,
  }));
  for (const b of buckets) {
    const t = new Date(b.bucketStart).getTime();
    const i = Math.floor((t - first) / slotMs);
    const slot = out[i];
    if (!slot) continue;
    if (b.outcome === 'succeeded') slot.succeeded += b.count;
    else if (b.reason === 'zombie') slot.zombie += b.count;
    else slot.failed += b.count;
  }
  return out;
}

const W = 720;
const H = 160;

// The bars are drawn in a stretched SVG; the labels are HTML, so they stay readable at any width.
export function barChart(slots: Slot[], label: string, windowMinutes: number): HTMLElement {
  const max = Math.max(1, ...slots.map((x) => x.succeeded + x.failed + x.zombie));
  const bw = W / Math.max(1, slots.length);
  const y = (v: number) => H - (v / max) * H;
  const bars: SVGElement[] = [];
  slots.forEach((slot, i) => {
    let base = 0;
    for (const [key, cls] of [
      ['succeeded', 'ok'],
      ['failed', 'bad'],
      ['zombie', 'warn'],
    ] as const) {
      const v = slot[key];
      if (v <= 0) continue;
      const y0 = y(base);
      const y1 = y(base + v);
      bars.push(
        s(
          'rect',
          {
            class: `bar ${cls}`,
            x: (i * bw + 0.5).toFixed(1),
            y: y1.toFixed(1),
            width: Math.max(1, bw - 1).toFixed(1),
            height: Math.max(0.5, y0 - y1).toFixed(1),
          },
          s('title', null, `${new Date(slot.start).toLocaleString()}: ${v} ${key}`),
        ),
      );
      base += v;
    }
  });
  const first = slots[0]?.start ?? Date.now();
  const startText =
    windowMinutes > 60
      ? new Date(first).toLocaleString([], { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' })
      : new Date(first).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  return h(
    'figure',
    { class: 'chart-frame' },
    h('div', { class: 'chart-y', 'aria-hidden': 'true' }, h('span', null, `${max} per slot`)),
    s(
      'svg',
      { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label, preserveAspectRatio: 'none' },
      s('line', { class: 'grid', x1: 0, y1: 0.5, x2: W, y2: 0.5 }),
      s('line', { class: 'axis', x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5 }),
      ...bars,
    ),
    h('div', { class: 'chart-x', 'aria-hidden': 'true' }, h('span', null, startText), h('span', null, 'now')),
  );
}

export function legend(slots: Slot[], reasons: Map<string, number>): HTMLElement {
  const sum = (k: keyof Omit<Slot, 'start'>) => slots.reduce((a, x) => a + x[k], 0);
  const reasonText = [...reasons.entries()]
    .filter(([r]) => r !== 'zombie')
    .map(([r, n]) => `${r} ${n}`)
    .join(', ');
  return h(
    'ul',
    { class: 'legend' },
    h('li', null, h('span', { class: 'swatch ok' }), `succeeded ${sum('succeeded').toLocaleString('en-US')}`),
    h(
      'li',
      null,
      h('span', { class: 'swatch bad' }),
      `failed ${sum('failed').toLocaleString('en-US')}${reasonText ? ` (${reasonText})` : ''}`,
    ),
    h('li', null, h('span', { class: 'swatch warn' }), `zombie ${sum('zombie').toLocaleString('en-US')}`),
  );
}
