/**
 * "doctor": what this machine has for training — Node, and each trainer Python candidate with its versions
 * against the trainer's minimums, until the first usable one. The CLI prints it; the editor shows it as a report.
 */
import { probePython, TRAINER_MINIMUM, versionAtLeast, type PythonProbe, type TrainerNeeds } from './python';

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
  if (!p.ok) return `  ✗ ${p.executable}: ${p.error ?? 'unusable'}${p.python ? ` (Python ${p.python}${p.torch ? `, torch ${p.torch}` : ''})` : ''}`;
  const gpu = p.cuda ? `CUDA (${(p.cudaDevices ?? []).join(', ')})` : 'CPU only';
  return [`  ✓ ${p.executable}: Python ${p.python}, torch ${p.torch}, ${gpu}`, `    ${optionalLine('transformers', p.transformers, 'Hugging Face models')}, ${optionalLine('peft', p.peft, 'LoRA')}`, `    trl ${p.trl ?? 'not installed (engine "trl": pip install -r trainer/requirements-trl.txt)'}`].join('\n');
}

/** Probes `candidates` in order (stopping at the first usable one) and describes each; `header` lines come first. */
export async function doctorReport(candidates: string[], header: string[], needs: TrainerNeeds = {}, onLine?: (line: string) => void): Promise<DoctorReport> {
  const lines: string[] = [];
  const emit = (l: string) => {
    lines.push(l);
    onLine?.(l);
  };
  header.forEach(emit);
  emit(`Trainer Python (the first with torch ≥ ${TRAINER_MINIMUM.torch} is used):`);
  const tried: PythonProbe[] = [];
  for (const c of candidates) {
    const probe = await probePython(c, { needs });
    tried.push(probe);
    emit(describeProbe(probe));
    if (probe.ok) return { lines, found: probe, tried };
  }
  emit(`  No usable Python for the trainer was found.`);
  return { lines, tried };
}
