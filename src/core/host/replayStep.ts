/**
 * `replay-step`, host side: runs `python -m search_agent_trainer.replay_step` (the trainer's own batch building,
 * log-prob pass and loss at a checkpoint) over a step's records, sent on stdin as JSON lines, and reads its one-line
 * JSON report. Spawned with an argument array in its own process group, told our pid (src/core/host/processes.ts).
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { ReplayStepReport } from '../audit/replayStep';
import { trainerDir } from '../paths';
import type { Rollout } from '../run/format';
import { checkpointDir, INITIAL_MODEL, stepOf } from './fork';
import { type LogSink, spawnChild } from './processes';

export class ReplayStepError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReplayStepError';
  }
}

/**
 * The directory of a replay's checkpoint: one of the run's by name (step-NNNNNN, initial-model), else a directory,
 * a relative one taken from our working directory (the trainer runs in its own: it would look in the wrong place).
 */
export function replayCheckpointDir(runDir: string, checkpoint: string): string {
  const named = /^step-\d+$/.test(checkpoint) || checkpoint === INITIAL_MODEL;
  return named && existsSync(checkpointDir(runDir, checkpoint))
    ? checkpointDir(runDir, checkpoint)
    : resolve(checkpoint);
}

/**
 * The checkpoint whose weights sampled and trained step N: step N − 1's (the trainer saves a step's weights after its
 * update; a TRL run's step 0 is its `initial-model/`, listed as such by listCheckpoints). Undefined when the run has
 * no such checkpoint.
 */
export function replayCheckpoint(checkpoints: readonly string[], step: number): string | undefined {
  return checkpoints.find((c) => stepOf(c) === Math.max(0, step - 1));
}

/**
 * Runs the replay. `signal` (Ctrl-C) stops the trainer's process — its whole group — and rejects with a
 * ReplayStepError; the child also watches our pid (SAS_PARENT_PID), so it ends if we die without stopping it.
 */
export async function runReplayStep(o: {
  python: string;
  runDir: string;
  checkpoint: string;
  records: readonly Rollout[];
  device?: 'cpu' | 'cuda';
  tolerance?: number;
  onLog?: LogSink;
  timeoutMs?: number;
  signal?: AbortSignal;
}): Promise<ReplayStepReport> {
  const dir = trainerDir();
  const python = o.python.includes('/') ? resolve(o.python) : o.python;
  const checkpoint = replayCheckpointDir(o.runDir, o.checkpoint);
  const args = ['-m', 'search_agent_trainer.replay_step', '--run-dir', resolve(o.runDir), '--checkpoint', checkpoint];
  if (o.device) args.push('--device', o.device);
  if (o.tolerance !== undefined) args.push('--tolerance', String(o.tolerance));
  const out: string[] = [];
  const child = spawnChild('replay-step', python, args, {
    cwd: dir,
    env: { PYTHONPATH: [dir, process.env.PYTHONPATH].filter(Boolean).join(':'), PYTHONUNBUFFERED: '1' },
    stdin: 'pipe',
    onStdout: (line) => out.push(line),
    onStderr: o.onLog,
  });
  const aborted = new Promise<'aborted'>((r) => {
    if (o.signal?.aborted) r('aborted');
    else o.signal?.addEventListener('abort', () => r('aborted'), { once: true });
  });
  const stdin = child.proc.stdin!;
  stdin.on('error', () => {}); // a child that exits early: its exit says why
  for (const r of o.records) {
    if (o.signal?.aborted) break;
    if (!stdin.write(`${JSON.stringify(r)}\n`))
      await Promise.race([new Promise((ok) => stdin.once('drain', ok)), aborted, child.exited]);
  }
  stdin.end();
  let timer: NodeJS.Timeout | undefined;
  const exit = await Promise.race([
    child.exited,
    aborted,
    new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), o.timeoutMs ?? 3_600_000))),
  ]);
  clearTimeout(timer);
  if (exit === 'aborted') {
    await child.stop(2_000);
    throw new ReplayStepError('stopped');
  }
  if (!exit) {
    await child.stop(2_000);
    throw new ReplayStepError('the replay did not finish in time');
  }
  const last = out.filter((l) => l.trim().startsWith('{')).pop();
  let report: (ReplayStepReport & { error?: undefined }) | { error: string } | undefined;
  try {
    report = last ? JSON.parse(last) : undefined;
  } catch {
    report = undefined;
  }
  if (report && 'error' in report && report.error !== undefined) throw new ReplayStepError(report.error);
  if (!report || exit.code !== 0)
    throw new ReplayStepError(
      `the trainer's replay_step exited (${exit.signal ?? `code ${exit.code}`}) without a report:\n${child.stderr.text(12)}`,
    );
  return report as ReplayStepReport;
}
