/**
 * `search-agent-studio replay-step <run-dir> --step N [--checkpoint step-NNNNNN] [--json]` (docs/instruments.md,
 * "replay-step"): a recorded step's token ids through the trainer's log-prob pass at a checkpoint, with today's code
 * (python -m search_agent_trainer.replay_step): ids identical, per-token |Δ| between the recorded and the recomputed
 * log-probs, the loss and gradient norm recomputed and compared with the step's metrics. The records are read by the
 * run store's readers; records that cannot be read (a cut line, a damaged token file) are named on stderr, and as the
 * cause when they leave the step's loss not comparable. `--checkpoint` is one of the run's by name or a directory (a
 * relative one from the working directory). Exit 0 when everything matches, 1 on a mismatch, 2 on bad usage or input,
 * 130 on Ctrl-C (the trainer's process stopped with it).
 */
import { compareWithMetrics, describeReplay, malformedNote, stepRecords } from '../core/audit/replayStep';
import { readRunMetrics } from '../core/audit/run';
import { listCheckpoints } from '../core/host/fork';
import { ReplayStepError, replayCheckpoint, runReplayStep } from '../core/host/replayStep';
import { runNeeds } from '../core/host/runConfig';
import { findPython, noPythonMessage } from '../core/python';
import { formatIssue } from '../core/run/format';
import { UsageError } from '../server/run';
import { defineCommand } from './command';
import { withInputErrors } from './inputErrors';
import { cliPythonCandidates } from './train';

export const replayStepCommand = defineCommand({
  command: 'replay-step <run-dir>',
  describe:
    "replay a recorded step through the trainer's log-prob pass at a checkpoint: ids identical, per-token |Δ| of the log-probs, loss and gradient norm recomputed; exit 1 on a mismatch (docs/instruments.md)",
  builder: (y) =>
    y
      .positional('run-dir', { type: 'string', demandOption: true, describe: 'the run directory' })
      .option('step', {
        type: 'number',
        demandOption: true,
        describe: 'the training step whose recorded rollouts to replay',
      })
      .option('checkpoint', {
        type: 'string',
        describe:
          'step-NNNNNN, or a checkpoint directory, relative to the working directory (default: step N − 1, the weights that sampled and trained step N)',
      })
      .option('tolerance', {
        type: 'number',
        describe: '|Δ| over this many nats is a mismatch (default 1e-3 in fp32, 5e-2 under bf16)',
      })
      .option('device', { type: 'string', choices: ['cpu', 'cuda'], describe: "default: the run's model.device" })
      .option('python', { type: 'string', describe: "the trainer's Python (the only one tried)" })
      .option('json', {
        type: 'boolean',
        default: false,
        describe:
          'print the report: {checkpoint, step, ids_identical, logprob, loss, grad_norm, metrics, rollouts_detail: [{id, delta: […]}], match}',
      })
      .example(
        '$0 replay-step runs/demo-1 --step 12',
        "does today's trainer give step 12 the log-probs, loss and gradient norm the run recorded?",
      ),
  run: async (a, io) =>
    withInputErrors(io, async () => {
      const runDir = a['run-dir'];
      if (!Number.isInteger(a.step) || a.step < 1)
        throw new UsageError(`--step must be a training step (an integer ≥ 1), got ${a.step}`);
      if (a.tolerance !== undefined && !(a.tolerance > 0))
        throw new UsageError(`--tolerance must be a positive number, got ${a.tolerance}`);
      const { records, withoutTokens, steps, malformed } = await stepRecords(runDir, a.step);
      if (!records.length)
        throw new UsageError(
          withoutTokens
            ? `step ${a.step} of ${runDir}: its ${withoutTokens} rollouts were recorded without tokens; only token ids can be replayed`
            : malformed.length
              ? `step ${a.step} of ${runDir}: no training rollout could be read; ${malformedNote(malformed, 5)}`
              : `step ${a.step} of ${runDir}: no training rollouts recorded (steps with rollouts: ${steps.length ? `${steps[0]}–${steps[steps.length - 1]}` : 'none'})`,
        );
      // as audit does: each record that could not be read, named (it is not replayed)
      for (const i of malformed.slice(0, 50)) io.err(`${formatIssue(i)} (skipped)\n`);
      const checkpoints = await listCheckpoints(runDir);
      const checkpoint = a.checkpoint ?? replayCheckpoint(checkpoints, a.step);
      if (!checkpoint)
        throw new UsageError(
          `${runDir}: no checkpoint step-${String(a.step - 1).padStart(6, '0')}${a.step === 1 ? ' or initial-model' : ''} (the weights that trained step ${a.step}); name one with --checkpoint (complete ones: ${checkpoints.join(', ') || 'none'})`,
        );
      const search = await findPython(cliPythonCandidates(a.python), await runNeeds({ runDir, resume: true }));
      if (!search.found) {
        io.err(`${noPythonMessage(search)}\n`);
        return 2;
      }
      let report;
      // Ctrl-C: the trainer's process is stopped (it loads a checkpoint, runs a model: it would go on without us)
      const interrupt = new AbortController();
      const onSignal = () => interrupt.abort();
      process.once('SIGINT', onSignal);
      try {
        report = await runReplayStep({
          python: search.found.executable,
          runDir,
          checkpoint,
          records,
          signal: interrupt.signal,
          ...(a.device ? { device: a.device as 'cpu' | 'cuda' } : {}),
          ...(a.tolerance !== undefined ? { tolerance: a.tolerance } : {}),
        });
      } catch (e) {
        if (interrupt.signal.aborted) return 130;
        if (!(e instanceof ReplayStepError)) throw e;
        io.err(`search-agent-studio: replay-step: ${e.message}\n`);
        return 2;
      } finally {
        process.off('SIGINT', onSignal);
      }
      const rows = (await readRunMetrics(runDir)).filter((m) => m.step === a.step);
      const row: Record<string, number> | undefined = rows.length ? Object.assign({}, ...rows) : undefined;
      const result = compareWithMetrics(report, row as never, malformed);
      if (a.json) io.out(`${JSON.stringify(result)}\n`);
      else io.out(`${describeReplay(result, records).join('\n')}\n`);
      // as audit does: a record that could not be read is bad input (exit 2) though the rest matched — the
      // verdict is of the records read, and a gate must not pass on a step it could not read whole
      return !result.match ? 1 : malformed.length ? 2 : 0;
    }),
});
