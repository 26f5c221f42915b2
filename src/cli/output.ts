/**
 * What a command writes where the user said (`--out`): the one helper every such command uses, so that no command
 * loses a user's file.
 *  - An output is never one of the command's inputs (the same file by device and inode, whatever the path: a
 *    link, `./x`, a symlink), and a directory output never holds one.
 *  - A file is written to a temporary file beside it (same folder, so same file system) and renamed over the target
 *    only when the command succeeded: a failing or interrupted command leaves the old file as it was, or none. A
 *    target that is not a regular file (`/dev/stdout`, a FIFO, `/dev/full`) is written directly.
 *  - A write that fails (disk full, a missing or read-only folder, no permission) is an {@link OutputError}: one
 *    line naming the path and why, exit 2 — never an unhandled 'error' event.
 *  - A directory output must be new, empty, or one the same command wrote before (`ours`): never a folder of the
 *    user's that a command would write into or clear.
 */
import { randomBytes } from 'node:crypto';
import { type Stats, unlinkSync } from 'node:fs';
import { chmod, type FileHandle, open, readdir, realpath, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';

/** An output that cannot be written, or is refused: its message names the path (the CLI prints it and exits 2). */
export class OutputError extends Error {
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`${path}: ${why}`);
    this.name = 'OutputError';
  }
}

/** Why a write failed, in words (the errno kept at the end). */
export function writeErrorReason(e: unknown): string {
  const err = e as NodeJS.ErrnoException;
  const words: Record<string, string> = {
    ENOSPC: 'no space left on the device (disk full)',
    EDQUOT: 'disk quota exceeded',
    EROFS: 'read-only file system',
    EACCES: 'permission denied',
    EPERM: 'operation not permitted',
    ENOENT: 'no such directory',
    ENOTDIR: 'a part of the path is not a directory',
    EISDIR: 'is a directory',
    EFBIG: 'file too large',
    EIO: 'input/output error',
  };
  return err.code && words[err.code]
    ? `cannot write: ${words[err.code]} (${err.code})`
    : `cannot write: ${err.message ?? String(e)}`;
}

/** The identity of a file (device and inode), following links; undefined when it does not exist. */
async function identity(path: string): Promise<Stats | undefined> {
  return stat(path).catch(() => undefined);
}

/** Refuses `out` when it is one of `inputs` (the same file). */
async function refuseInput(out: string, target: Stats | undefined, inputs: readonly string[]): Promise<void> {
  if (!target) return;
  for (const input of inputs) {
    const s = await identity(input);
    if (s && s.dev === target.dev && s.ino === target.ino)
      throw new OutputError(
        out,
        `is ${input === out ? 'an input of this command' : `the input ${input}`}: writing it would destroy what is being read; name another file`,
      );
  }
}

/** Temporary files not yet renamed or removed: removed if the process exits or is interrupted first. */
const pending = new Set<string>();
let hooked = false;
function hookCleanup(): void {
  if (hooked) return;
  hooked = true;
  const clean = () => {
    for (const p of pending) {
      try {
        unlinkSync(p);
      } catch {
        /* gone already */
      }
    }
    pending.clear();
  };
  process.on('exit', clean);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, function onSignal() {
      clean();
      // Only ours listening: behave as the default (die of the signal).
      if (process.listenerCount(signal) === 1) {
        process.removeListener(signal, onSignal);
        process.kill(process.pid, signal);
      }
    });
  }
}

/** A file being written (see the module comment). Lines are buffered and written in large pieces. */
export class OutputFile {
  private buffered: string[] = [];
  private bufferedChars = 0;
  private done = false;

  private constructor(
    /** The path the user named. */
    readonly path: string,
    private readonly fh: FileHandle,
    /** The temporary file, renamed onto `target` by commit (undefined: writing the target directly). */
    private readonly temp: string | undefined,
    private readonly target: string,
  ) {}

  /** Opens `path` for writing; refuses it if it is one of `inputs`. */
  static async create(path: string, inputs: readonly string[] = []): Promise<OutputFile> {
    const existing = await identity(path);
    await refuseInput(path, existing, inputs);
    if (existing?.isDirectory()) throw new OutputError(path, 'is a directory; name a file');
    if (existing && !existing.isFile()) {
      // A device, a FIFO: written as it is (no rename over it).
      const fh = await open(path, 'w').catch((e: unknown) => {
        throw new OutputError(path, writeErrorReason(e));
      });
      return new OutputFile(path, fh, undefined, path);
    }
    // A symlink to a file: its target is replaced, the link stays.
    const target = existing ? await realpath(path) : resolve(path);
    const temp = join(dirname(target), `.${basename(target)}.${process.pid}-${randomBytes(4).toString('hex')}.tmp`);
    const fh = await open(temp, 'wx').catch((e: unknown) => {
      const reason =
        (e as NodeJS.ErrnoException).code === 'ENOENT'
          ? `cannot write: no such directory: ${dirname(target)}`
          : writeErrorReason(e);
      throw new OutputError(path, reason);
    });
    hookCleanup();
    pending.add(temp);
    if (existing) await chmod(temp, existing.mode & 0o7777).catch(() => undefined);
    return new OutputFile(path, fh, temp, target);
  }

