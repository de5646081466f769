// A TCP proxy for fault injection between Keel and a PostgreSQL server. It understands just enough of the
// PostgreSQL wire protocol (v3) to recognise statements in the client's stream (Query 'Q' and Parse 'P'
// messages) and the server's ReadyForQuery ('Z'), and can then:
//   - cut-after-bytes: forward at most N more client->server bytes after the trigger statement, then cut;
//   - cut-after-ms:    cut both directions D ms after the trigger statement was forwarded;
//   - drop-reply:      forward the trigger statement, swallow everything the server answers, and cut as soon as
//                      the server reports ReadyForQuery: the statement (and its implicit COMMIT) completed on the
//                      server, and its reply never reached the client.
//   - cut-after-server-bytes: forward at most N more server->client bytes after the trigger statement, then cut
//                      (e.g. a source cut at a random byte of its COPY TO STDOUT);
//   - delay-request:   hold the trigger statement (and everything the client sends after it on that connection) for
//                      D ms, then forward it: a call still "on its way over the network";
//   - blackhole:       forward the trigger statement, then forward nothing in either direction and never cut: a peer
//                      that stops replying without a reset (only the client's own timeouts end it).
// stall()/heal(): a network partition of every connection through the proxy (new ones too): nothing moves either
// way, nothing is cut, until heal() delivers what was held, in order (TCP retransmitting across a healed link).
// A plan is one-shot: it fires on the first connection whose stream matches, then the proxy forwards normally.
import net from 'node:net';

export type FaultPlan =
  | { kind: 'cut-after-bytes'; trigger: (sql: string) => boolean; bytes: number }
  | { kind: 'cut-after-ms'; trigger: (sql: string) => boolean; delayMs: number }
  | { kind: 'drop-reply'; trigger: (sql: string) => boolean; holdMs?: number }
  | { kind: 'cut-after-server-bytes'; trigger: (sql: string) => boolean; bytes: number }
  | { kind: 'delay-request'; trigger: (sql: string) => boolean; delayMs: number }
  | { kind: 'blackhole'; trigger: (sql: string) => boolean };

export interface FaultReport {
  kind: FaultPlan['kind'];
  sql: string;
  forwardedAfterTrigger: number; // client->server bytes forwarded after the trigger message
  serverCompleted: boolean; // drop-reply: the server sent ReadyForQuery after the trigger
}

// Incremental splitter for typed protocol messages; keeps bodies only for the types asked for.
class MessageSplitter {
  private header = Buffer.alloc(0);
  private remaining = 0; // body bytes still to come for the current message
  private type = 0;
  private body: Buffer[] | null = null;
  private started: boolean;

  constructor(
    hasStartupPacket: boolean,
    private readonly keep: Set<number>,
  ) {
    this.started = !hasStartupPacket;
  }

  // Returns, for each message completed in chunk, its type, end offset within the chunk and body (if kept).
  push(chunk: Buffer): { type: number; end: number; body: Buffer | null }[] {
    const out: { type: number; end: number; body: Buffer | null }[] = [];
    let i = 0;
    while (i < chunk.length) {
      if (this.remaining === 0 && this.body === null) {
        const need = (this.started ? 5 : 4) - this.header.length;
        const take = Math.min(need, chunk.length - i);
        this.header = Buffer.concat([this.header, chunk.subarray(i, i + take)]);
        i += take;
        if (this.header.length < (this.started ? 5 : 4)) break;
        if (this.started) {
          this.type = this.header[0]!;
          this.remaining = this.header.readInt32BE(1) - 4;
        } else {
          this.type = 0; // startup packet: length includes itself, no type byte
          this.remaining = this.header.readInt32BE(0) - 4;
        }
        this.header = Buffer.alloc(0);
        this.body = this.keep.has(this.type) ? [] : null;
        if (this.remaining === 0) {
          out.push({ type: this.type, end: i, body: this.body ? Buffer.alloc(0) : null });
          this.body = null;
          if (!this.started) this.started = true;
          continue;
        }
      }
      const take = Math.min(this.remaining, chunk.length - i);
      if (this.body) this.body.push(chunk.subarray(i, i + take));
      this.remaining -= take;
      i += take;
      if (this.remaining === 0) {
        out.push({ type: this.type, end: i, body: this.body ? Buffer.concat(this.body) : null });
        this.body = null;
        if (!this.started) this.started = true;
      }
    }
    return out;
  }
}

const Q = 'Q'.charCodeAt(0);
const P = 'P'.charCodeAt(0);
const Z = 'Z'.charCodeAt(0);

function statementText(type: number, body: Buffer): string {
  if (type === Q) return body.toString('utf8', 0, Math.max(0, body.indexOf(0)));
  // Parse: statement name \0, query \0, ...
  const nameEnd = body.indexOf(0);
  const queryEnd = body.indexOf(0, nameEnd + 1);
  return body.toString('utf8', nameEnd + 1, queryEnd < 0 ? body.length : queryEnd);
}

