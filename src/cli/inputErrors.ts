/** Unreadable input (a missing file, a directory of nothing we read): its message, naming the file, and exit code 2. */
import { UnreadableInput } from '../core/importers';
import type { CliIo } from './command';

export async function withInputErrors(io: CliIo, fn: () => Promise<number>): Promise<number> {
  try {
    return await fn();
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (e instanceof UnreadableInput || code === 'ENOENT' || code === 'EACCES' || code === 'EISDIR') {
      io.err(`search-agent-studio: ${(e as Error).message}\n`);
      return 2;
    }
    throw e;
  }
}
