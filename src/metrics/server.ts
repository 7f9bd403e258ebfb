import { createServer, type Server } from 'node:http';
import type { Registry } from 'prom-client';
import type { Logger } from '../logger.ts';

export interface MetricsServer {
  /** The port it listens on (the one asked for, or the free one picked for 0). */
  port: number;
  close(): Promise<void>;
}

/** `GET /metrics` in Prometheus' text format; everything else is 404. Read-only. */
export async function startMetricsServer(o: {
  registry: Registry;
  host: string;
  port: number;
  logger: Logger;
}): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: metrics are at GET /metrics\n');
      return;
    }
    o.registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': o.registry.contentType }).end(text),
      (err: unknown) => {
        o.logger.warn({ err }, 'metrics could not be collected');
        res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics could not be collected\n');
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr !== null ? addr.port : o.port;
  o.logger.info({ host: o.host, port }, 'metrics endpoint listening');
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
