/** The doctor's report: what each engine will use, named from what the Python has (veRL's attention, vLLM, DeepSpeed). */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describeProbe, describeVerlProbe, doctorReport } from '../../src/core/doctor';
import type { PythonProbe } from '../../src/core/python';

const probe = (extra: Partial<PythonProbe>): PythonProbe => ({
  executable: '/x/python',
  ok: true,
  python: '3.11.9',
  torch: '2.11.0',
  cuda: true,
  cudaDevices: ['NVIDIA H100 80GB HBM3'],
  transformers: '5.9.0',
  peft: '0.18.0',
  ...extra,
});

describe('doctor', () => {
  it("names veRL's attention from flash-attn: flash_attention_2 with it, SDPA without, and vLLM", () => {
    const without = describeVerlProbe(probe({ verl: '0.9.1', vllm: null, flashAttn: null }));
    assert.match(without, /veRL 0\.9\.1, torch 2\.11\.0, CUDA \(NVIDIA H100 80GB HBM3\)/);
    assert.match(without, /flash-attn not installed: the FSDP models use PyTorch’s SDPA/);
    assert.match(without, /vLLM not installed .*setup-verl\.sh --gpu/);
    const withIt = describeVerlProbe(probe({ verl: '0.9.1', vllm: '0.24.0', flashAttn: '2.8.3' }));
    assert.match(withIt, /flash-attn 2\.8\.3: the FSDP models use flash_attention_2/);
    assert.match(withIt, /vLLM 0\.24\.0/);
    assert.match(
      describeVerlProbe({ executable: '/y', ok: false, error: 'veRL is not installed' }),
      /✗ \/y: veRL is not installed/,
    );
  });

  it('names DeepSpeed beside TRL (ZeRO launches need it)', () => {
    assert.match(
      describeProbe(probe({ trl: '1.16.0', deepspeed: null })),
      /trl 1\.16\.0, DeepSpeed not installed \(ZeRO launches only: pip install -r trainer\/requirements-trl-deepspeed\.txt\)/,
    );
    assert.match(describeProbe(probe({ trl: '1.16.0', deepspeed: '0.18.3' })), /trl 1\.16\.0, DeepSpeed 0\.18\.3/);
  });

  it('says when there is no veRL Python at all, and how to make one (it printed nothing)', async () => {
    const r = await doctorReport([], [], {}, undefined, []);
    const at = r.lines.indexOf('veRL’s Python (engine "verl", veRL 0.9.1):');
    assert.ok(at >= 0, r.lines.join('\n'));
    assert.match(r.lines[at + 1]!, /none found \(only engine "verl" needs it: bash scripts\/setup-verl\.sh/);
  });

  const verlPython = join(__dirname, '..', '..', '.venv-verl', 'bin', 'python');
  (existsSync(verlPython) ? it : it.skip)(
    "probes .venv-verl for real and says what veRL's FSDP models will use",
    async function () {
      this.timeout(120_000);
      const r = await doctorReport(['/nonexistent/python3'], [], {}, undefined, [verlPython]);
      const at = r.lines.findIndex((l) => l.startsWith('veRL’s Python'));
      assert.ok(at > 0, r.lines.join('\n'));
      const verl = r.lines.slice(at).join('\n');
      assert.match(verl, /veRL 0\.9\.1/);
      assert.match(
        verl,
        /flash-attn (not installed: the FSDP models use PyTorch’s SDPA|\S+: the FSDP models use flash_attention_2)/,
      );
    },
  );
});
