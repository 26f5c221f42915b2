/**
 * What a reward module can make the host do, beyond its own rollout: every field the host reads from the sandbox is
 * bounded, escaped and copied (a module that patches the harness's built-ins, or `toJSON`, gains nothing), the host's
 * memory does not grow with the size of what a module throws, one rollout's output cannot fail a /reward answer,
 * compiling reads only the module's folder (no source-map comment, tsconfig `extends`, FIFO or oversized file is
 * followed), and the limits themselves are validated.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { SourceMap } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { execa } from 'execa';
import {
  COMPILE_LIMITS,
  compileRewardModule,
  esbuildForTests,
  RewardCompileError,
} from '../../src/core/rewards/compile';
import { RESULT_LIMITS } from '../../src/core/rewards/harness';
import { type DecodeContext, decodeOutcome, detach } from '../../src/core/rewards/outcome';
import { type RewardItem, type RewardOutcome, RewardSandbox } from '../../src/core/rewards/sandbox';
import { openReward, scoreRollouts } from '../../src/core/rewards/scoring';
import { startEnvServer } from '../../src/server/server';

const ROOT = join(__dirname, '..', '..');
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
/** The host's heap once garbage is collected. */
const heap = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};
// biome-ignore lint/suspicious/noControlCharactersInRegex: what must never reach the host's output
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

