/**
 * A retriever that ignores the query (issue 46, `whatif --ablate`): each query gets `topk` documents drawn at random
 * from a pool (the run's corpus, or the documents its recorded searches returned), seeded by the query, so a fork is
 * reproducible. What a policy does with documents unrelated to its search, beside what it does with none
 * (NullRetriever) and with its own retriever's: did it learn to use what it retrieves?
 */
import type { RetrievedDocument, RetrievedHit, Retriever } from './retriever';

/** mulberry32: a small seeded PRNG (uniform in [0, 1)); the benchmarks' inputs use it too (bench/util.ts). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const seedOf = (s: string, base: number) => {
  let h = 0x811c9dc5 ^ base;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
};

export class RandomRetriever implements Retriever {
  readonly kind = 'random';
  constructor(
    private readonly pool: readonly RetrievedDocument[],
    private readonly seed = 0,
  ) {}

  get size(): number {
    return this.pool.length;
  }

  describe(): Record<string, unknown> {
    return { kind: this.kind, documents: this.pool.length, seed: this.seed };
  }

  async retrieve(queries: string[], topk: number): Promise<RetrievedHit[][]> {
    return queries.map((q) => {
      const next = rng(seedOf(q, this.seed));
      const k = Math.min(topk, this.pool.length);
      const picked = new Set<number>();
      while (picked.size < k) picked.add(Math.floor(next() * this.pool.length));
      return [...picked].map((i) => ({ document: this.pool[i]!, score: 0 }));
    });
  }

  async close(): Promise<void> {}
}
