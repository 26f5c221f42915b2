/**
 * "doctor": what this machine has for training — Node, and each trainer Python candidate with its versions
 * against the trainer's minimums, until the first usable one. The CLI prints it; the editor shows it as a report.
 */
import { asVerlPython, VERL_VERSION } from './host/verl';
import { type PythonProbe, probePython, TRAINER_MINIMUM, type TrainerNeeds, versionAtLeast } from './python';

export interface DoctorReport {
  lines: string[];
  /** The first usable candidate (the one a run would use), if any. */
  found?: PythonProbe;
  tried: PythonProbe[];
}

function optionalLine(name: 'transformers' | 'peft', found: string | null | undefined, use: string): string {
  const min = TRAINER_MINIMUM[name];
  if (!found) return `${name} not installed (${use} needs ≥ ${min})`;
  return versionAtLeast(found, min) ? `${name} ${found}` : `${name} ${found} — too old for ${use} (needs ≥ ${min})`;
}

/** One candidate, as the doctor prints it. */
export function describeProbe(p: PythonProbe): string {
  if (!p.ok)
    return `  ✗ ${p.executable}: ${p.error ?? 'unusable'}${p.python ? ` (Python ${p.python}${p.torch ? `, torch ${p.torch}` : ''})` : ''}`;
  const gpu = p.cuda ? `CUDA (${(p.cudaDevices ?? []).join(', ')})` : 'CPU only';
  const trl = p.trl
    ? `trl ${p.trl}, ${p.deepspeed ? `DeepSpeed ${p.deepspeed}` : 'DeepSpeed not installed (ZeRO launches only: pip install -r trainer/requirements-trl-deepspeed.txt)'}`
    : 'trl not installed (engine "trl": pip install -r trainer/requirements-trl.txt)';
  return [
    `  ✓ ${p.executable}: Python ${p.python}, torch ${p.torch}, ${gpu}`,
    `    ${optionalLine('transformers', p.transformers, 'Hugging Face models')}, ${optionalLine('peft', p.peft, 'LoRA')}`,
    `    ${trl}`,
  ].join('\n');
}

/** veRL's Python (engine "verl"), as the doctor prints it: veRL, vLLM, and the attention its FSDP models will use. */
export function describeVerlProbe(p: PythonProbe): string {
  if (!p.ok) return `  ✗ ${p.executable}: ${p.error ?? 'unusable'}`;
  const gpu = p.cuda ? `CUDA (${(p.cudaDevices ?? []).join(', ')})` : 'CPU only';
  const vllm = p.vllm
    ? `vLLM ${p.vllm}`
    : 'vLLM not installed (rollouts need it on a GPU: bash scripts/setup-verl.sh --gpu)';
  const attention = p.flashAttn
    ? `flash-attn ${p.flashAttn}: the FSDP models use flash_attention_2 (verl.attention auto)`
    : 'flash-attn not installed: the FSDP models use PyTorch’s SDPA (verl.attention auto; PyPI has no flash-attn wheel, flash-attention’s GitHub releases have them per torch/CUDA)';
  return [`  ✓ ${p.executable}: veRL ${p.verl}, torch ${p.torch}, ${gpu}`, `    ${vllm}`, `    ${attention}`].join(
    '\n',
  );
}

/** Probes `candidates` in order (stopping at the first usable one) and describes each; `header` lines come first.
 * `verlCandidates` (those that exist): veRL's Python too, the first with veRL VERL_VERSION, after the trainer's (it does
 * not decide the report's `found`). */
export async function doctorReport(
  candidates: string[],
  header: string[],
  needs: TrainerNeeds = {},
  onLine?: (line: string) => void,
  verlCandidates: string[] = [],
): Promise<DoctorReport> {
  const lines: string[] = [];
  const emit = (l: string) => {
    lines.push(l);
    onLine?.(l);
  };
  header.forEach(emit);
  emit(`Trainer Python (the first with torch ≥ ${TRAINER_MINIMUM.torch} is used):`);
  const tried: PythonProbe[] = [];
  let found: PythonProbe | undefined;
  for (const c of candidates) {
    const probe = await probePython(c, { needs });
    tried.push(probe);
    emit(describeProbe(probe));
    if (probe.ok) {
      found = probe;
      break;
    }
  }
  if (!found) emit(`  No usable Python for the trainer was found.`);
  emit(`veRL’s Python (engine "verl", veRL ${VERL_VERSION}):`);
  for (const c of verlCandidates) {
    const probe = asVerlPython(await probePython(c));
    emit(describeVerlProbe(probe));
    if (probe.ok) break;
  }
  // said, not left out: a reader looking for it learns there is none and how to make one
  if (!verlCandidates.length)
    emit('  none found (only engine "verl" needs it: bash scripts/setup-verl.sh, or name one with verl.python)');
  return { lines, ...(found ? { found } : {}), tried };
}