  /** Appends `text`; rejects with an OutputError when the write fails. */
  async write(text: string): Promise<void> {
    this.buffered.push(text);
    this.bufferedChars += text.length;
    if (this.bufferedChars >= 1 << 20) await this.flush();
  }

  private async flush(): Promise<void> {
    if (!this.buffered.length) return;
    const data = Buffer.from(this.buffered.join(''), 'utf8');
    this.buffered = [];
    this.bufferedChars = 0;
    try {
      let off = 0;
      while (off < data.length) off += (await this.fh.write(data, off)).bytesWritten;
    } catch (e) {
      throw new OutputError(this.path, writeErrorReason(e));
    }
  }

  /** Writes what is buffered, closes, and puts the file in place. */
  async commit(): Promise<void> {
    if (this.done) return;
    this.done = true;
    try {
      await this.flush();
      if (this.temp) await this.fh.sync();
      await this.fh.close();
      if (this.temp) {
        await rename(this.temp, this.target);
        pending.delete(this.temp);
      }
    } catch (e) {
      await this.fh.close().catch(() => undefined);
      await this.removeTemp();
      throw e instanceof OutputError ? e : new OutputError(this.path, writeErrorReason(e));
    }
  }

  /** Gives up: the temporary file is removed, the target left as it was. */
  async abort(): Promise<void> {
    if (this.done) return;
    this.done = true;
    await this.fh.close().catch(() => undefined);
    await this.removeTemp();
  }

  private async removeTemp(): Promise<void> {
    if (!this.temp) return;
    await rm(this.temp, { force: true });
    pending.delete(this.temp);
  }
}

/**
 * Runs `fn` with `path` open for writing (refused when it is one of `inputs`): committed when `fn` returns, removed
 * when it throws. `keep(result)` false also removes it (a command that failed without throwing).
 */
export async function writingFile<T>(
  path: string,
  inputs: readonly string[],
  fn: (out: OutputFile) => Promise<T>,
  keep: (result: T) => boolean = () => true,
): Promise<T> {
  const out = await OutputFile.create(path, inputs);
  let result: T;
  try {
    result = await fn(out);
  } catch (e) {
    await out.abort();
    throw e;
  }
  if (keep(result)) await out.commit();
  else await out.abort();
  return result;
}

/** Whether `child` is `parent` or lies inside it (both resolved through links as far as they exist). */
async function inside(child: string, parent: string): Promise<boolean> {
  const real = async (p: string): Promise<string> => {
    try {
      return await realpath(p);
    } catch {
      const up = dirname(p);
      return up === p ? p : join(await real(up), basename(p));
    }
  };
  const rel = relative(await real(parent), await real(child));
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !rel.startsWith(sep));
}

/**
 * Checks a directory output before anything is written: refused when it is a file, holds one of `inputs`, or is a
 * non-empty directory that `ours` does not recognise as this command's earlier output. Returns whether it exists
 * (and is ours).
 */
export async function checkOutputDir(
  dir: string,
  o: { inputs: readonly string[]; ours: (dir: string) => Promise<boolean>; what: string },
): Promise<{ exists: boolean }> {
  for (const input of o.inputs)
    if (await inside(input, dir))
      throw new OutputError(dir, `holds ${input}, an input of this command: name a directory outside it`);
  const st = await stat(dir).catch((e: NodeJS.ErrnoException) => {
    if (e.code === 'ENOENT') return undefined;
    throw new OutputError(dir, writeErrorReason(e));
  });
  if (!st) return { exists: false };
  if (!st.isDirectory()) throw new OutputError(dir, 'is not a directory');
  const names = await readdir(dir);
  if (names.length === 0) return { exists: false };
  if (!(await o.ours(dir)))
    throw new OutputError(dir, `is a directory with other files in it (not ${o.what}): name a new or empty directory`);
  return { exists: true };
}

/** The temporary sibling a directory output is built in before it is renamed into place. */
export function tempSibling(dir: string): string {
  const full = resolve(dir);
  return join(dirname(full), `.${basename(full)}.${process.pid}-${randomBytes(4).toString('hex')}.tmp`);
}
