/**
 * What a file is, read from its first bytes, before choosing a reader: the top-level keys of a JSON-lines file's
 * first object (scanned as a stream, without parsing its values, so a 150k-token line whose `loss_mask` comes after
 * megabytes of `token_ids` is still recognised), and whether a file we would read as text is compressed or binary.
 */
import { open } from 'node:fs/promises';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const NL = 0x0a;

/** The longest first line {@link firstLineKeys} scans (beyond it the keys seen so far are what it returns). */
export const KEY_SCAN_BYTES = 256 * 2 ** 20;

/**
 * The top-level keys of the first non-blank line's JSON object, in order, read in chunks: strings are skipped byte
 * by byte (escapes honoured), nested arrays and objects only counted, and a key is a string at depth 1 followed by
 * `:`. Stops at the line's end, after `maxBytes`, or as soon as `enough(keys)` says the keys seen decide. A line
 * that is not an object gives no keys.
 */
export async function firstLineKeys(
  file: string,
  options: { maxBytes?: number; chunkBytes?: number; enough?: (keys: ReadonlySet<string>) => boolean } = {},
): Promise<Set<string>> {
  const keys = new Set<string>();
  const fh = await open(file, 'r').catch(() => undefined);
  if (!fh) return keys;
  const max = options.maxBytes ?? KEY_SCAN_BYTES;
  const buf = Buffer.allocUnsafe(Math.min(options.chunkBytes ?? 2 ** 20, max));
  let depth = 0;
  let started = false;
  let inString = false;
  let escaped = false;
  /** A string at depth 1 being read: its bytes (up to 256), then whether a `:` follows it. */
  let key: number[] | undefined;
  let pending: string | undefined;
  let position = 0;
  try {
    for (;;) {
      if (position >= max) return keys;
      const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, max - position), position);
      if (bytesRead === 0) return keys;
      position += bytesRead;
      for (let i = 0; i < bytesRead; i++) {
        const c = buf[i]!;
        if (inString) {
          if (escaped) escaped = false;
          else if (c === BACKSLASH) escaped = true;
          else if (c === QUOTE) {
            inString = false;
            if (key) pending = Buffer.from(key).toString('utf8');
            key = undefined;
            continue;
          }
          if (key && key.length < 256) key.push(c);
          continue;
        }
        if (c === 0x20 || c === 0x09 || c === 0x0d) continue;
        if (c === NL) {
          if (started) return keys;
          continue;
        }
        if (!started) {
          if (c !== 0x7b) return keys; // `{`: not an object
          started = true;
          depth = 1;
          continue;
        }
        if (pending !== undefined) {
          if (c === 0x3a) {
            keys.add(pending);
            if (options.enough?.(keys)) return keys;
          }
          pending = undefined;
        }
        if (c === QUOTE) {
          inString = true;
          if (depth === 1) key = [];
        } else if (c === 0x7b || c === 0x5b) depth++;
        else if (c === 0x7d || c === 0x5d) {
          depth--;
          if (depth === 0) return keys;
        }
      }
    }
  } finally {
    await fh.close();
  }
}

/**
 * Why a file we would read as text (JSON lines, transcripts) is not text, from its first 8 KB: a compressed file by
 * its magic number, else a binary one (a NUL byte, or bytes that are not UTF-8). Undefined for text.
 */
export async function binaryKind(file: string): Promise<string | undefined> {
  const fh = await open(file, 'r').catch(() => undefined);
  if (!fh) return undefined;
  let head: Buffer;
  try {
    const buf = Buffer.alloc(8192);
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    head = buf.subarray(0, bytesRead);
  } catch {
    return undefined; // a directory, or unreadable: the reader says why
  } finally {
    await fh.close();
  }
  const starts = (...bytes: number[]) => bytes.every((b, i) => head[i] === b);
  if (starts(0x1f, 0x8b)) return 'gzip';
  if (starts(0x28, 0xb5, 0x2f, 0xfd)) return 'zstd';
  if (starts(0x42, 0x5a, 0x68)) return 'bzip2';
  if (starts(0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00)) return 'xz';
  if (starts(0x50, 0x4b, 0x03, 0x04)) return 'zip';
  if (starts(0x50, 0x41, 0x52, 0x31)) return 'parquet';
  if (head.includes(0)) return 'binary';
  // a multi-byte character cut at 8 KB is not a fault: leave out up to 3 trailing bytes of an unfinished one
  let end = head.length;
  for (let k = 1; k <= 3 && end - k >= 0; k++) {
    const b = head[end - k]!;
    if ((b & 0xc0) === 0xc0) {
      end -= k;
      break;
    }
    if ((b & 0x80) === 0) break;
  }
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(head.subarray(0, end));
  } catch {
    return 'binary';
  }
  return undefined;
}

/** The sentence for a file {@link binaryKind} found not to be text (the CLI exits 2 with it). */
export function binaryMessage(kind: string, file: string): string {
  if (kind === 'binary')
    return 'a binary file (not UTF-8 text): not a format we read (expected JSON lines, transcripts, parquet, .pt or .pkl)';
  if (kind === 'parquet') return 'a parquet file: name it with the .parquet extension (a TRL completion table)';
  const undo: Record<string, string> = {
    gzip: `gunzip -k ${file}`,
    zstd: `zstd -d ${file}`,
    bzip2: `bunzip2 -k ${file}`,
    xz: `unxz -k ${file}`,
    zip: `unzip ${file}`,
  };
  return `${kind}-compressed: not a format we read; decompress it first (${undo[kind]}) and open what it holds`;
}
