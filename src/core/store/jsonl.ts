/**
 * A JSONL file of any size, by rows: a line-offset index built in one streaming pass over fixed-size chunks
 * (never a whole-file string), random access to row i, ranges of rows in one read, and following a file that
 * a writer is appending to.
 *
 * Rows are the non-blank lines. A last line without a newline is "pending" while the file is followed (the
 * writer may be mid-line); it becomes a row when following ends ({@link JsonlFile.finish}) or when the file is
 * opened without following. Rows are parsed only when read, so the index costs 20 bytes per row.
 */
import { constants as bufferConstants } from 'node:buffer';
import { type FileHandle, open, stat } from 'node:fs/promises';

/** The longest string V8 holds (about 512 MiB): a longer line cannot be read as text. */
const MAX_STRING_LENGTH = bufferConstants.MAX_STRING_LENGTH;

const CHUNK = 4 * 1024 * 1024;
const NL = 0x0a;
const CR = 0x0d;

export interface RawRow {
  /** Row number (0-based, over non-blank lines). */
  index: number;
  /** Line number in the file (1-based). */
  line: number;
  text: string;
}

export interface IndexProgress {
  bytes: number;
  totalBytes: number;
  rows: number;
}

export interface OpenOptions {
  /** Keep a partial last line pending (a writer may still be appending). Default false. */
  follow?: boolean;
  onProgress?: (p: IndexProgress) => void;
  signal?: AbortSignal;
}

/** Growable typed arrays: offsets and ends as float64 (exact to 2^53 bytes), line numbers as uint32. */
class RowIndex {
  starts = new Float64Array(1024);
  ends = new Float64Array(1024);
  lines = new Uint32Array(1024);
  count = 0;

  push(start: number, end: number, line: number): void {
    if (this.count === this.starts.length) {
      const grow = <T extends Float64Array | Uint32Array>(a: T): T => {
        const b = new (a.constructor as new (n: number) => T)(a.length * 2);
        b.set(a);
        return b;
      };
      this.starts = grow(this.starts);
      this.ends = grow(this.ends);
      this.lines = grow(this.lines);
    }
    this.starts[this.count] = start;
    this.ends[this.count] = end;
    this.lines[this.count] = line;
    this.count++;
  }

  bytes(): number {
    return this.starts.byteLength + this.ends.byteLength + this.lines.byteLength;
  }
}

export class JsonlFile {
  private index = new RowIndex();
  /** Where the next scan starts: the start of the first line not yet complete. */
  private scanned = 0;
  /** 1-based number of the line starting at `scanned`. */
  private nextLine = 1;
  private following: boolean;
  private closed = false;

  private constructor(
    readonly path: string,
    private fh: FileHandle,
    follow: boolean,
  ) {
    this.following = follow;
  }

  static async open(path: string, options: OpenOptions = {}): Promise<JsonlFile> {
    const fh = await open(path, 'r');
    const f = new JsonlFile(path, fh, options.follow ?? false);
    try {
      await f.scan(options.onProgress, options.signal);
    } catch (e) {
      await fh.close();
      throw e;
    }
    return f;
  }

  /** Complete rows indexed so far. */
  get count(): number {
    return this.index.count;
  }

  /** Bytes indexed (the partial last line excluded while following). */
  get indexedBytes(): number {
    return this.scanned;
  }

  /** Memory held by the index. */
  get indexBytes(): number {
    return this.index.bytes();
  }

  /** The 1-based file line of row i. */
  lineOf(i: number): number {
    return this.index.lines[i]!;
  }

  /** Byte span of row i (without the newline). */
  spanOf(i: number): [number, number] {
    return [this.index.starts[i]!, this.index.ends[i]!];
  }

