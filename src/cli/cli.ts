/**
 * `search-agent-studio`: the command-line twin of the extension, on the same core. The subcommands are in
 * src/cli/commands.ts; the arguments are parsed by yargs, which gives each subcommand its own `--help` (exit 0),
 * typo suggestions, and shell completion (`search-agent-studio completion`).
 *
 * Exit codes: 0 success, 1 a check failed (or some items failed to score), 2 bad usage or unreadable input.
 */
import yargs, { type Argv } from 'yargs';
import { VERSION } from '../core/version';
import { UsageError } from '../server/run';
import { type CliIo, processIo } from './command';
import { COMMANDS } from './commands';

const EPILOG =
  'Exit codes: 0 success, 1 a check failed (or some items failed to score), 2 bad usage or unreadable input.\nEach command has its own help: search-agent-studio <command> --help. Shell completion: search-agent-studio completion >> ~/.bashrc';

/** What yargs passes a failure handler as its third argument: its usage printer (the failing command's help). */
interface Usage {
  showHelp(print: (help: string) => void): void;
}

/** The parser with every command registered; a failed validation skips the command (yargs would still run it). */
function parser(
  argv: string[],
  io: CliIo,
  onExit: (code: number) => void,
  onFail: (message: string, usage: Usage) => void,
): Argv {
  let failed = false;
  const y = yargs(argv)
    .scriptName('search-agent-studio')
    .usage('search-agent-studio <command> [options]')
    .version(VERSION)
    .alias('v', 'version')
    .help()
    .alias('h', 'help')
    .completion(
      'completion',
      'print a shell completion script (bash, zsh): search-agent-studio completion >> ~/.bashrc',
    )
    .demandCommand(1, 'name a command')
    .strict()
    .recommendCommands()
    .epilog(EPILOG)
    .wrap(Math.min(120, process.stdout.columns || 120))
    .exitProcess(false)
    .fail((message, error, usage) => {
      if (error && !(error instanceof UsageError)) throw error;
      if (!failed) onFail(message ?? error?.message ?? 'bad usage', usage as unknown as Usage);
      failed = true;
    });
  for (const c of COMMANDS) {
    let own: Argv | undefined;
    const builder = (x: Argv) => {
      own = x;
      return c.builder ? c.builder(x) : x;
    };
    y.command(c.command, c.describe, builder, async (args) => {
      if (failed) return;
      try {
        onExit(await c.run(args, io));
      } catch (e) {
        if (!(e instanceof UsageError)) throw e;
        // A command's own check (e.g. "--resume needs --run-dir"): its message and the command's help.
        failed = true;
        const help = (await own?.getHelp()) ?? '';
        onFail(e.message, { showHelp: (print) => print(help) });
      }
    });
  }
  return y;
}

export async function main(argv: string[], io: CliIo = processIo): Promise<number> {
  let code: number | undefined;
  let failure: { message: string; help: string } | undefined;
  await parser(
    argv,
    io,
    (c) => (code = c),
    (message, usage) => {
      let help = '';
      usage.showHelp((h) => (help = h));
      failure = { message, help };
    },
  ).parseAsync();
  if (failure) {
    // A first word that is no command reads better as such than as yargs' "Unknown argument".
    const unknownCommand =
      /^Unknown argument/.test(failure.message) &&
      argv[0] !== undefined &&
      !argv[0].startsWith('-') &&
      !COMMANDS.some((c) => c.command.split(' ')[0] === argv[0]);
    io.err(
      `search-agent-studio: ${unknownCommand ? `unknown command: ${argv[0]}` : failure.message}\n\n${failure.help}\n`,
    );
    return 2;
  }
  return code ?? 0;
}
