/**
 * bf16 against fp32 matrix products on this CPU (`npm run bench cpu-matmul`): bench/cpu_matmul.py, one thread, CPU
 * time, at the demo's micro-batch shapes and one large square product; fp32 is MKL's sgemm, bf16 oneDNN's kernel for
 * the CPU's best bf16 instructions (the kernel is named). Why `model.dtype: fastest` chooses bf16 on one CPU and fp32
 * on another (numerics.py measures the demo's own model; this measures the products alone). `SAS_PYTHON` picks the
 * interpreter.
 */
import { join } from 'node:path';
import { execa } from 'execa';
import { lastJson } from './processes';
import { fmt, report } from './util';

interface Result {
  cpu: string;
  torch: string;
  isa: string | null;
  bf16_kernel: string | null;
  shapes: { shape: string; fp32_gflops: number; bf16_gflops: number }[];
}

export async function run(): Promise<string[]> {
  const root = join(__dirname, '..');
  const exe = process.env.SAS_PYTHON ?? join(root, '.venv', 'bin', 'python');
  const p = await execa(exe, [join(root, 'bench', 'cpu_matmul.py')], { cwd: root, stderr: 'inherit' });
  const r = lastJson<Result>(p.stdout);
  const lines: string[] = [];
  report(
    lines,
    `${r.cpu} (oneDNN ISA: ${r.isa ?? '?'}; torch ${r.torch}), one thread: bf16 (${r.bf16_kernel ?? 'kernel not reported'}) vs fp32 (MKL sgemm)`,
  );
  for (const s of r.shapes)
    report(
      lines,
      `  ${s.shape}: bf16 ${s.bf16_gflops.toFixed(1)} GFLOP/s vs fp32 ${s.fp32_gflops.toFixed(1)} GFLOP/s → ${fmt.ratio(s.bf16_gflops / s.fp32_gflops)}`,
    );
  return lines;
}
