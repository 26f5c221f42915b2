/**
 * Scoring a reward module against rollouts in a separate process (`dist/cli.js reward … --report`), so the
 * extension host never parses big files or runs user code: progress comes back as JSON lines on stderr, the
 * report as one JSON object on stdout. A run is cancelled by killing the process.
 */
import { execa, type ResultPromise } from 'execa';
import type { RewardLabReport } from '../../core/protocol';
import { nodeCommand } from '../node';

export interface RunOutcome {
  report?: RewardLabReport;
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

  constructor(cli: string, module: string, rollouts: string, onProgress: (done: number) => void, log: (line: string) => void) {
    const { file, env } = nodeCommand();
    this.child = execa(file, [cli, 'reward', module, rollouts, '--report'], { env, reject: false, buffer: { stdout: true, stderr: false }, stdin: 'ignore', forceKillAfterDelay: 2_000 });
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
          const m = JSON.parse(line) as { progress?: number; malformed?: string };
          if (typeof m.progress === 'number') onProgress(m.progress);
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
      const last = String(r.stdout ?? '').trim().split('\n').pop() ?? '';
      try {
        const o = JSON.parse(last) as { report?: RewardLabReport; compileError?: RunOutcome['compileError'] };
        if (o.report || o.compileError) return { ...o, malformed };
      } catch {
        /* fall through */
      }
      return { message: other.slice(-5).join('\n') || `the scoring process ended with code ${r.exitCode}`, malformed };
    });
  }

  cancel(): void {
    this.cancelled = true;
    this.child.kill('SIGTERM');
  }
}
