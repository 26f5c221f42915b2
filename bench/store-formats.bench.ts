/**
 * The token store's format, chosen by measurement: one Search-R1-shaped step's token columns written by
 * bench/store_formats.py (Parquet with zstd, brotli, gzip, snappy or no compression; NumPy-style column files with
 * zlib) and read here as the editor reads them — hyparquet, pages decompressed by Node's own zlib (brotli, gzip),
 * hyparquet's snappy, or zstd through `fzstd` when it is installed (it is not a dependency: Node 20 has no zstd) —
 * every column, and the audit's four. Same data, same run.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import * as zlib from 'node:zlib';
import { execa } from 'execa';
import { parquetMetadata, parquetRead } from 'hyparquet';
import { findPython, pythonCandidates } from '../src/core/python';
import { BENCH_DIR } from './data';

const ROOT = resolve(__dirname, '..');
const AUDIT = ['role', 'loss_mask', 'rollout_logprob', 'logprob'];

function compressors(): Record<string, (b: Uint8Array, n: number) => Uint8Array> {
  const c: Record<string, (b: Uint8Array, n: number) => Uint8Array> = {
    BROTLI: (b) => zlib.brotliDecompressSync(b),
    GZIP: (b) => zlib.gunzipSync(b),
  };
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const fzstd = require('fzstd') as { decompress(b: Uint8Array, out?: Uint8Array): Uint8Array };
    c.ZSTD = (b, n) => fzstd.decompress(b, new Uint8Array(n));
  } catch {
    /* not installed */
  }
  return c;
}

async function readParquet(
  path: string,
  columns: string[] | undefined,
  comp: ReturnType<typeof compressors>,
): Promise<number> {
  const buf = readFileSync(path);
  const file = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
  const metadata = parquetMetadata(file);
  let best = Infinity;
  for (let r = 0; r < 3; r++) {
    const t0 = performance.now();
    await parquetRead({ file, metadata, columns, compressors: comp, onChunk: () => {} });
    best = Math.min(best, (performance.now() - t0) / 1000);
  }
  return best;
}

export async function run(): Promise<string[]> {
  const dir = join(BENCH_DIR, 'store-formats');
  const found = await findPython(pythonCandidates([], ROOT));
  if (!found.found) throw new Error('bench store-formats: no Python with torch and pyarrow');
  const p = await execa(found.found.executable, [join(ROOT, 'bench', 'store_formats.py'), dir], {
    env: { PYTHONPATH: join(ROOT, 'trainer') },
    stderr: 'inherit',
  });
  const w = JSON.parse(p.stdout) as {
    tokens: number;
    raw_bytes_per_token: number;
    variants: Record<string, { bytes_per_token: number; write_tokens_per_s: number }>;
  };
  const comp = compressors();
  const lines: string[] = [
    `${w.tokens} tokens (raw ${w.raw_bytes_per_token.toFixed(1)} bytes/token); write = one thread of pyarrow / Python zlib; read = Node, M tokens/s`,
  ];
  for (const [name, v] of Object.entries(w.variants)) {
    let read = 'n/a';
    if (name.startsWith('parquet-')) {
      const codec = name.replace('parquet-', '').replace(/\d+$/, '').toUpperCase();
      if (codec === 'ZSTD' && !comp.ZSTD) read = 'no zstd decoder in Node 20 (fzstd not installed)';
      else {
        const path = join(dir, `${name}.parquet`);
        const all = await readParquet(path, undefined, comp);
        const audit = await readParquet(path, AUDIT, comp);
        read = `all ${(w.tokens / all / 1e6).toFixed(1)}, audit's 4 ${(w.tokens / audit / 1e6).toFixed(1)}`;
      }
    } else {
      const index = JSON.parse(readFileSync(join(dir, name, 'index.json'), 'utf8')) as Record<string, unknown>;
      const t = (cols: string[]) => {
        const t0 = performance.now();
        for (const k of cols) zlib.inflateSync(readFileSync(join(dir, name, `${k}.bin`)));
        return (performance.now() - t0) / 1000;
      };
      read = `all ${(w.tokens / t(Object.keys(index)) / 1e6).toFixed(1)}, audit's 4 ${(w.tokens / t(AUDIT) / 1e6).toFixed(1)} (inflate only, no un-shuffle)`;
    }
    lines.push(
      `${name}: ${v.bytes_per_token.toFixed(2)} bytes/token, write ${(v.write_tokens_per_s / 1e6).toFixed(1)} M tokens/s, read ${read}`,
    );
  }
  for (const l of lines) console.log(`  ${l}`);
  return lines;
}
