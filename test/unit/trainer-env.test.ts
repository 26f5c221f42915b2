/**
 * The trainer's Python: the minimum versions (torch, and transformers/peft when the config needs them), the
 * candidates tried in order with the refused one named, and the environment setup ("Set Up Trainer Environment",
 * `search-agent-studio setup`) run for real — a real base Python, a real venv, real pip — against a FAKE torch: a
 * stand-in wheel named torch (the real one cannot be downloaded in tests) installed offline from a FAKE
 * requirements file.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import {
  checkBasePython,
  SetupError,
  type SetupProgress,
  setupTrainerEnv,
  venvPython,
} from '../../src/core/host/trainerEnv';
import {
  findPython,
  noPythonMessage,
  TRAINER_MINIMUM,
  trainerNeeds,
  unusableBecause,
  versionAtLeast,
} from '../../src/core/python';
import { fakeTorchWheel } from '../support/fakeTorch';

const ROOT = join(__dirname, '..', '..');
const cli = (...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
    reject: false,
  });

describe('trainer Python minimums', () => {
  it('compares release numbers (local and pre-release tags ignored)', () => {
    assert.equal(versionAtLeast('2.15.0+cu132', '2.0'), true);
    assert.equal(versionAtLeast('2.0.0a0', '2.0'), true);
    assert.equal(versionAtLeast('1.13.1', '2.0'), false);
    assert.equal(versionAtLeast('4.55.4', '4.56'), false);
    assert.equal(versionAtLeast('4.56', '4.56.0'), true);
    assert.equal(versionAtLeast('10.0', '9.9'), true);
  });

  it('names the version found and the minimum; transformers and peft only when the config needs them', () => {
    assert.equal(unusableBecause({ torch: '2.15.0' }), undefined);
    assert.equal(
      unusableBecause({ torch: '1.13.1' }),
      `torch 1.13.1 is too old (the trainer needs torch ≥ ${TRAINER_MINIMUM.torch})`,
    );
    assert.equal(
      unusableBecause({ torch: '2.3.0', transformers: null, peft: null }),
      undefined,
      'the tiny policy needs neither',
    );
    const needs = trainerNeeds({ model: { kind: 'hf', path: 'm', lora: { r: 8 } } });
    assert.deepEqual(needs, { transformers: true, peft: true });
    assert.deepEqual(trainerNeeds({ model: { kind: 'tiny' } }), { transformers: false, peft: false });
    assert.equal(
      unusableBecause({ torch: '2.3.0', transformers: '4.45.0', peft: null }, needs),
      'transformers 4.45.0 is too old (a Hugging Face model needs transformers ≥ 4.56); peft is not installed (LoRA needs peft ≥ 0.13)',
    );
    assert.match(noPythonMessage({ tried: [] }, needs), /\(torch ≥ 2\.0, transformers ≥ 4\.56, peft ≥ 0\.13\)/);
  });

  it('trainer/pyproject.toml declares the same lower bounds', () => {
    const py = readFileSync(join(ROOT, 'trainer/pyproject.toml'), 'utf8');
    for (const [name, min] of Object.entries(TRAINER_MINIMUM))
      assert.match(py, new RegExp(`"${name}>=${min.replace('.', '\\.')}"`), `${name}>=${min} in pyproject.toml`);
  });
});

describe('setting up the trainer environment (real venv and pip, FAKE torch)', function () {
  this.timeout(240_000);
  let dir: string;
  let wheels: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-trainer-env-'));
    wheels = join(dir, 'wheels');
    mkdirSync(wheels);
    await fakeTorchWheel(wheels, '1.13.1');
    await fakeTorchWheel(wheels, '2.3.0');
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const fakeRequirements = (name: string, spec: string) => {
    const f = join(dir, `${name}.fake-requirements.txt`);
    writeFileSync(f, `# FAKE requirements for tests (the real file is trainer/requirements.txt)\n${spec}\n`);
    return f;
  };
  const offline = () => ['--no-index', '--find-links', wheels];

  it('refuses a base Python that does not exist, and says why', async () => {
    const c = await checkBasePython('/nonexistent/python3');
    assert.deepEqual(c, { ok: false, why: 'not found (ENOENT)' });
  });

  it('makes the venv, installs the requirements with progress and a log, checks it; a too-old torch is refused and the next candidate used', async () => {
    const phases = new Set<SetupProgress['phase']>();
    const messages: string[] = [];
    const good = await setupTrainerEnv({
      basePythons: ['/nonexistent/python3', 'python3'],
      venvDir: join(dir, 'good'),
      requirements: fakeRequirements('good', 'torch==2.3.0'),
      pipArgs: offline(),
      onProgress: (p) => {
        phases.add(p.phase);
        messages.push(p.message);
      },
    });
    assert.equal(good.python, venvPython(join(dir, 'good')));
    assert.equal(good.base, 'python3');
    assert.equal(good.probe.ok, true);
    assert.equal(good.probe.torch, '2.3.0');
    assert.deepEqual([...phases], ['base', 'venv', 'install', 'check']);
    assert.ok(
      messages.some((m) =>
        /^Processing .*torch-2\.3\.0-py3-none-any\.whl|^Successfully installed torch-2\.3\.0/.test(m),
      ),
      messages.join('\n'),
    );
    assert.match(readFileSync(good.log, 'utf8'), /Successfully installed torch-2\.3\.0/);

    // A torch older than the trainer's minimum: the setup fails naming it (and the environment stays, for inspection).
    await assert.rejects(
      setupTrainerEnv({
        basePythons: ['python3'],
        venvDir: join(dir, 'old'),
        requirements: fakeRequirements('old', 'torch==1.13.1'),
        pipArgs: offline(),
      }),
      (e: Error) =>
        e instanceof SetupError && /torch 1\.13\.1 is too old \(the trainer needs torch ≥ 2\.0\)/.test(e.message),
    );
    const search = await findPython([venvPython(join(dir, 'old')), venvPython(join(dir, 'good'))]);
    assert.equal(search.found?.executable, venvPython(join(dir, 'good')), 'the next candidate is used');
    assert.match(search.tried[0]!.error!, /torch 1\.13\.1 is too old \(the trainer needs torch ≥ 2\.0\)/);

    // The CLI: doctor exits 1 when no candidate is usable and names the version; train refuses it before starting anything.
    const d = await cli('doctor', '--python', venvPython(join(dir, 'old')));
    assert.equal(d.exitCode, 1);
    assert.match(d.stdout, /✗ .*old\/bin\/python: torch 1\.13\.1 is too old \(the trainer needs torch ≥ 2\.0\)/);
    const ok = await cli('doctor', '--python', venvPython(join(dir, 'good')));
    assert.equal(ok.exitCode, 0, ok.stdout);
    assert.match(ok.stdout, /✓ .*good\/bin\/python: Python 3\.\d+\.\d+, torch 2\.3\.0, CPU only/);
    const t = await cli(
      'train',
      join(ROOT, 'test/fixtures/runs/tiny.run.json'),
      '--python',
      venvPython(join(dir, 'old')),
    );
    assert.equal(t.exitCode, 1);
    assert.match(t.stderr, /torch 1\.13\.1 is too old/);
  });

  it('the CLI twin: `setup --venv DIR` with a fake requirements file', async () => {
    const r = await cli(
      'setup',
      '--venv',
      join(dir, 'cli'),
      '--requirements',
      fakeRequirements('cli', 'torch==2.3.0'),
      '--pip-arg=--no-index',
      '--pip-arg=--find-links',
      `--pip-arg=${wheels}`,
    );
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /^\[install\] /m);
    assert.match(r.stdout, /ready: .*cli\/bin\/python \(Python 3\.\d+\.\d+, torch 2\.3\.0, CPU only/);
  });

  it('cancel kills the running step and removes the environment it was making', async () => {
    const ac = new AbortController();
    const venvDir = join(dir, 'cancelled');
    await assert.rejects(
      setupTrainerEnv({
        basePythons: ['python3'],
        venvDir,
        requirements: fakeRequirements('cancel', 'torch==2.3.0'),
        pipArgs: offline(),
        signal: ac.signal,
        onProgress: (p) => {
          if (p.phase === 'install') ac.abort();
        },
      }),
      (e: Error) => e instanceof SetupError && e.cancelled,
    );
    assert.equal(existsSync(venvDir), false);
  });
});
