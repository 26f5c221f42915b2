/** Polls `fn` every `pollMs` until it returns a value (not undefined or false), which it resolves to; rejects with
 * "timed out" after `ms`. For tests that wait on a worker, a process or a file being written. */
export async function until<T>(fn: () => T | undefined | false, ms: number, pollMs = 20): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, pollMs));
  }
}
