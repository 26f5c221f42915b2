/** Reading parquet files in bounded row batches with hyparquet (pure JS). */
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

/** Yields the rows of a parquet file as objects, `batch` rows at a time, in order. Errors name the file. */
export async function* parquetRows(path: string, batch = 4096): AsyncGenerator<Record<string, unknown>> {
  const named = (e: unknown) => {
    const code = (e as NodeJS.ErrnoException).code;
    const why =
      code === 'EISDIR'
        ? 'is a directory; expected a parquet file'
        : code === 'ENOENT'
          ? 'no such file'
          : (e as Error).message;
    return new ParquetReadError(path, why.startsWith('parquet') ? why : `not a readable parquet file: ${why}`);
  };
  let file, metadata;
  try {
    file = await asyncBufferFromFile(path);
    metadata = await parquetMetadataAsync(file);
  } catch (e) {
    throw named(e);
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
