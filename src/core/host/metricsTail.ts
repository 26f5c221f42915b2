/**
 * Following a growing metrics.jsonl: each read returns the complete lines appended since the last one (a line being
 * written is kept until its newline arrives); a malformed line is reported by number and skipped; a file that
 * shrank (a resumed run truncates after its checkpoint) starts over with `reset`.
 */
import { open, stat } from 'node:fs/promises';
import type { MetricsRow } from '../protocol/dashboard';

export interface TailRead {
  rows: MetricsRow[];
  reset: boolean;
  malformed: { line: number; message: string }[];
}

export class MetricsTail {
  private offset = 0;
  private line = 0;
  private partial = '';

  constructor(readonly file: string) {}

  async read(maxBytes = 8 * 1024 * 1024): Promise<TailRead> {
    const out: TailRead = { rows: [], reset: false, malformed: [] };
    let size: number;
    try {
      size = (await stat(this.file)).size;
    } catch {
      return out;
    }
    if (size < this.offset) {
      this.offset = 0;
      this.line = 0;
      this.partial = '';
      out.reset = true;
    }
    if (size === this.offset) return out;
    const h = await open(this.file, 'r');
    try {
      const length = Math.min(size - this.offset, maxBytes);
      const buf = Buffer.alloc(length);
      const { bytesRead } = await h.read(buf, 0, length, this.offset);
      this.offset += bytesRead;
      const text = this.partial + buf.subarray(0, bytesRead).toString('utf8');
      const lines = text.split('\n');
      this.partial = lines.pop() ?? '';
      for (const l of lines) {
        this.line++;
        if (!l.trim()) continue;
        try {
          const row = JSON.parse(l) as MetricsRow;
          if (typeof row.step !== 'number') throw new Error('no numeric "step"');
          out.rows.push(row);
        } catch (e) {
          out.malformed.push({ line: this.line, message: (e as Error).message });
        }
      }
    } finally {
      await h.close();
    }
    return out;
  }
}
