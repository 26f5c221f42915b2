/**
 * The env server (DESIGN §2, §4.4): Search-R1's `/retrieve`, our `/reward`, and `/health`, over JSON on
 * 127.0.0.1 only. It never crashes on a request: every handler's error becomes a JSON answer.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HttpError, readJson, sendJson } from './http';

export interface EnvServerOptions {
  /** 0 picks a free port. */
  port?: number;
  /** Bytes; bodies over it get 413. */
  maxBodyBytes?: number;
  /** One line per request batch. */
  log?: (line: string) => void;
  version: string;
}

type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

export interface EnvServer {
  readonly port: number;
  readonly server: Server;
  close(): Promise<void>;
}

/** The address the env server binds: loopback only, by design. */
export const ENV_SERVER_HOST = '127.0.0.1';

export async function startEnvServer(options: EnvServerOptions): Promise<EnvServer> {
  const started = Date.now();
  const maxBodyBytes = options.maxBodyBytes ?? 16 * 1024 * 1024;
  const log = options.log ?? (() => {});

  const routes: Record<string, Partial<Record<string, Handler>>> = {
    '/health': {
      GET: async (_req, res) =>
        sendJson(res, 200, {
          status: 'ok',
          version: options.version,
          uptime_s: (Date.now() - started) / 1000,
          retriever: null,
          reward: null,
        }),
    },
    '/retrieve': {
      POST: async (req) => {
        await readJson(req, maxBodyBytes);
        throw new HttpError(501, 'no retriever is configured in this build: retrieval lands with the retrieval issue');
      },
    },
    '/reward': {
      POST: async (req) => {
        await readJson(req, maxBodyBytes);
        throw new HttpError(501, 'no reward module is configured in this build: /reward lands with the rewards issue');
      },
    },
  };

  const server = createServer((req, res) => {
    const t0 = performance.now();
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const route = routes[path];
    const handler = route?.[req.method ?? 'GET'];
    const done = (status: number) => log(`${req.method} ${path} ${status} ${(performance.now() - t0).toFixed(1)}ms`);
    if (!route) {
      sendJson(res, 404, { error: `no such endpoint: ${path}` });
      return done(404);
    }
    if (!handler) {
      res.setHeader('allow', Object.keys(route).join(', '));
      sendJson(res, 405, { error: `${req.method} is not allowed on ${path}` });
      return done(405);
    }
    handler(req, res).then(
      () => done(res.statusCode),
      (e: unknown) => {
        const status = e instanceof HttpError ? e.status : 500;
        const message = e instanceof Error ? e.message : String(e);
        if (!res.headersSent) sendJson(res, status, { error: message });
        else res.destroy();
        done(status);
      },
    );
  });
  server.keepAliveTimeout = 5_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, ENV_SERVER_HOST, () => {
      server.off('error', reject);
      resolve();
    });
  });

  return {
    port: (server.address() as AddressInfo).port,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
  };
}
