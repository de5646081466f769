// A plain TCP forwarder to a PostgreSQL server that can go down and come back: down() cuts every connection and
// refuses new ones (each is closed at once) until up(). For tests of what a client does while the server is away
// without stopping the run's shared server.
import net from 'node:net';

export class OutageProxy {
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private refusing = false;
  port = 0;

  private constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {
    this.server = net.createServer((client) => this.onConnection(client));
  }

  static async start(url: string): Promise<OutageProxy> {
    const u = new URL(url);
    const p = new OutageProxy(u.hostname, Number(u.port || 5432));
    await new Promise<void>((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.port = (p.server.address() as net.AddressInfo).port;
    return p;
  }

  // The same URL through the proxy.
  urlFor(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  down(): void {
    this.refusing = true;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  up(): void {
    this.refusing = false;
  }

  private onConnection(client: net.Socket): void {
    if (this.refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(this.targetPort, this.targetHost);
    this.sockets.add(client);
    this.sockets.add(upstream);
    const kill = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('error', kill);
    upstream.on('error', kill);
    client.on('close', kill);
    upstream.on('close', kill);
    client.pipe(upstream);
    upstream.pipe(client);
  }

  async close(): Promise<void> {
    this.down();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
