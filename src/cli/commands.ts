/**
 * The CLI's subcommands, in the order `--help` lists them. Adding one: a module exporting a CliCommand
 * (src/cli/command.ts), listed here; docs/cli.md says how.
 */
import { auditCommand } from './audit';
import type { CliCommand } from './command';
import { doctorCommand, setupCommand } from './environment';
import { exportCommandDef } from './export';
import { forkCommand, whatifCommand } from './fork';
import { importCommandDef } from './import';
import { indexCommandDef } from './index-command';
import { inspectCommand } from './inspect';
import { planCommand } from './plan';
import { replayStepCommand } from './replayStep';
import { rewardCommandDef } from './reward-command';
import { serveCommand } from './serve';
import { demoCommand, trainCommand } from './train';

export const COMMANDS = [
  doctorCommand,
  setupCommand,
  demoCommand,
  trainCommand,
  planCommand,
  serveCommand,
  indexCommandDef,
  inspectCommand,
  auditCommand,
  importCommandDef,
  rewardCommandDef,
  exportCommandDef,
  forkCommand,
  whatifCommand,
  replayStepCommand,
] as CliCommand<any>[];