const lineOf = (file: string, needle: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .findIndex((l) => l.includes(needle)) + 1;
const item = (id: string, c = 'ok'): RewardItem => ({
  id,
  prompt: 'Q',
  response: '<answer> x </answer>',
  golden: ['x'],
  meta: { case: c },
});
const errorOf = (o: RewardOutcome | undefined) => {
  assert.ok(o && 'error' in o, JSON.stringify(o));
  return o.error;
};

describe('reward bounds: what the host reads from the sandbox', function () {
  this.timeout(120_000);
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-bounds-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  /** A module whose score runs `body` (with `c`, the rollout's meta.case). */
  const module = (name: string, body: string, top = '') => {
    const file = join(dir, `${name}.reward.ts`);
    writeFileSync(
      file,
      `import { defineReward } from 'search-agent-studio/reward';\n${top}\nexport default defineReward({\n  name: '${name}',\n  score(_t, ex: any) {\n    const c = ex.meta?.case;\n${body}\n  },\n});\n`,
    );
    return file;
  };

  it("a 4 MB error message, past a patched String.prototype.substring: the host keeps 2,000 characters, not the message (the issue's OOM)", async () => {
    const file = module(
      'bigmsg',
      `    (String.prototype as any).substring = function (this: string) { return String(this); };
    (String.prototype as any).slice = function (this: string) { return String(this); };
    throw new Error('M'.repeat(4_000_000) + c);`,
    );
    const r = await openReward(file, { workers: 1 });
    const n = 24;
    try {
      await r.sandbox.score([item('warm', 'w')]);
      const before = heap();
      const out = await r.sandbox.score(Array.from({ length: n }, (_, i) => item(`r${i}`, String(i))));
      const grown = heap() - before;
      // The outcomes are alive (checked below): each keeps its 2,000 characters, not its 4 MB.
      assert.ok(grown < (n * 4e6) / 8, `the host's heap grew by ${(grown / 1e6).toFixed(1)} MB for ${n} failures`);
      for (const o of out) {
        const e = errorOf(o);
        assert.equal(e.kind, 'throw');
        assert.ok(e.message.length < RESULT_LIMITS.messageChars + 100, `${e.message.length} characters`);
        assert.match(e.message, /^Error: M+… \(3,?998,?\d+ more characters\)/);
        assert.equal(e.file, file);
      }
      assert.equal(out.length, n);
    } finally {
      await r.sandbox.close();
    }
  });

  it('decodeOutcome bounds, escapes and copies every field, whatever the sandbox sent', () => {
    const compiled = {
      file: join(dir, 'x.reward.ts'),
      code: '',
      map: '{"version":3,"sources":[],"mappings":""}',
    };
    const c: DecodeContext = {
      compiled,
      map: new SourceMap(JSON.parse(compiled.map)),
      itemTimeoutMs: 2000,
      batchTimeoutMs: 120_000,
      memoryMb: 256,
      batchDeadline: Date.now() + 60_000,
    };
    const esc = '\u001b]0;PWNED\u0007\u001b[2J';
    // A type description the harness never sends (the issue's toJSON forgery): unreadable, not printed.
    const forged = decodeOutcome({ k: 'v', r: { t: `${esc}FAKE ${'Z'.repeat(5000)}` } }, c);
    assert.equal(
      errorOf(forged as RewardOutcome).message,
      'returned an unreadable value (expected a number or { reward, parts })',
    );
    // Part names: control characters escaped; longer than 100 characters, more than 64 parts: the rollout's error.
    const named = decodeOutcome(
      { k: 'v', r: { t: 'number', n: '1' }, obj: true, parts: [[`${esc}x`, { t: 'number', n: '0.5' }]] },
      c,
    );
    assert.ok('parts' in named);
    assert.deepEqual(Object.keys(named.parts), ['\\x1b]0;PWNED\\x07\\x1b[2Jx']);
    const long = decodeOutcome(
      { k: 'v', r: { t: 'number', n: '1' }, parts: [['P'.repeat(400_000), { t: 'number', n: '1' }]] },
      c,
    );
    const longError = errorOf(long as RewardOutcome);
    assert.match(longError.message, /a part's name is longer than 100 characters/);
    assert.ok(longError.message.length < 200);
    const many = decodeOutcome(
      {
        k: 'v',
        r: { t: 'number', n: '1' },
        parts: Array.from({ length: 65 }, (_, i) => [`p${i}`, { t: 'number', n: '1' }]),
      },
      c,
    );
    assert.match(errorOf(many as RewardOutcome).message, /parts has 65 entries \(at most 64\)/);
    // Messages, names, stacks: cut (said so) and escaped.
    for (const o of [
      {
        k: 'e',
        name: `${esc}${'N'.repeat(1e6)}`,
        message: `${esc}${'M'.repeat(3e6)}`,
        stack: `${esc}${'S'.repeat(3e6)}`,
      },
      { k: 'e', nonError: `${esc}`, message: 'x'.repeat(3e6) },
      { k: 'x', kind: 'crash', message: `${esc}${'C'.repeat(3e6)}`, stack: 'S'.repeat(3e6) },
    ]) {
      const e = errorOf(decodeOutcome(o, c) as RewardOutcome);
      assert.ok(e.message.length < RESULT_LIMITS.nameChars + RESULT_LIMITS.messageChars + 300, `${e.message.length}`);
      assert.ok(!CONTROL.test(e.message) && !CONTROL.test(e.stack ?? ''));
      assert.ok((e.stack ?? '').length < RESULT_LIMITS.stackChars + 200);
    }
    // Anything else: that rollout's error, never an exception.
    for (const o of [
      null,
      7,
      'x',
      { k: 'v' },
      { k: 'v', r: { t: 'number', n: '1' }, parts: 3 },
      { k: 'e', site: 1e9 },
      { k: 'x', loop: -5 },
    ])
      assert.ok('error' in decodeOutcome(o, c) || 'reward' in decodeOutcome(o, c), JSON.stringify(o));
    // What is kept holds none of what it was cut from: 40 messages of 2 MB leave far less than 80 MB behind.
    const before = heap();
    const kept = Array.from({ length: 40 }, (_, i) =>
      decodeOutcome({ k: 'e', name: 'Error', message: `${i}${'M'.repeat(2_000_000)}` }, c),
    );
    const grown = heap() - before;
    assert.ok(grown < 20e6, `kept ${(grown / 1e6).toFixed(1)} MB for 40 cut messages`);
    assert.equal(kept.length, 40);
    assert.equal(detach('a\ud800b'), 'a\ud800b', 'a copy keeps lone surrogates');
  });

  it('a module that patches the built-ins the harness uses, or Object.prototype.toJSON, cannot shape what the host reads', async () => {
    const file = module(
      'tamper',
      `    if (c === 'tojson') {
      (Object.prototype as any).toJSON = function (this: any) {
        return this && this.k !== undefined ? { k: 'v', r: { t: '\\u001b[2JFAKE ' + 'Z'.repeat(5000) } } : this;
      };
      return 1;
    }
    if (c === 'names') {
      (String.prototype as any).substring = function (this: string) { return String(this); };
      return { reward: 1, parts: { ['\\u001b]0;TITLE\\u0007' + 'P'.repeat(300)]: 1 } };
    }
    if (c === 'escape') return { reward: 1, parts: { ['\\u001b[31mred']: 0.5 } };
    if (c === 'proxy') throw new Proxy({}, { get() { throw new Error('trap'); } });
    if (c === 'sab') return typeof (globalThis as any).SharedArrayBuffer === 'undefined' ? 1 : 0;
    return 1;`,
    );
    const r = await openReward(file, { workers: 1 });
    try {
      const [tojson, after, names, escaped, proxy, sab] = await r.sandbox.score(
        ['tojson', 'ok', 'names', 'escape', 'proxy', 'sab'].map((c, i) => item(`r${i}`, c)),
      );
      // The harness writes its own JSON: the module's toJSON is never asked.
      assert.deepEqual(tojson, { id: 'r0', reward: 1, parts: {} });
      assert.deepEqual(after, { id: 'r1', reward: 1, parts: {} });
      const e = errorOf(names);
      assert.match(e.message, /^parts: a part's name is longer than 100 characters \("\\x1b\]0;TITLE\\x07P+…"\)$/);
      assert.deepEqual(escaped, { id: 'r3', reward: 1, parts: { '\\x1b[31mred': 0.5 } });
      // A thrown proxy whose getter throws: still located at its own `throw`.
      const p = errorOf(proxy);
      assert.match(p.message, /^threw an object/);
      assert.equal(p.line, lineOf(file, "c === 'proxy'"));
      // The realm has no SharedArrayBuffer (docs/rewards.md).
      assert.deepEqual(sab, { id: 'r5', reward: 1, parts: {} });
    } finally {
      await r.sandbox.close();
    }
  });

  it('a promise callback a rollout leaves looping is that rollout’s timeout (at its loop), not the next one’s', async () => {
    const file = module(
      'leave',
      `    if (c === 'leave') {
      Promise.resolve().then(() => {
        for (;;) {}
      });
      return 1;
    }
    if (c === 'async') return Promise.resolve(1);
    return 1;`,
    );
    const r = await openReward(file, { workers: 1, itemTimeoutMs: 300 });
    try {
      const [left, next, plain] = await r.sandbox.score(['leave', 'async', 'ok'].map((c, i) => item(`r${i}`, c)));
      const e = errorOf(left);
      assert.equal(e.kind, 'timeout');
      assert.match(
        e.message,
        /did not finish within 300 ms \(in a promise callback it left running after it returned\)/,
      );
      assert.equal(e.line, lineOf(file, 'for (;;)'));
      assert.deepEqual(next, { id: 'r1', reward: 1, parts: {} });
      assert.deepEqual(plain, { id: 'r2', reward: 1, parts: {} });
    } finally {
      await r.sandbox.close();
    }
  });

  it('a long built-in call the engine cannot interrupt: the real time it ran, and that its line is not known', async () => {
    const file = module(
      'native',
      `    if (c === 'bad') return 'a'.repeat(20_000_000).indexOf('a'.repeat(200_000) + 'b') === -1 ? 0 : 1;
    return 1;`,
    );
    const r = await openReward(file, { workers: 1, itemTimeoutMs: 200 });
    try {
      const [bad, ok] = await r.sandbox.score(['bad', 'ok'].map((c, i) => item(`r${i}`, c)));
      const e = errorOf(bad);
      assert.equal(e.kind, 'timeout');
      assert.match(e.message, /gave no answer for \d+\.\d s and was stopped/);
      assert.ok(e.message.includes(`where in ${file} is not known`), e.message);
      assert.deepEqual(ok, { id: 'r1', reward: 1, parts: {} });
    } finally {
      await r.sandbox.close();
    }
  });

  it('/reward: 64 part names of 400 KB on every rollout fail those rollouts, not the answer; the server keeps serving', async () => {
    const file = module(
      'bigparts',
      `    (String.prototype as any).substring = function (this: string) { return String(this); };
    const big = 'P'.repeat(400_000);
    const parts: Record<string, number> = {};
    if (c !== 'ok') for (let i = 0; i < 64; i++) parts[i + big] = 1;
    return { reward: 1, parts };`,
    );
    const r = await openReward(file, { workers: 1 });
    const server = await startEnvServer({ version: 'test', reward: { name: 'bigparts', file, sandbox: r.sandbox } });
    try {
      const res = await fetch(`http://127.0.0.1:${server.port}/reward`, {
        method: 'POST',
        body: JSON.stringify({
          items: Array.from({ length: 30 }, (_, i) => ({
            id: `q${i}`,
            response: 'x',
            golden: ['x'],
            meta: { case: i === 29 ? 'ok' : 'big' },
          })),
        }),
      });
      assert.equal(res.status, 200);
      const text = await res.text();
      assert.ok(text.length < 30 * 1000, `${text.length} bytes`);
      const results = (JSON.parse(text) as { results: { reward: number | null; error?: string }[] }).results;
      assert.equal(results.length, 30);
      for (const x of results.slice(0, 29)) assert.match(x.error ?? '', /a part's name is longer than 100 characters/);
      assert.equal(results[29]!.reward, 1);
    } finally {
      await server.close();
    }
  });

  it('a runaway streak carries across the batches of one run (scoreRollouts), and each score call starts afresh', async () => {
    const file = module('loops', "    if (c === 'loop') for (;;) {}\n    return 1;");
    const rollouts = join(dir, 'loops.jsonl');
    writeFileSync(
      rollouts,
      Array.from({ length: 30 }, (_, i) =>
        JSON.stringify({ v: 1, id: `r${i}`, prompt: 'Q', response: 'x', golden: ['x'], meta: { case: 'loop' } }),
      ).join('\n') + '\n',
    );
    const r = await openReward(file, { workers: 1, itemTimeoutMs: 100 });
    try {
      const kinds: Record<string, number> = {};
      for await (const s of scoreRollouts(rollouts, r.sandbox, { batch: 10 }))
        if ('error' in s.outcome) kinds[s.outcome.error.kind] = (kinds[s.outcome.error.kind] ?? 0) + 1;
      // 8 in the first batch, then one probe a batch.
      assert.deepEqual(kinds, { timeout: 10, skipped: 20 });
      const fresh = await r.sandbox.score(['loop', 'ok', 'ok'].map((c, i) => item(`f${i}`, c)));
      assert.equal(errorOf(fresh[0]).kind, 'timeout');
      assert.deepEqual(
        fresh.slice(1).map((o) => 'reward' in o && o.reward),
        [1, 1],
      );
    } finally {
      await r.sandbox.close();
    }
  });
});

describe('reward bounds: limits', function () {
  this.timeout(60_000);
  it('the sandbox refuses limits past what it can keep (a timer past 2^31 - 1 ms would fire at once)', () => {
    const compiled = { file: 'x', code: '', map: '{"version":3,"sources":[],"mappings":""}' };
    for (const bad of [
      { itemTimeoutMs: 1e12 },
      { batchTimeoutMs: 2 ** 31 },
      { itemTimeoutMs: Number.NaN },
      { workers: 0 },
      { memoryMb: 1e6 },
    ])
      assert.throws(() => new RewardSandbox(compiled, bad), /the reward sandbox's \w+ must be in/, JSON.stringify(bad));
  });

  it('`reward --timeout 1e12` and other limits out of range: exit 2 with a clear message', async () => {
    const cli = (...args: string[]) =>
      execa(
        process.execPath,
        [
          '-r',
          join(ROOT, 'test/register.cjs'),
          join(ROOT, 'src/cli/main.ts'),
          'reward',
          'builtin:em',
          join(ROOT, 'nonexistent.jsonl'),
          ...args,
        ],
        {
          reject: false,
          timeout: 60_000,
        },
      );
    const runs = await Promise.all([
      cli('--timeout', '1e12'),
      cli('--batch-timeout', '3000000000'),
      cli('--memory', '100000'),
      cli('--workers', '0'),
    ]);
    const [timeout, batch, memory, workers] = runs;
    for (const run of runs) assert.equal(run.exitCode, 2, run.stderr);
    assert.match(
      timeout!.stderr,
      /--timeout must be a whole number of milliseconds from 1 to 600,000, got 1000000000000/,
    );
    assert.match(batch!.stderr, /--batch-timeout must be a whole number of milliseconds from 1 to 86,400,000/);
    assert.match(memory!.stderr, /--memory must be a whole number of MB from 32 to 2,048/);
    assert.match(workers!.stderr, /--workers must be a whole number of threads from 1 to 256/);
  });
});

describe('reward bounds: compiling reads only the module’s folder', function () {
  this.timeout(60_000);
  let dir: string;
  let mod: string;
  const SECRET = 'sas-secret-7f3c';
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-compile-'));
    mod = join(dir, 'rewards');
    mkdirSync(mod);
    writeFileSync(join(dir, 'secret.txt'), `${SECRET}\n`);
    writeFileSync(
      join(dir, 'secret.map'),
      JSON.stringify({ version: 3, sources: ['secret.ts'], sourcesContent: [SECRET], mappings: 'AAAA' }),
    );
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  const write = (name: string, text: string) => {
    const file = join(mod, name);
    writeFileSync(file, text);
    return file;
  };
  const head = "import { defineReward } from 'search-agent-studio/reward';\n";

  it('source-map comments (a path, a file: URL, a data: URL listing files) are not followed; their text is kept in strings', async () => {
    const dataMap = Buffer.from(
      JSON.stringify({ version: 3, sources: [join(dir, 'secret.txt')], mappings: 'AAAA' }),
    ).toString('base64');
    for (const [name, comment] of [
      ['path', '//# sourceMappingURL=../secret.map'],
      ['url', `//# sourceMappingURL=file://${join(dir, 'secret.map')}`],
      ['data', `//# sourceMappingURL=data:application/json;base64,${dataMap}`],
      ['block', '/*# sourceMappingURL=../secret.map */'],
      ['at', '//@ sourceMappingURL=../secret.map'],
    ]) {
      write(`lib-${name}.js`, `export const s = "//# sourceMappingURL=x";\n${comment}\n`);
      const file = write(
        `${name}.reward.ts`,
        `${head}import { s } from './lib-${name}.js';\nexport default defineReward({ name: 'm', score: () => s.length });\n${comment}\n`,
      );
      const c = await compileRewardModule(file);
      assert.ok(!c.map.includes(SECRET) && !c.code.includes(SECRET), `${name}: nothing of the secret`);
      const r = await openReward(file, { workers: 1 });
      try {
        assert.deepEqual(await r.sandbox.score([item('r')]), [
          { id: 'r', reward: '//# sourceMappingURL=x'.length, parts: {} },
        ]);
      } finally {
        await r.sandbox.close();
      }
    }
  });

  it('no tsconfig.json is read: an `extends` of a file outside is not followed', async () => {
    const sub = join(mod, 'tsx');
    mkdirSync(sub);
    writeFileSync(join(sub, 'tsconfig.json'), JSON.stringify({ extends: join(dir, 'secret.txt') }));
    writeFileSync(join(sub, 'm.reward.ts'), `${head}export default defineReward({ name: 'm', score: () => 1 });\n`);
    const c = await compileRewardModule(join(sub, 'm.reward.ts'));
    assert.ok(!c.code.includes(SECRET));
  });

  it('a compile past its time limit is stopped, and the next compile starts a fresh esbuild', async () => {
    const file = write('quick.reward.ts', `${head}export default defineReward({ name: 'm', score: () => 1 });\n`);
    const limit = COMPILE_LIMITS.timeoutMs;
    COMPILE_LIMITS.timeoutMs = 1;
    try {
      await assert.rejects(
        compileRewardModule(file),
        /quick\.reward\.ts:1:1: compiling took longer than 0\.001 s and was stopped/,
      );
    } finally {
      COMPILE_LIMITS.timeoutMs = limit;
    }
    assert.ok((await compileRewardModule(file)).code.includes('defineReward'));
  });

  it("a compile stopped past its limit does not fail another module's build in flight: that one runs again", async () => {
    // esbuild's real build, held at a gate: the first build waits until another compile's timeout stops the process
    // (as a slow build would be caught); a build begun before a stop then fails as the real one does
    const real = require('esbuild') as typeof import('esbuild');
    const limit = COMPILE_LIMITS.timeoutMs;
    let stops = 0;
    let calls = 0;
    let firstCalled!: () => void;
    const firstCall = new Promise<void>((r) => (firstCalled = r));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    const held = {
      ...real,
      build: (async (o: Parameters<typeof real.build>[0]) => {
        const gen = stops;
        const n = ++calls;
        if (n === 1) firstCalled();
        if (n <= 2) await released; // the first (B's) and the second (A's, which times out) are held
        if (stops !== gen) throw new Error('The service was stopped');
        return real.build(o);
      }) as typeof real.build,
      stop: async () => {
        stops++;
        COMPILE_LIMITS.timeoutMs = limit; // A's limit has done its work: B's second build gets the usual one
        release();
      },
    } as typeof real;
    const b = write('b.reward.ts', `${head}export default defineReward({ name: 'b', score: () => 1 });\n`);
    const a = write('a.reward.ts', `${head}export default defineReward({ name: 'a', score: () => 1 });\n`);
    esbuildForTests(held);
    try {
      const compiledB = compileRewardModule(b);
      await firstCall;
      COMPILE_LIMITS.timeoutMs = 1;
      await assert.rejects(compileRewardModule(a), /a\.reward\.ts:1:1: compiling took longer than/);
      assert.ok((await compiledB).code.includes('defineReward'), "B's build ran again after A's stop");
      assert.equal(calls, 3);
    } finally {
      COMPILE_LIMITS.timeoutMs = limit;
      esbuildForTests(undefined);
    }
  });

  it('a FIFO, a device or an oversized file is refused at its import, never read', async function () {
    if (process.platform === 'win32') this.skip();
    execFileSync('mkfifo', [join(mod, 'pipe.txt')]);
    const fifo = write(
      'fifo.reward.ts',
      `${head}import p from './pipe.txt' with { type: 'text' };\nexport default defineReward({ name: 'm', score: () => p.length });\n`,
    );
    await assert.rejects(compileRewardModule(fifo), (e: unknown) => {
      assert.ok(e instanceof RewardCompileError, String(e));
      assert.match(e.message, /"\.\/pipe\.txt" cannot be imported: .*pipe\.txt is not a regular file/);
      assert.equal(e.line, 2);
      return true;
    });
    writeFileSync(join(mod, 'big.txt'), Buffer.alloc(9 * 1024 * 1024, 97));
    const big = write(
      'big.reward.ts',
      `${head}import b from './big.txt';\nexport default defineReward({ name: 'm', score: () => b.length });\n`,
    );
    await assert.rejects(
      compileRewardModule(big),
      /big\.reward\.ts:2:\d+: "\.\/big\.txt" cannot be imported: .*big\.txt is 9\.0 MB, more than a reward module's file may be \(8 MB\)/,
    );
  });
});
