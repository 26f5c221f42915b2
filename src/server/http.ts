/** Small HTTP helpers for the env server: bounded JSON bodies and JSON answers with clear errors. */
import type { IncomingMessage, ServerResponse } from 'node:http';

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

/** Reads a request body of at most `limitBytes` and parses it as JSON; 400/413 with a message otherwise. */
export async function readJson(req: IncomingMessage, limitBytes: number): Promise<unknown> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limitBytes) {
    req.resume();
    throw new HttpError(413, `request body is ${declared} bytes; the limit is ${limitBytes}`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limitBytes) {
      req.resume();
      throw new HttpError(413, `request body exceeds the limit of ${limitBytes} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') throw new HttpError(400, 'request body is empty; expected JSON');
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new HttpError(400, `request body is not valid JSON: ${(e as Error).message}`);
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
  });
  res.end(text);
}

/**
 * `{ "<key>": [ …list ] }`, written without ever making the whole answer one string: each entry is stringified on its
 * own and the text goes out in pieces of about 1 MB. A large answer (a /reward request of 65,536 rollouts, each with
 * its parts and perhaps an error) cannot then fail at V8's largest string (~512 M characters) and lose the request.
 */
export function sendJsonList(res: ServerResponse, status: number, key: string, list: readonly unknown[]): void {
  const pieces: Buffer[] = [];
  let size = 0;
  let pending = '';
  const flush = () => {
    const b = Buffer.from(pending, 'utf8');
    pieces.push(b);
    size += b.length;
    pending = '';
  };
  pending = `{${JSON.stringify(key)}:[`;
  for (let i = 0; i < list.length; i++) {
    pending += (i ? ',' : '') + JSON.stringify(list[i]);
    if (pending.length >= 1 << 20) flush();
  }
  pending += ']}';
  flush();
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': size,
    'cache-control': 'no-store',
  });
  for (const b of pieces) res.write(b);
  res.end();
}
