/**
 * Files a command cannot read or write: unreadable input (a missing file, a directory of nothing we read, a bad
 * parquet file, a FIFO) and outputs that cannot be written or are refused (src/cli/output.ts) — one line naming the
 * file and why, and exit code 2.
 */
import { stat } from 'node:fs/promises';
import { UnreadableInput } from '../core/importers';
import { ParquetReadError } from '../core/importers/parquet';
import type { CliIo } from './command';
import { OutputError, writeErrorReason } from './output';

const READ_CODES = new Set(['ENOENT', 'EACCES', 'EISDIR', 'ENOTDIR', 'ELOOP']);
const WRITE_CODES = new Set(['ENOSPC', 'EDQUOT', 'EROFS', 'EFBIG', 'EPERM', 'EIO']);

/** Refuses an input that is not a regular file (a FIFO would block the reader; a directory is not a file). */
export async function requireRegularFile(path: string): Promise<void> {
  const st = await stat(path).catch((e: NodeJS.ErrnoException) => {
    throw new UnreadableInput(path, e.code === 'ENOENT' ? 'no such file or directory' : e.message);
  });
  if (!st.isFile())
    throw new UnreadableInput(
      path,
      st.isDirectory()
        ? 'is a directory; expected a file'
        : `not a regular file (${st.isFIFO() ? 'a FIFO' : st.isSocket() ? 'a socket' : 'a device'}); name a file`,
    );
}

export async function withInputErrors(io: CliIo, fn: () => Promise<number>): Promise<number> {
  try {
    return await fn();
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (e instanceof UnreadableInput || e instanceof ParquetReadError || e instanceof OutputError) {
      io.err(`search-agent-studio: ${err.message}\n`);
      return 2;
    }
    if (err.code && (READ_CODES.has(err.code) || WRITE_CODES.has(err.code))) {
      // Node's own message names the path for most calls; say it first when it does not.
      const where = err.path && !err.message.includes(err.path) ? `${err.path}: ` : '';
      io.err(`search-agent-studio: ${where}${WRITE_CODES.has(err.code) ? writeErrorReason(err) : err.message}\n`);
      return 2;
    }
    throw e;
  }
}