export class FaultProxy {
  private server: net.Server;
  private plan: FaultPlan | null = null;
  private resolveFired: ((r: FaultReport) => void) | null = null;
  private sockets = new Set<net.Socket>();
  private generation = 0; // disarm() ends faults that matched but have not fired yet
  private refusing = false; // down(): the server is away until up()
  private stalled = false; // stall(): every byte either way is held until heal()
  private readonly onHeal = new Set<() => void>();
  // A slow server (or network): every server->client chunk reaches the client this much later, in order. Changed at
  // any time; a chunk already on its way keeps the delay it got.
  latencyMs = 0;
  port = 0;

  private constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {
    this.server = net.createServer((client) => this.onConnection(client));
  }

  static async start(targetHost: string, targetPort: number): Promise<FaultProxy> {
    const p = new FaultProxy(targetHost, targetPort);
    await new Promise<void>((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.port = (p.server.address() as net.AddressInfo).port;
    return p;
  }

  // Rewrites a postgres:// URL to go through the proxy.
  urlFor(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  // Arms a one-shot fault; the promise resolves when it fired.
  arm(plan: FaultPlan): Promise<FaultReport> {
    this.plan = plan;
    return new Promise((resolve) => {
      this.resolveFired = resolve;
    });
  }

  disarm(): void {
    this.generation++;
    this.plan = null;
    this.resolveFired = null;
  }

  get armed(): boolean {
    return this.plan !== null;
  }

  // An outage: every connection is cut and new ones are closed at once until up() (a restart or a network cut,
  // without stopping the run's shared server).
  down(): void {
    this.refusing = true;
    for (const s of this.sockets) s.destroy();
  }

  up(): void {
    this.refusing = false;
  }

  // A partition: connections stay open, nothing reaches either side until heal().
  stall(): void {
    this.stalled = true;
  }

  heal(): void {
    this.stalled = false;
    for (const f of [...this.onHeal]) f();
  }

  get isStalled(): boolean {
    return this.stalled;
  }

  private onConnection(client: net.Socket) {
    if (this.refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(this.targetPort, this.targetHost);
    this.sockets.add(client);
    this.sockets.add(upstream);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const kill = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', kill);
    upstream.on('error', kill);
    client.on('close', () => {
      upstream.destroy();
      this.sockets.delete(client);
    });
    upstream.on('close', () => {
      client.destroy();
      this.sockets.delete(upstream);
    });

    const fromClient = new MessageSplitter(true, new Set([Q, P]));
    const fromServer = new MessageSplitter(false, new Set());
    let active: {
      plan: FaultPlan;
      sql: string;
      forwarded: number;
      report: (r: FaultReport) => void;
      generation: number;
    } | null = null;
    let cut = false;
    let held: Buffer[] | null = null; // delay-request: client bytes held back
    let serverBytes = 0; // cut-after-server-bytes: server->client bytes forwarded after the trigger
    // latencyMs: chunks on their way to the client, each with when it is due (never before the one ahead of it).
    const late: { at: number; chunk: Buffer }[] = [];
    let lateTimer: ReturnType<typeof setTimeout> | undefined;
    const deliverLate = () => {
      lateTimer = undefined;
      const now = Date.now();
      while (late.length && late[0]!.at <= now) client.write(late.shift()!.chunk);
      if (late.length) lateTimer = setTimeout(deliverLate, late[0]!.at - now);
    };
    const toClient = (chunk: Buffer) => {
      if (this.latencyMs <= 0 && late.length === 0) return void client.write(chunk);
      late.push({ at: Math.max(Date.now() + this.latencyMs, late.at(-1)?.at ?? 0), chunk });
      lateTimer ??= setTimeout(deliverLate, late[0]!.at - Date.now());
    };
    client.on('close', () => clearTimeout(lateTimer));

    const fire = (serverCompleted: boolean) => {
      if (cut || !active || active.generation !== this.generation) return;
      cut = true;
      active.report({
        kind: active.plan.kind,
        sql: active.sql,
        forwardedAfterTrigger: active.forwarded,
        serverCompleted,
      });
      kill();
    };

    // stall(): bytes either way wait here, in order, for heal().
    const heldUp: Buffer[] = [];
    const heldDown: Buffer[] = [];
    const onHeal = () => {
      for (const c of heldUp.splice(0)) onClientData(c);
      for (const c of heldDown.splice(0)) onServerData(c);
    };
    this.onHeal.add(onHeal);
    client.on('close', () => this.onHeal.delete(onHeal));
    client.on('data', (chunk: Buffer) => {
      if (this.stalled || heldUp.length) return void heldUp.push(chunk);
      onClientData(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (this.stalled || heldDown.length) return void heldDown.push(chunk);
      onServerData(chunk);
    });
    const onClientData = (chunk: Buffer): void => {
      if (cut) return;
      // A fault that matched and has not fired ends with disarm(); a held request and a silent peer stay as they are.
      if (active && active.generation !== this.generation && !held && active.plan.kind !== 'blackhole') active = null;
      if (active) {
        if (active.plan.kind === 'blackhole') return;
        if (active.plan.kind === 'delay-request' && held) {
          held.push(chunk);
          return;
        }
        if (active.plan.kind === 'cut-after-bytes') {
          const allowed = active.plan.bytes - active.forwarded;
          if (chunk.length >= allowed) {
            if (allowed > 0) upstream.write(chunk.subarray(0, allowed));
            active.forwarded += Math.max(0, allowed);
            // let the partial write leave before cutting
            cut = true;
            const a = active;
            setImmediate(() => {
              a.report({ kind: a.plan.kind, sql: a.sql, forwardedAfterTrigger: a.forwarded, serverCompleted: false });
              kill();
            });
            return;
          }
        }
        active.forwarded += chunk.length;
        upstream.write(chunk);
        return;
      }
      const messages = fromClient.push(chunk);
      const plan = this.plan;
      if (plan) {
        for (const m of messages) {
          if (!m.body || (m.type !== Q && m.type !== P)) continue;
          const sql = statementText(m.type, m.body);
          if (!plan.trigger(sql)) continue;
          const report = this.resolveFired!;
          this.plan = null;
          this.resolveFired = null;
          active = { plan, sql, forwarded: 0, report, generation: this.generation };
          if (plan.kind === 'delay-request') {
            // Forward what precedes the trigger message; hold the message and everything after it.
            const start = Math.max(0, m.end - (m.body.length + 5));
            upstream.write(chunk.subarray(0, start));
            held = [chunk.subarray(start)];
            const a = active;
            setTimeout(() => {
              if (cut) return;
              for (const h of held ?? []) upstream.write(h);
              a.forwarded += (held ?? []).reduce((n, h) => n + h.length, 0);
              held = null;
              a.report({ kind: a.plan.kind, sql: a.sql, forwardedAfterTrigger: a.forwarded, serverCompleted: false });
            }, plan.delayMs);
            return;
          }
          // Forward through the end of the trigger message; the rest of the chunk counts as "after".
          upstream.write(chunk.subarray(0, m.end));
          const rest = chunk.subarray(m.end);
          if (plan.kind === 'blackhole') {
            active.report({ kind: plan.kind, sql, forwardedAfterTrigger: 0, serverCompleted: false });
            return;
          }
          if (plan.kind === 'cut-after-server-bytes') {
            upstream.write(rest);
            active.forwarded += rest.length;
          } else if (plan.kind === 'cut-after-ms') {
            upstream.write(rest);
            active.forwarded += rest.length;
            setTimeout(() => fire(false), plan.delayMs);
          } else if (plan.kind === 'drop-reply') {
            upstream.write(rest);
            active.forwarded += rest.length;
          } else if (rest.length > 0) {
            client.emit('data', rest); // goes through the byte-limit branch above
          }
          return;
        }
      }
      upstream.write(chunk);
    };

    const onServerData = (chunk: Buffer): void => {
      if (cut) return;
      if (active && active.plan.kind === 'blackhole') return; // never reply (even after disarm: the peer is gone silent)
      if (active && active.generation !== this.generation && active.plan.kind !== 'drop-reply') active = null;
      if (active && active.plan.kind === 'cut-after-server-bytes') {
        const allowed = active.plan.bytes - serverBytes;
        if (chunk.length >= allowed) {
          if (allowed > 0) client.write(chunk.subarray(0, allowed));
          serverBytes += Math.max(0, allowed);
          cut = true;
          const a = active;
          setImmediate(() => {
            a.report({ kind: a.plan.kind, sql: a.sql, forwardedAfterTrigger: serverBytes, serverCompleted: false });
            kill();
          });
          return;
        }
        serverBytes += chunk.length;
        client.write(chunk);
        return;
      }
      if (active && active.plan.kind === 'drop-reply') {
        // Swallow the reply; cut once the server is idle again (statement and its commit are done).
        const messages = fromServer.push(chunk);
        if (messages.some((m) => m.type === Z)) {
          const hold = active.plan.holdMs ?? 0;
          cut = true;
          const a = active;
          setTimeout(() => {
            a.report({ kind: a.plan.kind, sql: a.sql, forwardedAfterTrigger: a.forwarded, serverCompleted: true });
            kill();
          }, hold);
        }
        return;
      }
      fromServer.push(chunk);
      toClient(chunk);
    };
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
