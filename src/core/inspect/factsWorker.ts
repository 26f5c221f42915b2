/**
 * A facts thread of the inspector (bundled as dist/inspector-facts-worker.js; factsPool.ts): builds the row facts of a
 * range of one token-store step, as the engine's thread does (storeStepRows, then rowFacts), and posts them back a
 * batch at a time. One task at a time; a cancelled one stops between two batches.
 */
import { parentPort } from 'node:worker_threads';
import type { AuditOptions } from '../audit';
import type { RowFacts } from '../protocol/rollouts';
import { storeStepRows } from '../store/rollouts';
import { StoreStep } from '../store/tokenStore';
import { runTokenizer } from '../tokens/tokenizer';
import type { FactsReply, FactsRequest } from './factsPool';
import { rowFacts } from './table';

const port = parentPort;
if (!port) throw new Error('inspector-facts-worker runs as a worker thread');
const cancelled = new Set<number>();
const tokenizers = new Map<string, ReturnType<typeof runTokenizer>>();
let queue = Promise.resolve();

port.on('message', (m: FactsRequest) => {
  if (m.t === 'cancel') {
    cancelled.add(m.id);
    return;
  }
  queue = queue.then(() =>
    task(m).then(
      () => port.postMessage({ t: 'done', id: m.id } satisfies FactsReply),
      (e: Error) => port.postMessage({ t: 'error', id: m.id, message: e.message } satisfies FactsReply),
    ),
  );
});

async function task(m: Extract<FactsRequest, { t: 'task' }>): Promise<void> {
  const checks = { ...m.checks } as Omit<AuditOptions, 'read'>;
  if (m.tokenizer) {
    const key = JSON.stringify([m.tokenizer.path, m.tokenizer.named ?? null]);
    let t = tokenizers.get(key);
    if (!t) tokenizers.set(key, (t = runTokenizer(m.tokenizer.path, m.tokenizer.named)));
    const codec = (await t).codec;
    if (codec?.name !== m.tokenizer.name)
      throw new Error(`the drift check's tokenizer ${m.tokenizer.name} did not load here (${codec?.name ?? 'none'})`);
    checks.tokenizer = codec;
  }
  const step = await StoreStep.open(m.file);
  try {
    for (let lo = m.from; lo < m.to; lo += m.batch) {
      if (cancelled.has(m.id)) return;
      const hi = Math.min(m.to, lo + m.batch);
      const rows = await storeStepRows(step, lo, hi, m.read, m.tokens);
      const facts: RowFacts[] = new Array(rows.length);
      for (let k = 0; k < rows.length; k++) {
        const f = rowFacts({ index: m.base + lo + k, ...rows[k]! }, m.read, checks);
        f.file = ''; // the engine puts the step's path back: one string for all its rows, not one copy each
        facts[k] = f;
      }
      port!.postMessage({ t: 'rows', id: m.id, from: lo, rows: facts } satisfies FactsReply);
      await new Promise<void>((r) => setImmediate(r)); // a cancel gets in
    }
  } finally {
    cancelled.delete(m.id);
  }
}