  /** Scans from `scanned` to the end of the file, adding complete rows. */
  private async scan(onProgress?: (p: IndexProgress) => void, signal?: AbortSignal): Promise<number> {
    const before = this.index.count;
    const { size } = await this.fh.stat();
    const buf = Buffer.allocUnsafe(CHUNK);
    let pos = this.scanned;
    let lineStart = this.scanned;
    let line = this.nextLine;
    let lastProgress = 0;
    let prevByte = -1; // last byte of the previous chunk (for a "\r\n" split across chunks)
    while (pos < size) {
      if (signal?.aborted) throw signal.reason ?? new Error('aborted');
      const { bytesRead } = await this.fh.read(buf, 0, Math.min(CHUNK, size - pos), pos);
      if (bytesRead === 0) break;
      let p = 0;
      for (;;) {
        const nl = buf.indexOf(NL, p);
        if (nl < 0 || nl >= bytesRead) break;
        const end = pos + nl;
        // A row unless blank ("" or a lone "\r").
        if (end > lineStart && !(end === lineStart + 1 && (nl > 0 ? buf[nl - 1] : prevByte) === CR))
          this.index.push(lineStart, end, line);
        line++;
        lineStart = end + 1;
        p = nl + 1;
      }
      prevByte = buf[bytesRead - 1]!;
      pos += bytesRead;
      if (onProgress && pos - lastProgress >= 64 * CHUNK) {
        lastProgress = pos;
        onProgress({ bytes: pos, totalBytes: size, rows: this.index.count });
      }
    }
    this.scanned = lineStart;
    this.nextLine = line;
    if (!this.following) await this.takePending(pos);
    onProgress?.({ bytes: pos, totalBytes: size, rows: this.index.count });
    return this.index.count - before;
  }

  /** A last line without a newline becomes a row, unless it is only whitespace. */
  private async takePending(size: number): Promise<void> {
    if (size <= this.scanned) return;
    if (size - this.scanned <= 256) {
      const tail = Buffer.allocUnsafe(size - this.scanned);
      await this.readFully(tail, this.scanned);
      if (tail.toString('utf8').trim() === '') return;
    }
    this.index.push(this.scanned, size, this.nextLine);
    this.scanned = size;
    this.nextLine++;
  }

  /**
   * Reads what a writer appended since the last call. Returns the rows added, or `reset: true` when the file
   * shrank (truncated or replaced): the index is then rebuilt from the start.
   */
  async update(): Promise<{ added: number; reset: boolean }> {
    if (this.closed) return { added: 0, reset: false };
    let size: number;
    let sameFile = true;
    try {
      const [a, b] = await Promise.all([this.fh.stat(), stat(this.path)]);
      size = a.size;
      sameFile = a.ino === b.ino && a.dev === b.dev;
    } catch {
      return { added: 0, reset: false };
    }
    if (!sameFile || size < this.scanned || (this.index.count > 0 && size < this.index.ends[this.index.count - 1]!)) {
      if (!sameFile) {
        await this.fh.close();
        this.fh = await open(this.path, 'r');
      }
      this.index = new RowIndex();
      this.scanned = 0;
      this.nextLine = 1;
      return { added: await this.scan(), reset: true };
    }
    return { added: await this.scan(), reset: false };
  }

  /** The writer has ended: a pending partial last line becomes a row. Returns whether one was added. */
  async finish(): Promise<boolean> {
    await this.update();
    this.following = false;
    const { size } = await this.fh.stat();
    const before = this.index.count;
    await this.takePending(size);
    return this.index.count > before;
  }

  /** Bytes of a pending partial last line (0 when there is none). */
  async pendingBytes(): Promise<number> {
    const { size } = await this.fh.stat();
    return Math.max(0, size - this.scanned);
  }

  /** Rows [from, to) in one read (split into reads of at most 64 MB). */
  async readRows(from: number, to: number): Promise<RawRow[]> {
    from = Math.max(0, from);
    to = Math.min(this.index.count, to);
    const rows: RawRow[] = [];
    let k = from;
    while (k < to) {
      const start = this.index.starts[k]!;
      let last = k;
      while (last + 1 < to && this.index.ends[last + 1]! - start <= 64 * 1024 * 1024) last++;
      const end = this.index.ends[last]!;
      const buf = Buffer.allocUnsafe(end - start);
      await this.readFully(buf, start);
      for (let r = k; r <= last; r++) {
        rows.push({
          index: r,
          line: this.index.lines[r]!,
          text: buf.toString('utf8', this.index.starts[r]! - start, this.index.ends[r]! - start),
        });
      }
      k = last + 1;
    }
    return rows;
  }

  async readRow(i: number): Promise<RawRow | undefined> {
    return (await this.readRows(i, i + 1))[0];
  }

