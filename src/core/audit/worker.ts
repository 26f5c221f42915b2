/**
 * The dashboard's audit thread (bundled as dist/audit-worker.js): one {@link RunAudit} per run directory behind
 * `parentPort`, so re-tokenising and checking a big run's rollouts does not run on the extension host's thread
 * (which also serves every other extension's requests). Requests are answered in order; see {@link AuditThread}.
 */
import { parentPort } from 'node:worker_threads';
import { RunAudit } from './run';
import type { AuditReply, AuditRequest } from './thread';

const port = parentPort;
if (!port) throw new Error('audit-worker runs as a worker thread');
const audits = new Map<string, RunAudit>();
let queue = Promise.resolve();

port.on('message', (m: AuditRequest) => {
  if (m.t === 'forget') {
    audits.delete(m.dir);
    return;
  }
  queue = queue.then(async () => {
    let audit = audits.get(m.dir);
    if (!audit) audits.set(m.dir, (audit = new RunAudit(m.dir)));
    try {
      port.postMessage({ t: 'steps', req: m.req, steps: await audit.update() } satisfies AuditReply);
    } catch (e) {
      port.postMessage({ t: 'error', req: m.req, message: (e as Error).message } satisfies AuditReply);
    }
  });
});
