/** Reading parquet files in bounded row batches with hyparquet (pure JS). */
import { type FileHandle, open } from 'node:fs/promises';
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects } from 'hyparquet';

/** A parquet file that cannot be read: the message names the file (the CLI exits 2 with it). */
export class ParquetReadError extends Error {
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`${path}: ${why}`);
    this.name = 'ParquetReadError';
  }
}

/**
 * Why a file that failed to open is not a parquet file, when it plainly is not one (empty, or not framed by the
 * `PAR1` magic at both ends — a JSONL or CSV named where parquet was expected); undefined when it looks like one
 * (then the reader's own error says what is wrong inside it).
 */
async function notParquet(path: string): Promise<string | undefined> {
  let h: FileHandle | undefined;
  try {
    h = await open(path, 'r');
    const size = (await h.stat()).size;
    if (size === 0) return 'an empty file; expected a parquet file';
    const head = Buffer.alloc(4);
    const tail = Buffer.alloc(4);
    await h.read(head, 0, 4, 0);
    await h.read(tail, 0, 4, Math.max(0, size - 4));
    if (size < 12 || head.toString('latin1') !== 'PAR1' || tail.toString('latin1') !== 'PAR1')
      return `not a parquet file (${head.toString('latin1') === 'PAR1' ? 'its end is cut: no PAR1 footer' : 'it does not begin with the PAR1 magic'})${/\.(jsonl|json|csv|tsv)$/i.test(path) ? '; expected a parquet file' : ''}`;
    return undefined;
  } catch {
    return undefined;
  } finally {
    await h?.close();
  }
}

/** An error opening a parquet file or reading its footer, as a ParquetReadError naming the file. */
async function openError(path: string, e: unknown): Promise<ParquetReadError> {
  const code = (e as NodeJS.ErrnoException).code;
  const why =
    code === 'EISDIR'
      ? 'is a directory; expected a parquet file'
      : code === 'ENOENT'
        ? 'no such file'
        : ((await notParquet(path)) ?? (e as Error).message);
  return new ParquetReadError(
    path,
    why.startsWith('parquet') || why.startsWith('not a parquet') || why.startsWith('an empty')
      ? why
      : `not a readable parquet file: ${why}`,
  );
}

/** Yields the rows of a parquet file as objects, `batch` rows at a time, in order. Errors name the file. */
export async function* parquetRows(path: string, batch = 4096): AsyncGenerator<Record<string, unknown>> {
  let file, metadata;
  try {
    file = await asyncBufferFromFile(path);
    metadata = await parquetMetadataAsync(file);
  } catch (e) {
    throw await openError(path, e);
  }
  const total = Number(metadata.num_rows);
  for (let start = 0; start < total; start += batch) {
    let rows;
    try {
      rows = await parquetReadObjects({ file, metadata, rowStart: start, rowEnd: Math.min(total, start + batch) });
    } catch (e) {
      throw new ParquetReadError(path, `rows ${start + 1}–${Math.min(total, start + batch)}: ${(e as Error).message}`);
    }
    for (const r of rows) yield r as Record<string, unknown>;
  }
}

/**
 * The physical type of each top-level column (`DOUBLE`, `FLOAT`, `INT64`, `INT32`, `BOOLEAN`, `BYTE_ARRAY`, …; a
 * nested column — a list, a struct — is `GROUP`), in the file's order. Errors name the file.
 */
export async function parquetColumnTypes(path: string): Promise<Map<string, string>> {
  let metadata;
  try {
    metadata = await parquetMetadataAsync(await asyncBufferFromFile(path));
  } catch (e) {
    throw await openError(path, e);
  }
  const schema = metadata.schema;
  const out = new Map<string, string>();
  // depth-first: the root, then each top-level element followed by its descendants
  let i = 1;
  const skip = (at: number): number => {
    let next = at + 1;
    for (let c = 0; c < (schema[at]?.num_children ?? 0); c++) next = skip(next);
    return next;
  };
  for (let c = 0; c < (schema[0]?.num_children ?? 0) && i < schema.length; c++) {
    const e = schema[i]!;
    out.set(e.name, e.num_children ? 'GROUP' : String(e.type ?? 'GROUP'));
    i = skip(i);
  }
  return out;
}