  private async readFully(buf: Buffer, position: number): Promise<void> {
    let off = 0;
    while (off < buf.length) {
      const { bytesRead } = await this.fh.read(buf, off, buf.length - off, position + off);
      if (bytesRead === 0) throw new Error(`${this.path}: file shrank while reading (byte ${position + off})`);
      off += bytesRead;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.fh.close();
  }
}

/** A line as {@link readLines} yields it: its text, or, for a line too long to be a string, its size and no text. */
export interface LineItem {
  line: number;
  text: string;
  /** Set (in bytes) when the line is longer than the longest string a reader can hold: `text` is then empty. */
  tooLong?: number;
}

/** The message for a line too long to read (for readers that report and skip it). */
export function tooLongMessage(bytes: number): string {
  return `the line is ${(bytes / 2 ** 20).toFixed(0)} MB, longer than the longest line that can be read (${(MAX_STRING_LENGTH / 2 ** 20).toFixed(0)} MB): skipped`;
}

/**
 * Cuts a stream of chunks into lines, each byte scanned once and copied at most once (a line that spans chunks is
 * kept as a list of its pieces, joined once when it ends), so a 600 MB line costs what 600 MB of short lines do.
 * Lines longer than `maxLineBytes` are not kept (only counted): they come out as `tooLong`.
 */
export class LineSplitter {
  private parts: Buffer[] = [];
  private partBytes = 0;
  private line = 1;
  /** Bytes looked at for a newline, and bytes copied to keep a partial line (for the linearity test). */
  readonly stats = { scanned: 0, copied: 0 };

  constructor(private readonly maxLineBytes: number = MAX_STRING_LENGTH) {}

  /** The lines `chunk` completes (blank lines are skipped but counted). The caller may reuse `chunk` afterwards. */
  *push(chunk: Buffer): Generator<LineItem> {
    let p = 0;
    for (;;) {
      const nl = chunk.indexOf(NL, p);
      this.stats.scanned += (nl < 0 ? chunk.length : nl + 1) - p;
      if (nl < 0) break;
      const item = this.take(chunk.subarray(p, nl));
      if (item) yield item;
      p = nl + 1;
    }
    if (p < chunk.length) {
      const rest = chunk.subarray(p);
      this.partBytes += rest.length;
      if (this.partBytes <= this.maxLineBytes) {
        this.parts.push(Buffer.from(rest));
        this.stats.copied += rest.length;
      } else this.parts = [];
    }
  }

  /** The last line, when the input does not end with a newline. */
  *end(): Generator<LineItem> {
    if (this.partBytes === 0) return;
    const item = this.take(Buffer.alloc(0));
    if (item) yield item;
  }

  private take(piece: Buffer): LineItem | undefined {
    const line = this.line++;
    const bytes = this.partBytes + piece.length;
    const parts = this.parts;
    this.parts = [];
    this.partBytes = 0;
    if (bytes > this.maxLineBytes) return { line, text: '', tooLong: bytes };
    const whole = parts.length === 0 ? piece : Buffer.concat([...parts, piece], bytes);
    const end = bytes > 0 && whole[bytes - 1] === CR ? bytes - 1 : bytes;
    return end > 0 ? { line, text: whole.toString('utf8', 0, end) } : undefined;
  }
}

/**
 * Streams every line of a file in order (for summaries and conversions), in chunks, without an index.
 * Yields `{ line, text }` for non-blank lines; a last line without newline is included; a line too long to hold as
 * a string comes as `{ line, text: '', tooLong }` (readers report it and go on).
 */
export async function* readLines(
  path: string,
  signal?: AbortSignal,
  options: { chunkBytes?: number; maxLineBytes?: number } = {},
): AsyncGenerator<LineItem> {
  const fh = await open(path, 'r');
  try {
    const size = options.chunkBytes ?? CHUNK;
    const buf = Buffer.allocUnsafe(size);
    const lines = new LineSplitter(options.maxLineBytes);
    let position = 0;
    for (;;) {
      if (signal?.aborted) throw signal.reason ?? new Error('aborted');
      const { bytesRead } = await fh.read(buf, 0, size, position);
      if (bytesRead === 0) break;
      position += bytesRead;
      yield* lines.push(buf.subarray(0, bytesRead));
    }
    yield* lines.end();
  } finally {
    await fh.close();
  }
}
