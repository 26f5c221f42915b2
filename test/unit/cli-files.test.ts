/**
 * No command loses a user's file (issue 40, items 4, 6 and 8), attacked through the real CLI process: an output
 * that is an input (by path, hard link or symlink) is refused and the input left as it was; a failing command leaves
 * no partial --out and an existing one intact; writes that fail (/dev/full, a missing or read-only folder) exit 2
 * with one line; `index` never clears a folder of the user's; inputs that are directories, FIFOs or bad parquet
 * files are named in the error; a record nested 10,000 deep is reported with its line and skipped.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { scratchDir } from '../support/scratch';

const ROOT = join(__dirname, '..', '..');
const cli = (cwd: string, ...args: string[]) =>
  execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
    reject: false,
    cwd,
    timeout: 120_000,
  });

const record = (id: string, extra = '') =>
  `{"v":2,"id":"${id}","prompt":"q","response":"<answer>a</answer>","golden":["a"]${extra}}`;
/** What a failed command may leave: nothing but what was there (no temporary files either). */
const listing = (dir: string) => readdirSync(dir).sort();

describe('CLI outputs and inputs', function () {
  this.timeout(300_000);
  const dir = scratchDir('sas-cli-files-');
  const rollouts = join(dir, 'rollouts.jsonl');
  const original = `${record('a')}\n${record('b')}\n`;
  before(() => writeFileSync(rollouts, original));

  it('refuses --out that is the input, by path, hard link or symlink, and leaves it as it was', async () => {
    linkSync(rollouts, join(dir, 'hard.jsonl'));
    symlinkSync(rollouts, join(dir, 'soft.jsonl'));
    for (const [input, out] of [
      ['rollouts.jsonl', 'rollouts.jsonl'],
      ['rollouts.jsonl', './hard.jsonl'],
      ['soft.jsonl', 'rollouts.jsonl'],
    ]) {
      const r = await cli(dir, 'reward', 'builtin:em', input!, '--out', out!);
      assert.equal(r.exitCode, 2, r.stderr);
      assert.match(r.stderr, /writing it would destroy what is being read/);
      assert.equal(readFileSync(rollouts, 'utf8'), original);
    }
    copyFileSync(join(ROOT, 'test/fixtures/verl/5.jsonl'), join(dir, '5.jsonl'));
    const before = readFileSync(join(dir, '5.jsonl'), 'utf8');
    const r = await cli(dir, 'import', 'verl', '5.jsonl', '--out', '5.jsonl');
    assert.equal(r.exitCode, 2, r.stderr);
    assert.equal(readFileSync(join(dir, '5.jsonl'), 'utf8'), before);
  });

  it('writes --out through a temporary file: a failed import leaves no partial output, and an old one intact', async () => {
    const work = join(dir, 'failing');
    mkdirSync(work);
    writeFileSync(join(work, 'bad.parquet'), 'not parquet at all');
    const r = await cli(work, 'import', 'trl', 'bad.parquet', '--out', 'new.jsonl');
    assert.equal(r.exitCode, 2);
    assert.match(
      r.stderr,
      /bad\.parquet: not a parquet file \(it does not begin with the PAR1 magic\)/,
      'the parquet error names the file and says why',
    );
    assert.deepEqual(listing(work), ['bad.parquet']);
    writeFileSync(join(work, 'old.jsonl'), 'keep me\n');
    const again = await cli(work, 'import', 'searchr1-dataset', 'bad.parquet', '--out', 'old.jsonl');
    assert.equal(again.exitCode, 2);
    assert.equal(readFileSync(join(work, 'old.jsonl'), 'utf8'), 'keep me\n');
    assert.deepEqual(listing(work), ['bad.parquet', 'old.jsonl']);
    // And a successful one replaces it whole.
    const ok = await cli(work, 'reward', 'builtin:em', rollouts, '--out', 'old.jsonl');
    assert.equal(ok.exitCode, 0, ok.stderr);
    assert.deepEqual(
      readFileSync(join(work, 'old.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).id),
      ['a', 'b'],
    );
    assert.deepEqual(listing(work), ['bad.parquet', 'old.jsonl']);
  });

  it('a write that fails exits 2 with one line naming the path: /dev/full, a missing folder, a read-only folder', async () => {
    const full = await cli(dir, 'reward', 'builtin:em', rollouts, '--out', '/dev/full');
    assert.equal(full.exitCode, 2);
    assert.match(full.stderr, /\/dev\/full: cannot write: no space left on the device \(disk full\) \(ENOSPC\)/);
    assert.doesNotMatch(full.stderr, /Unhandled 'error' event|at .*\.ts:\d+/);
    const missing = await cli(
      dir,
      'import',
      'verl',
      join(ROOT, 'test/fixtures/verl/5.jsonl'),
      '--out',
      'no/such/folder/x.jsonl',
    );
    assert.equal(missing.exitCode, 2);
    assert.match(missing.stderr, /no\/such\/folder\/x\.jsonl: cannot write: no such directory/);
    // A folder this process cannot write: a 0555 one, or (running as root, which ignores modes) sysfs.
    let readOnly = join(dir, 'ro');
    mkdirSync(readOnly, { mode: 0o555 });
    if (process.getuid?.() === 0) readOnly = '/sys';
    const ro = await cli(dir, 'reward', 'builtin:em', rollouts, '--out', join(readOnly, 'x.jsonl'));
    assert.equal(ro.exitCode, 2);
    assert.match(ro.stderr, /x\.jsonl: cannot write: (permission denied|read-only file system)/);
  });

  it('index never clears a folder of the user’s nor one holding the corpus', async () => {
    const work = join(dir, 'index');
    mkdirSync(join(work, 'mine'), { recursive: true });
    writeFileSync(join(work, 'mine', 'notes.txt'), 'precious');
    copyFileSync(join(ROOT, 'test/fixtures/bm25/corpus.jsonl'), join(work, 'corpus.jsonl'));
    const r = await cli(work, 'index', 'corpus.jsonl', '--out', 'mine');
    assert.equal(r.exitCode, 2);
    assert.match(r.stderr, /mine: is a directory with other files in it/);
    assert.equal(readFileSync(join(work, 'mine', 'notes.txt'), 'utf8'), 'precious');
    const here = await cli(work, 'index', 'corpus.jsonl', '--out', '.');
    assert.equal(here.exitCode, 2);
    assert.match(here.stderr, /holds .*corpus\.jsonl, an input of this command/);
    assert.ok(existsSync(join(work, 'corpus.jsonl')));
    // A new directory, then the same one again (an index of ours is rebuilt).
    for (let k = 0; k < 2; k++) {
      const ok = await cli(work, 'index', 'corpus.jsonl', '--out', 'idx');
      assert.equal(ok.exitCode, 0, ok.stderr);
    }
    assert.deepEqual(listing(work), ['corpus.jsonl', 'idx', 'mine']);
  });

  it('export never writes into a folder of the user’s nor one holding the config', async () => {
    const work = join(dir, 'export');
    mkdirSync(join(work, 'mine'), { recursive: true });
    writeFileSync(join(work, 'mine', 'launch.sh'), 'my own script');
    copyFileSync(join(ROOT, 'examples/demo.run.json'), join(work, 'demo.run.json'));
    const r = await cli(work, 'export', 'verl', 'demo.run.json', '--out', 'mine', '--python', '/nonexistent/python');
    assert.equal(r.exitCode, 2, r.stderr);
    assert.match(r.stderr, /mine: is a directory with other files in it \(not a veRL export\)/);
    assert.equal(readFileSync(join(work, 'mine', 'launch.sh'), 'utf8'), 'my own script');
    const here = await cli(work, 'export', 'verl', 'demo.run.json', '--out', '.', '--python', '/nonexistent/python');
    assert.equal(here.exitCode, 2);
    assert.match(here.stderr, /holds .*demo\.run\.json, an input of this command/);
  });

  it('names the path of a directory, a FIFO or a bad parquet file given as input (a FIFO is refused, not read)', async () => {
    const d = await cli(dir, 'import', 'searchr1-dataset', dir, '--out', 'x.jsonl');
    assert.equal(d.exitCode, 2);
    assert.ok(d.stderr.includes(`${dir}: is a directory; expected a Search-R1 dataset parquet file`), d.stderr);
    const fifo = join(dir, 'fifo.jsonl');
    execFileSync('mkfifo', [fifo]);
    for (const args of [
      ['reward', 'builtin:em', fifo],
      ['inspect', fifo],
      ['import', 'verl', fifo, '--out', 'y.jsonl'],
      ['index', fifo, '--out', 'idx-fifo'],
      ['audit', fifo],
    ]) {
      const r = await cli(dir, ...args);
      assert.equal(r.exitCode, 2, `${args[0]}: ${r.stderr}`);
      assert.match(r.stderr, /fifo\.jsonl: not a regular file/, args[0]);
    }
    assert.ok(!existsSync(join(dir, 'x.jsonl')) && !existsSync(join(dir, 'y.jsonl')));
  });

  it('nothing read is not a clean result: inspect, import, audit and reward exit 2, write no --out, and count malformed lines, not their problems', async () => {
    const work = join(dir, 'nothing');
    mkdirSync(work);
    writeFileSync(join(work, 'empty.jsonl'), '\n');
    // line 1 has four problems (four required fields missing), line 2 one: two malformed lines
    writeFileSync(join(work, 'junk.jsonl'), '{"a":1}\nnot json\n');
    for (const file of ['empty.jsonl', 'junk.jsonl']) {
      const ins = await cli(work, 'inspect', file);
      assert.equal(ins.exitCode, 2, ins.stderr);
      assert.match(ins.stderr, new RegExp(`${file} \\(rollouts\\): nothing to inspect: no trajectories were read`));
      const imp = await cli(work, 'import', 'auto', file, '--out', 'out.jsonl');
      assert.equal(imp.exitCode, 2, imp.stderr);
      assert.match(imp.stderr, /nothing to import: no trajectories were read.*out\.jsonl not written/);
      const rew = await cli(work, 'reward', 'builtin:em', file, '--out', 'scored.jsonl');
      assert.equal(rew.exitCode, 2, rew.stderr);
      assert.match(rew.stderr, /nothing to score: no rollouts were read/);
      const aud = await cli(work, 'audit', file);
      assert.equal(aud.exitCode, 2, aud.stderr);
    }
    assert.deepEqual(listing(work), ['empty.jsonl', 'junk.jsonl'], 'no empty output was left');
    const ins = await cli(work, 'inspect', 'junk.jsonl');
    assert.match(ins.stdout, /0 trajectories, 2 malformed \(skipped\)/);
    assert.doesNotMatch(ins.stdout, /valid format|searches/, 'no rates of nothing');
    const aud = await cli(work, 'audit', 'junk.jsonl');
    assert.match(aud.stdout, /0 rollouts audited, 0 flagged, 2 malformed \(skipped\)/);
    // a file cut short of parquet's footer, and a reward module that is missing or a folder, say so in words
    writeFileSync(join(work, 'cut.parquet'), 'PAR1 and then nothing');
    const cut = await cli(work, 'inspect', 'cut.parquet');
    assert.equal(cut.exitCode, 2);
    assert.match(cut.stderr, /cut\.parquet: not a parquet file \(its end is cut: no PAR1 footer\)/);
    const missing = await cli(work, 'reward', 'em.reward.ts', 'junk.jsonl');
    assert.equal(missing.exitCode, 2);
    assert.match(missing.stderr, /em\.reward\.ts: no such reward module/);
    const folder = await cli(work, 'reward', work, 'junk.jsonl');
    assert.equal(folder.exitCode, 2);
    assert.match(folder.stderr, /is a directory; expected a reward module/);
  });

  it("export jsonl never writes step files into a folder of the user's: new, empty or an earlier export only", async () => {
    const work = join(dir, 'export');
    mkdirSync(join(work, 'mine'), { recursive: true });
    writeFileSync(join(work, 'mine', 'step-000001.jsonl'), 'my own step 1\n');
    writeFileSync(join(work, 'mine', 'notes.txt'), 'keep\n');
    const refused = await cli(work, 'export', 'jsonl', rollouts, '--out', 'mine');
    assert.equal(refused.exitCode, 2, refused.stderr);
    assert.match(refused.stderr, /mine: is a directory with other files in it \(not an earlier export of step files\)/);
    assert.equal(readFileSync(join(work, 'mine', 'step-000001.jsonl'), 'utf8'), 'my own step 1\n');
    // a new folder, then the same export again into it (its own files): both write
    for (let i = 0; i < 2; i++) {
      const ok = await cli(work, 'export', 'jsonl', rollouts, '--out', 'exported');
      assert.equal(ok.exitCode, 0, ok.stderr);
    }
    assert.deepEqual(readdirSync(join(work, 'exported')), ['rollouts.jsonl']);
    // a folder that holds what is read
    const holding = await cli(dir, 'export', 'jsonl', rollouts, '--out', '.');
    assert.equal(holding.exitCode, 2);
    assert.match(holding.stderr, /holds .*rollouts\.jsonl, an input of this command/);
  });

  it('a record nested 10,000 deep in a rollout file is reported with its line and skipped; `reward` goes on', async () => {
    const deep = '{"a":'.repeat(10_000) + 'null' + '}'.repeat(10_000);
    writeFileSync(join(dir, 'deep.jsonl'), `${record('a')}\n${record('deep', `,"meta":${deep}`)}\n${record('b')}\n`);
    const r = await cli(dir, 'reward', 'builtin:em', 'deep.jsonl', '--json');
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stderr, /deep\.jsonl:2: meta: nested deeper than 64 levels/);
    assert.deepEqual(
      JSON.parse(r.stdout).items.map((i: { id: string }) => i.id),
      ['a', 'b'],
    );
  });
});
