/**
 * A CLI subcommand, as the argument parser (yargs) registers it: its name with positionals, a one-line
 * description, its options and positionals (`builder`, which also gives `--help` and shell completion), and a
 * handler returning the exit code. Adding one: write a module exporting a `CliCommand`, add it to COMMANDS in
 * src/cli/commands.ts, and document it in docs/cli.md (a unit test runs `--help` for every command).
 */
import type { Argv } from 'yargs';

/** Where a command writes: stdout and stderr (tests pass their own). */
export interface CliIo {
  out: (s: string) => void;
  err: (s: string) => void;
}

export const processIo: CliIo = {
  out: (s) => void process.stdout.write(s),
  err: (s) => void process.stderr.write(s),
};

/** Exit codes every command follows. */
export const EXIT = { ok: 0, failed: 1, usage: 2, keepRunning: -1 } as const;

export interface CliCommand<A = Record<string, unknown>> {
  /** Name and positionals in yargs' syntax: `inspect <path>`, `train [config]`. */
  command: string;
  describe: string;
  /** Options and positionals, each with a `describe` (that is the help text). */
  builder?: (y: Argv) => Argv<A>;
  /**
   * Runs the command: 0 success, 1 a check failed, 2 bad usage or unreadable input, -1 keeps running (a server).
   * Throwing UsageError prints its message with the command's usage, and exits 2.
   */
  run: (args: A, io: CliIo) => Promise<number>;
}

/** Declares a command with its argument types inferred from the builder. */
export function defineCommand<A>(c: CliCommand<A>): CliCommand<A> {
  return c;
}
