/**
 * The host's side of the audit thread (src/core/audit/worker.ts, dist/audit-worker.js): `update(dir)` is
 * {@link RunAudit.update} for that run, run on a worker thread. The thread is started on first use; if it dies,
 * the pending updates fail with its error and the next update starts a new one (the run is audited afresh).
 */
import type { Worker } from 'node:worker_threads';
import { spawnWorker } from '../workers';
import type { StepAudit } from './series';

export type AuditRequest = { t: 'update'; req: number; dir: string } | { t: 'forget'; dir: string };
export type AuditReply =
  | { t: 'steps'; req: number; steps: StepAudit[] | undefined }
  | { t: 'error'; req: number; message: string };

export class AuditThread {
  private worker: Worker | undefined;
  private next = 1;
  private readonly pending = new Map<
    number,
    { worker: Worker; resolve(s: StepAudit[] | undefined): void; reject(e: Error): void }
  >();

  private start(): Worker {
    const w = spawnWorker(__dirname, 'audit-worker.js', 'worker.ts');
    w.unref();
    w.on('message', (m: AuditReply) => {
      const p = this.pending.get(m.req);
      this.pending.delete(m.req);
      if (m.t === 'steps') p?.resolve(m.steps);
      else p?.reject(new Error(m.message));
    });
    const fail = (e: Error) => {
      if (this.worker === w) this.worker = undefined;
      for (const [req, p] of this.pending) {
        if (p.worker !== w) continue;
        this.pending.delete(req);
        p.reject(e);
      }
    };
    w.on('error', fail);
    w.on('exit', (code) => fail(new Error(`the audit thread exited (code ${code})`)));
    return w;
  }

  /** The run's per-step audit when a rollouts file is new or changed since its last update; undefined otherwise. */
  update(dir: string): Promise<StepAudit[] | undefined> {
    this.worker ??= this.start();
    const req = this.next++;
    const w = this.worker;
    return new Promise((resolve, reject) => {
      this.pending.set(req, { worker: w, resolve, reject });
      w.postMessage({ t: 'update', req, dir } satisfies AuditRequest);
    });
  }

  /** Drops the thread's state for a run (the dashboard stopped showing it). */
  forget(dir: string): void {
    this.worker?.postMessage({ t: 'forget', dir } satisfies AuditRequest);
  }

  async dispose(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    await w?.terminate();
  }
}
