/**
 * The inspector's worker thread (bundled as dist/inspector-worker.js): an {@link InspectorEngine} behind
 * `parentPort`. Requests are handled as they arrive — a page request is answered between two batches of a long
 * analysis or search — and the engine cancels superseded queries itself.
 */
import { parentPort } from 'node:worker_threads';
import { type EngineMessage, type EngineRequest, InspectorEngine } from './engine';

const port = parentPort;
if (!port) throw new Error('inspector-worker runs as a worker thread');
const engine = new InspectorEngine((m: EngineMessage) => port.postMessage(m));
port.on('message', (m: EngineRequest) => {
  engine.handle(m).then(
    () => {
      if (m.t === 'close') port.close();
    },
    (e: Error) =>
      port.postMessage({ t: 'status', status: { ...engine.status(), error: `${e.message}` } } satisfies EngineMessage),
  );
});
