/** Reading parquet files in bounded row batches with hyparquet (pure JS). */
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects } from 'hyparquet';

/** Yields the rows of a parquet file as objects, `batch` rows at a time, in order. */
export async function* parquetRows(path: string, batch = 4096): AsyncGenerator<Record<string, unknown>> {
  const file = await asyncBufferFromFile(path);
  const metadata = await parquetMetadataAsync(file);
  const total = Number(metadata.num_rows);
  for (let start = 0; start < total; start += batch) {
    const rows = await parquetReadObjects({ file, metadata, rowStart: start, rowEnd: Math.min(total, start + batch) });
    for (const r of rows) yield r as Record<string, unknown>;
  }
}
