/**
 * Scoring a reward module against rollouts in a separate process (`dist/cli.js reward … --report`), so the
 * extension host never parses big files or runs user code: progress comes back as JSON lines on stderr, the
 * report as one JSON object on stdout. A run is cancelled by killing the process.
 */
import { execa, type ResultPromise } from 'execa';
import type { RewardReport } from '../../core/rewards/report';
import { nodeCommand } from '../node';

export interface RunOutcome {
  report?: RewardReport;
  /** The rollouts the run read (file → last line): a later run given it scores the same ones. */
  set?: Record<string, number>;
  compileError?: { file: string; line: number; column: number; message: string };
  /** The run could not happen (unreadable input, crash). */
  message?: string;
  cancelled?: boolean;
  malformed: string[];
}

export class RewardRun {
  readonly done: Promise<RunOutcome>;
  private readonly child: ResultPromise;
  private cancelled = false;

  constructor(
    cli: string,
    module: string,
    rollouts: string,
    onProgress: (done: number, errors: Partial<Record<string, number>>) => void,
    log: (line: string) => void,
    options: { set?: Record<string, number>; itemTimeoutMs?: number } = {},
  ) {
    const { file, env } = nodeCommand();
    const args = [
      cli,
      'reward',
      module,
      rollouts,
      '--report',
      ...(options.itemTimeoutMs ? ['--timeout', String(options.itemTimeoutMs)] : []),
      ...(options.set ? ['--set=-'] : []),
    ];
    // The rollout set goes in on standard input (it can be long: a file per step of a run).
    this.child = execa(file, args, {
      env,
      reject: false,
      buffer: { stdout: true, stderr: false },
      ...(options.set ? { input: JSON.stringify(options.set) } : { stdin: 'ignore' as const }),
      forceKillAfterDelay: 2_000,
    });
    const malformed: string[] = [];
    let pending = '';
    const other: string[] = [];
    this.child.stderr?.on('data', (d: Buffer) => {
      pending += d.toString();
      let nl: number;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        try {
          const m = JSON.parse(line) as {
            progress?: number;
            errors?: Partial<Record<string, number>>;
            malformed?: string;
          };
          if (typeof m.progress === 'number') onProgress(m.progress, m.errors ?? {});
          else if (m.malformed) malformed.length < 200 && malformed.push(m.malformed);
          continue;
        } catch {
          /* not ours: a log line */
        }
        if (line.trim()) {
          other.push(line);
          log(line);
        }
      }
    });
    this.done = this.child.then((r) => {
      if (this.cancelled) return { cancelled: true, malformed };
      const last =
        String(r.stdout ?? '')
          .trim()
          .split('\n')
          .pop() ?? '';
      try {
        const o = JSON.parse(last) as {
          report?: RewardReport;
          compileError?: RunOutcome['compileError'];
          set?: Record<string, number>;
        };
        if (o.report || o.compileError) return { ...o, malformed };
      } catch {
        /* fall through */
      }
      return { message: other.slice(-5).join('\n') || `the scoring process ended with code ${r.exitCode}`, malformed };
    });
  }

  /** The scoring process's id (its sandbox threads are in it). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Kills the scoring process (SIGTERM, then SIGKILL after 2 s) and its sandbox threads with it. */
  cancel(): void {
    this.cancelled = true;
    this.child.kill('SIGTERM');
  }
}
