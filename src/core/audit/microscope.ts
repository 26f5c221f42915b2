/**
 * The replay's audit of one rollout (DESIGN §7): the same checks as `audit`, shaped for the replay panel — the
 * log-prob microscope's Δ and ratio overlays (trained tokens only), the trained tokens whose ratio leaves the band,
 * the importance-sampling preview at the panel's level and cap, the first re-tokenisation drift with both sides
 * decoded token by token (the webview shows them as text, side by side), and the engine's mask against ours.
 */
import type { ReplayMicroscope, ReplayModel } from '../protocol/replay';
import type { Rollout } from '../run/format';
import type { TokenizerCodec } from '../tokens/tokenizer';
import type { DriftOptions } from './drift';
import { type ImportanceOptions, importancePreview } from './importance';
import { checkLogprobs, type LogprobOptions, logprobDeltas } from './logprob';
import { engineMaskOf, maskLeaks, sampleExcluded } from './masks';
import { recordDrift } from './template';

export interface MicroscopeOptions extends LogprobOptions, ImportanceOptions, DriftOptions {
  /** The drift check's tokenizer; without one drift is not checked and `driftNote` says why. */
  codec?: Pick<TokenizerCodec, 'encode' | 'decode' | 'name' | 'chatTemplate'>;
  /** Why there is no codec (shown in place of the drift). */
  noCodec?: string;
}

type LogprobTokens = Parameters<typeof checkLogprobs>[0];

/**
 * Adds the microscope to a token-level replay model of `r` (built by replayModel from the same record): Δ and ratio
 * overlays, flags, the importance preview, drift, and — when the record carries the engine's mask — the leaks of
 * both masks compared (added to `model.audit.leaks`, so "next leak" visits them). Other levels are left as they are.
 */
export function addMicroscope(model: ReplayModel, r: Rollout, o: MicroscopeOptions = {}): ReplayModel {
  const tk = r.tokens;
  if (model.level !== 'token' || !tk) return model;
  const n = model.tokens.text.length;
  const lp = {
    loss_mask: tk.loss_mask.slice(0, n),
    logprob: tk.logprob?.slice(0, n),
    rollout_logprob: tk.rollout_logprob?.slice(0, n),
  } as LogprobTokens;
  const deltas = logprobDeltas(lp);
  if (deltas) {
    model.tokens.overlays.delta = deltas;
    model.tokens.overlays.ratio = deltas.map((d) => (d === null ? null : Math.exp(d)));
  }
  const engineMask = engineMaskOf(r.meta);
  const masks = maskLeaks(
    { role: model.tokens.role, loss_mask: model.tokens.mask ?? [] },
    engineMask,
    sampleExcluded(r.meta) !== undefined,
  );
  if (model.audit && masks.mask_mismatch.length) model.audit.leaks = masks.leaks;
  let drift: ReplayMicroscope['drift'] = null;
  if (o.codec) {
    const d = recordDrift(r, o.codec, o).drift;
    const pieces = (ids: readonly number[]) => ids.map((id) => ({ id, text: o.codec!.decode([id]) }));
    if (d)
      drift = {
        token: d.token,
        from: d.from,
        kind: d.kind,
        recorded: pieces(d.recorded),
        reencoded: pieces(d.reencoded),
      };
  }
  model.microscope = {
    flagged: checkLogprobs(lp, o, r.meta)?.flagged ?? [],
    importance: importancePreview(lp, o),
    drift,
    driftNote: o.codec
      ? `drift checked with ${o.codec.name}${drift ? '' : ': none'}`
      : (o.noCodec ?? 'drift not checked: no tokenizer'),
    ...(engineMask ? { engineMask: engineMask.slice(0, n) as (0 | 1)[] } : {}),
    maskMismatch: masks.mask_mismatch,
  };
  return model;
}
