/**
 * Hostile reward modules against the sandbox, through every path that runs user code: the sandbox API, the `reward`
 * CLI (also in the `--report` mode the Reward Lab runs), and the env server's /reward on loopback. Each case tries to
 * reach the host (test/fixtures/rewards/hostile/hostile.reward.ts: constructor escapes through every object the module
 * gets, `process`, `require`, dynamic import, WebAssembly, Atomics, prototype pollution, getters, proxies, symbols,
 * recursion, memory, loops, console floods) and would write a marker file if it ever got anywhere. Asserted: no
 * marker, the host's objects and memory unchanged, and a clear error for that rollout only. Imports that read files
 * outside the module's folder are compile errors naming the import and its line.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { compileRewardModule, RewardCompileError } from '../../src/core/rewards/compile';
import type { RewardError, RewardItem, RewardOutcome } from '../../src/core/rewards/sandbox';
import { openReward } from '../../src/core/rewards/scoring';
import { startEnvServer } from '../../src/server/server';

const ROOT = join(__dirname, '..', '..');
const HOSTILE_DIR = join(ROOT, 'test', 'fixtures', 'rewards', 'hostile');
const HOSTILE = join(HOSTILE_DIR, 'hostile.reward.ts');
const lineOf = (file: string, needle: string) =>
  readFileSync(file, 'utf8')
    .split('\n')
    .findIndex((l) => l.includes(needle)) + 1;

/** `line`: the line holding this text, plus the offset (where the error must point). */
type Expect =
  | { reward: number }
  | { kind: RewardError['kind'] | RewardError['kind'][]; message: RegExp; line?: [string, number] };
const noProcess = {
  kind: 'throw',
  message: /ReferenceError: 'process' is not defined|no process here|TypeError/,
} as const;
const timeout = { kind: 'timeout', message: /did not finish within 1000 ms/ } as const;
const memory = { kind: 'memory', message: /ran out of memory \(the limit is 64 MB\)/ } as const;
const CASES: Record<string, Expect> = {
  'console-constructor': noProcess,
  'console-proto': noProcess,
  'example-constructor': noProcess,
  'traj-constructor': noProcess,
  'error-constructor': noProcess,
  'error-prepare-stack': noProcess,
  'promise-constructor': noProcess,
  'function-this': noProcess,
  'global-this': noProcess,
  require: noProcess,
  'module-require': noProcess,
  'get-builtin-module': noProcess,
  'dynamic-import': { kind: 'throw', message: /could not load module 'node:fs'/ },
  eval: noProcess,
  webassembly: { kind: 'throw', message: /TypeError: cannot read property 'Module' of undefined/ },
  'atomics-wait': { kind: 'throw', message: /'Atomics' is not defined/ },
  'atomics-wait-timeout': { kind: 'throw', message: /'Atomics' is not defined/ },
  'pollute-parts': { kind: 'type', message: /parts\.__proto__: a part cannot be named __proto__/ },
  'pollute-result': { reward: 1 },
  'getter-loop': { ...timeout, line: ["'getter-loop': () => ({", 2] },
  'getter-throws': { kind: 'throw', message: /Error: from a getter/, line: ["throw new Error('from a getter')", 0] },
  proxy: { reward: 0.25 },
  'proxy-loop': timeout,
  symbol: { kind: 'type', message: /returned symbol \(expected a number or \{ reward, parts \}\)/ },
  'symbol-reward': { kind: 'type', message: /returned \{ reward: symbol \}/ },
  'symbol-part': { kind: 'type', message: /parts\.em is symbol/ },
  'thenable-loop': timeout,
  recursion: { kind: 'throw', message: /stack overflow/ },
  'recursion-caught': { reward: 1 },
  'recursion-native': { kind: 'throw', message: /stack overflow/ },
  'deep-json': { kind: 'throw', message: /stack overflow/ },
  backtracking: timeout,
  'huge-string': memory,
  'array-buffer': { ...memory, line: ['new ArrayBuffer(2 ** 31 - 1)', 0] },
  'memory-hog': { ...memory, line: ["'memory-hog': () => {", 2] },
  'string-hog': memory,
  loop: { ...timeout, line: ["'loop': () => {", 1] },
  'never-settles': { kind: 'timeout', message: /returned a promise that never settled/ },
  'async-loop': { ...timeout, line: ["'async-loop': async () => {", 2] },
  // A promise chain that never ends also keeps every link: it meets the time limit or the memory limit first.
  'job-flood': { kind: ['timeout', 'memory'], message: /did not finish within 1000 ms|ran out of memory/ },
  'console-flood': { reward: 1 },
  'console-escape': { reward: 1 },
  'throw-string': { kind: 'throw', message: /threw a string: a plain string/, line: ["throw 'a plain string'", 0] },
  'throw-object': { kind: 'throw', message: /threw an object: \{"code":42\}/, line: ['throw { code: 42 }', 0] },
  'huge-error': { kind: 'throw', message: /Error: e{100}/ },
  // Last: it changes its own realm's prototypes (which only it uses).
  'pollute-prototypes': { reward: 0.5 },
};

/** Each case, then an `ok` rollout after it: the next rollout still scores (and no streak of limits builds up). The
 * last case changes its own realm, so nothing follows it. */
const SEQUENCE = Object.keys(CASES)
  .flatMap((c) => [c, 'ok'])
  .slice(0, -1);

function checkOutcome(
  c: string,
  o: { reward?: number | null; kind?: string; message?: string; line?: number },
  where: string,
): void {
  const want = CASES[c] ?? { reward: 1 };
  if ('reward' in want) {
    assert.equal(o.reward, want.reward, `${where} ${c}: ${JSON.stringify(o)}`);
    return;
  }
  assert.ok(
    (Array.isArray(want.kind) ? want.kind : [want.kind]).includes(o.kind as RewardError['kind']),
    `${where} ${c}: ${JSON.stringify(o)}`,
  );
  assert.match(o.message ?? '', want.message, `${where} ${c}`);
  if (want.line && where === 'api')
    assert.equal(o.line, lineOf(HOSTILE, want.line[0]) + want.line[1], `${where} ${c}: the line`);
}

function assertHostUntouched(markers: string[]): void {
  const escaped = markers.filter((m) => existsSync(m) || existsSync(`${m}.exec`));
  assert.deepEqual(escaped, [], 'no module reached the host');
  assert.equal(({} as Record<string, unknown>).polluted, undefined, "the host's Object.prototype is untouched");
  assert.equal(JSON.stringify({ a: [1] }), '{"a":[1]}');
  assert.equal([1].push(2), 2);
}

describe('hostile reward modules', function () {
  this.timeout(180_000);
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-hostile-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  const marker = (c: string, path: string) => join(dir, `${path}-${c}`);
  const item = (c: string, i: number, path: string): RewardItem => ({
    id: `h${i}`,
    prompt: 'Q',
    response: '<answer> x </answer>',
    golden: ['x'],
    meta: { case: c, marker: marker(c, path) },
  });

  it('the sandbox API: every escape fails inside the sandbox with a clear error for its rollout; memory and time hold', async () => {
    const logs: string[] = [];
    const r = await openReward(HOSTILE, {
      workers: 2,
      itemTimeoutMs: 1000,
      memoryMb: 64,
      chunk: 8,
      onLog: (l) => logs.push(l),
    });
    const rss0 = process.memoryUsage().rss;
    let rssMax = rss0;
    const sampler = setInterval(() => (rssMax = Math.max(rssMax, process.memoryUsage().rss)), 20);
    try {
      const items = SEQUENCE.map((c, i) => item(c, i, 'api'));
      const out = await r.sandbox.score(items);
      out.forEach((o: RewardOutcome, i) => {
        const c = SEQUENCE[i]!;
        checkOutcome(
          c,
          'error' in o
            ? {
                kind: o.error.kind,
                message: o.error.message,
                ...(o.error.line !== undefined ? { line: o.error.line } : {}),
              }
            : { reward: o.reward },
          'api',
        );
        if ('error' in o && o.error.file) assert.equal(o.error.file, HOSTILE, `${c}: located in the module`);
      });
      // The module's console: bounded per rollout (8,000 characters) and escaped (no terminal control sequences).
      const chars = logs.reduce((s, l) => s + l.length, 0);
      assert.ok(chars < 12_000, `console output bounded: ${chars} characters`);
      assert.ok(
        logs.some((l) => /console lines of the module not shown/.test(l)),
        'the cut is said',
      );
      assert.ok(logs.includes('\\x1b]0;pwned\\x07\\x1b[2Jcleared'), 'control characters escaped');
      assert.ok(!logs.some((l) => l.includes('\u001b')));
      const huge = out[SEQUENCE.indexOf('huge-error')]!;
      assert.ok('error' in huge && huge.error.message.length < 2_100, 'a 10 MB error message is cut');
    } finally {
      clearInterval(sampler);
      await r.sandbox.close();
    }
    assertHostUntouched(Object.keys(CASES).map((c) => marker(c, 'api')));
    // The issue's `new ArrayBuffer(2**31 - 1)` took the host to 2.69 GB; two threads of 64 MB each cannot.
    assert.ok(rssMax - rss0 < 600e6, `the host's memory grew by ${((rssMax - rss0) / 1e6).toFixed(0)} MB`);
  });

  it("the `reward` CLI (and its --report mode, the Reward Lab's path): the same errors per rollout, exit 1, no host effect", async () => {
    const file = join(dir, 'hostile.jsonl');
    writeFileSync(
      file,
      `${SEQUENCE.map((c, i) => JSON.stringify({ v: 1, id: `h${i}`, prompt: 'Q', response: '<answer> x </answer>', golden: ['x'], meta: { case: c, marker: marker(c, 'cli') } })).join('\n')}\n`,
    );
    const cli = (...args: string[]) =>
      execa(
        process.execPath,
        [
          '-r',
          join(ROOT, 'test/register.cjs'),
          join(ROOT, 'src/cli/main.ts'),
          'reward',
          HOSTILE,
          file,
          '--timeout',
          '1000',
          '--memory',
          '64',
          '--workers',
          '2',
          ...args,
        ],
        { reject: false },
      );
    const [json, report] = await Promise.all([cli('--json'), cli('--report')]);
    assert.equal(json.exitCode, 1, json.stderr.slice(-2000));
    const items = (JSON.parse(json.stdout) as { items: { id: string; reward: number | null; error?: string }[] }).items;
    items.forEach((it, i) => {
      const c = SEQUENCE[i]!;
      const want = CASES[c] ?? { reward: 1 };
      if ('reward' in want) assert.equal(it.reward, want.reward, `cli ${c}: ${JSON.stringify(it)}`);
      else assert.match(it.error ?? '', want.message, `cli ${c}: ${JSON.stringify(it)}`);
    });
    assert.ok(json.stderr.length < 200_000, `stderr bounded (${json.stderr.length} characters)`);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: asserts no escape character reaches the terminal
    assert.doesNotMatch(json.stderr, /\u001b/, 'no terminal control sequence from the module reaches the terminal');
    // --report: progress lines count the failures by kind as they happen; the report has them by kind.
    assert.equal(report.exitCode, 1);
    const last = JSON.parse(report.stdout.trim().split('\n').pop()!) as {
      report: { errorsByKind: Record<string, number>; failures: { error: RewardError }[] };
    };
    const kinds = (k: string) =>
      Object.values(CASES).filter(
        (e) => 'kind' in e && (Array.isArray(e.kind) ? e.kind.includes(k as never) : e.kind === k),
      ).length;
    const by = last.report.errorsByKind;
    assert.deepEqual([by.throw, by.type], [kinds('throw'), kinds('type')]);
    assert.equal((by.timeout ?? 0) + (by.memory ?? 0), kinds('timeout') + kinds('memory') - 1, JSON.stringify(by));
    const progress = report.stderr
      .split('\n')
      .filter((l) => l.startsWith('{"progress"'))
      .map((l) => JSON.parse(l) as { progress: number; errors: Record<string, number> });
    assert.ok(
      progress.some((p) => (p.errors.timeout ?? 0) > 0 && p.progress < SEQUENCE.length),
      'timeouts are counted while the run goes on',
    );
    assertHostUntouched(Object.keys(CASES).map((c) => marker(c, 'cli')));
  });

  it("the env server's /reward on loopback: the same errors per item, and the server keeps serving", async () => {
    const r = await openReward(HOSTILE, { workers: 2, itemTimeoutMs: 1000, memoryMb: 64, chunk: 8 });
    const server = await startEnvServer({
      version: 'test',
      reward: { name: 'hostile', file: r.compiled.file, sandbox: r.sandbox },
    });
    try {
      const res = await fetch(`http://127.0.0.1:${server.port}/reward`, {
        method: 'POST',
        body: JSON.stringify({
          items: SEQUENCE.map((c, i) => ({
            id: `h${i}`,
            response: '<answer> x </answer>',
            golden: ['x'],
            meta: { case: c, marker: marker(c, 'server') },
          })),
        }),
      });
      assert.equal(res.status, 200);
      const results = ((await res.json()) as { results: { reward: number | null; error?: string }[] }).results;
      results.forEach((it, i) => {
        const c = SEQUENCE[i]!;
        const want = CASES[c] ?? { reward: 1 };
        if ('reward' in want) assert.equal(it.reward, want.reward, `server ${c}: ${JSON.stringify(it)}`);
        else {
          assert.equal(it.reward, null);
          assert.match(it.error ?? '', want.message, `server ${c}: ${JSON.stringify(it)}`);
        }
      });
      const health = await fetch(`http://127.0.0.1:${server.port}/health`);
      assert.equal(health.status, 200, 'still serving');
    } finally {
      await server.close();
    }
    assertHostUntouched(Object.keys(CASES).map((c) => marker(c, 'server')));
  });

  it('a rollout nested 10,000 or 1,000,000 deep (its meta) fails alone; the process and the other rollouts are fine', async () => {
    // Rollouts cross into the sandbox as strings: nothing deep is ever structured-cloned (issue 40.4's crash at
    // Worker.postMessage). Too deep for JSON.stringify: `input`; too deep for the sandbox's JSON.parse: its stack limit.
    const deep = (n: number) => {
      let o: Record<string, unknown> = {};
      for (let i = 0; i < n; i++) o = { o };
      return o;
    };
    const r = await openReward(HOSTILE, { workers: 1, itemTimeoutMs: 2000 });
    try {
      const out = await r.sandbox.score([
        item('ok', 0, 'deep'),
        { ...item('ok', 1, 'deep'), meta: { case: 'ok', d: deep(10_000) } },
        { ...item('ok', 2, 'deep'), meta: { case: 'ok', d: deep(1_000_000) } },
        item('ok', 3, 'deep'),
      ]);
      assert.deepEqual(
        [out[0], out[3]].map((o) => o && 'reward' in o && o.reward),
        [1, 1],
      );
      for (const o of [out[1]!, out[2]!]) {
        assert.ok('error' in o, JSON.stringify(o).slice(0, 200));
        assert.match(
          `${o.error.kind}: ${o.error.message}`,
          /^(input: the rollout cannot be passed to the reward module: .*call stack|throw: .*stack overflow)/,
        );
      }
    } finally {
      await r.sandbox.close();
    }
  });

  it('a promise chain that never ends, given the time to fill the memory, is reported as the memory limit (not a thrown null, not a promise waiting on nothing)', async () => {
    // Out of memory, QuickJS throws null (no room for an error), which the chain passes on as a rejection, or drops a
    // job it cannot allocate, which leaves the promise pending with no job left: both are the memory limit.
    const r = await openReward(HOSTILE, { workers: 1, itemTimeoutMs: 60_000, memoryMb: 32 });
    try {
      const out = await r.sandbox.score([
        item('job-flood', 0, 'flood'),
        item('ok', 1, 'flood'),
        item('job-flood', 2, 'flood'),
        item('job-flood', 3, 'flood'),
      ]);
      assert.deepEqual(
        out.map((o) => ('error' in o ? `${o.error.kind}: ${o.error.message}` : o.reward)),
        [
          'memory: ran out of memory (the limit is 32 MB)',
          1,
          'memory: ran out of memory (the limit is 32 MB)',
          'memory: ran out of memory (the limit is 32 MB)',
        ],
      );
    } finally {
      await r.sandbox.close();
    }
  });

  it('a module whose top-level code loops, eats memory or throws: every rollout fails at once with that error and its line', async () => {
    const cases: [string, RegExp, string][] = [
      ['toplevel-loop.reward.ts', /the module's top-level code did not finish within 1000 ms/, 'for (;;) n++;'],
      [
        'toplevel-memory.reward.ts',
        /the module's top-level code ran out of memory \(the limit is 64 MB\)/,
        'for (;;) hog.push',
      ],
      ['toplevel-throw.reward.ts', /^threw a string: no process: refusing to load$/, "throw 'no process"],
    ];
    for (const [name, message, line] of cases) {
      const file = join(HOSTILE_DIR, name);
      const r = await openReward(file, { workers: 1, itemTimeoutMs: 1000, memoryMb: 64 });
      try {
        const t0 = Date.now();
        const out = await r.sandbox.score(Array.from({ length: 20 }, (_, i) => item('ok', i, 'top')));
        assert.ok(Date.now() - t0 < 15_000, `${name}: failed fast, not 20 item limits (${Date.now() - t0} ms)`);
        for (const o of out) {
          assert.ok('error' in o, name);
          assert.match(o.error.message, message, name);
          assert.equal(o.error.file, file, name);
          assert.equal(o.error.line, lineOf(file, line), `${name}: the line`);
        }
      } finally {
        await r.sandbox.close();
      }
    }
  });
});

describe('reward module imports', function () {
  this.timeout(120_000);
  let dir: string;
  let mod: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-imports-'));
    mod = join(dir, 'rewards');
    mkdirSync(join(mod, 'sub'), { recursive: true });
    mkdirSync(join(dir, 'node_modules', 'evil'), { recursive: true });
    writeFileSync(join(dir, 'secret.json'), '{"token": "s3cret"}');
    writeFileSync(join(dir, 'outside.ts'), 'export const x = 1;\n');
    writeFileSync(join(dir, 'node_modules', 'evil', 'package.json'), '{"name": "evil", "main": "index.js"}');
    writeFileSync(join(dir, 'node_modules', 'evil', 'index.js'), 'module.exports = require("../../secret.json");\n');
    writeFileSync(join(mod, 'inner.json'), '{"weight": 0.5}');
    writeFileSync(join(mod, 'notes.txt'), 'inside the folder\n');
    writeFileSync(join(mod, 'sub', 'helper.ts'), 'export const bonus = (x: number) => x + 0.25;\n');
    writeFileSync(join(mod, 'sub', 'index.ts'), 'export const zero = 0;\n');
    // Packages in a node_modules inside the folder: `main`, and `exports` with conditions.
    mkdirSync(join(mod, 'node_modules', 'inner', 'lib'), { recursive: true });
    writeFileSync(join(mod, 'node_modules', 'inner', 'package.json'), '{"name": "inner", "main": "lib/main.js"}');
    writeFileSync(join(mod, 'node_modules', 'inner', 'lib', 'main.js'), 'export const one = 1;\n');
    mkdirSync(join(mod, 'node_modules', '@scope', 'pkg'), { recursive: true });
    writeFileSync(
      join(mod, 'node_modules', '@scope', 'pkg', 'package.json'),
      '{"name": "@scope/pkg", "exports": {".": {"import": "./esm.mjs", "require": "./cjs.cjs"}}}',
    );
    writeFileSync(join(mod, 'node_modules', '@scope', 'pkg', 'esm.mjs'), 'export const two = 2;\n');
    symlinkSync(join(dir, 'secret.json'), join(mod, 'link.json'));
    symlinkSync(dir, join(mod, 'up'));
    writeFileSync(
      join(mod, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { baseUrl: '.', paths: { '@up/*': ['../*'] } } }),
    );
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  const module = (name: string, imports: string, use: string) => {
    const file = join(mod, `${name}.reward.ts`);
    writeFileSync(
      file,
      `import { defineReward } from 'search-agent-studio/reward';\n${imports}\n\nexport default defineReward({ name: '${name}', score: () => ${use} });\n`,
    );
    return file;
  };

  it("imports from the module's own folder tree (JSON, text, TypeScript) and the reward API compile and run", async () => {
    const file = module(
      'ok',
      "import inner from './inner.json';\nimport notes from './notes.txt' with { type: 'text' };\nimport { bonus } from './sub/helper';\nimport { zero } from './sub';\nimport { one } from 'inner';\nimport { two } from '@scope/pkg';",
      'bonus(inner.weight) + (notes.startsWith("inside") ? 0.25 : 0) + zero + (one + two - 3)',
    );
    const r = await openReward(file, { workers: 1 });
    try {
      assert.deepEqual(await r.sandbox.score([{ id: 'r', prompt: '', response: '', golden: [] }]), [
        { id: 'r', reward: 1, parts: {} },
      ]);
    } finally {
      await r.sandbox.close();
    }
  });

  it('anything else is a compile error naming the import, the file and the line: ../, absolute paths, symlinks out, packages outside, tsconfig paths, Node built-ins', async () => {
    const cases: [string, string, RegExp][] = [
      [
        'parent',
        "import s from '../secret.json';",
        /"\.\.\/secret\.json" cannot be imported: .*secret\.json is outside the module's folder/,
      ],
      [
        'passwd',
        "import p from '/etc/passwd' with { type: 'text' };",
        /"\/etc\/passwd" cannot be imported: \/etc\/passwd is outside the module's folder/,
      ],
      ['absolute', `import { x } from ${JSON.stringify(join(dir, 'outside.ts'))};`, /outside\.ts" cannot be imported/],
      [
        'symlink',
        "import s from './link.json';",
        /"\.\/link\.json" cannot be imported: .*\/secret\.json is outside the module's folder/,
      ],
      [
        'symlink-dir',
        "import s from './up/secret.json';",
        /"\.\/up\/secret\.json" cannot be imported: .*\/secret\.json is outside the module's folder/,
      ],
      [
        'package',
        "import e from 'evil';",
        /"evil" cannot be imported: there is no package "evil" in a node_modules folder of the module's folder .*packages outside it are not read/,
      ],
      ['tsconfig-paths', "import s from '@up/secret.json';", /"@up\/secret\.json" cannot be imported/],
      ['builtin', "import fs from 'node:fs';", /"node:fs" cannot be imported: reward modules run sandboxed/],
      [
        'bare-builtin',
        "import cp from 'child_process';",
        /"child_process" cannot be imported: reward modules run sandboxed/,
      ],
      ['require', "const fs = require('fs');", /"fs" cannot be imported: reward modules run sandboxed/],
      ['dynamic-import', "const load = () => import('node:fs');", /"node:fs" cannot be imported/],
      [
        'data-url',
        "import d from 'data:text/javascript,export default 1';",
        /cannot be imported: it is not a file of the module’s folder/,
      ],
    ];
    for (const [name, imports, message] of cases) {
      // The binding is used: TypeScript drops an import nothing uses (nothing would be read).
      const binding = /(?:import|const) (?:\{ )?(\w+)/.exec(imports)![1]!;
      const file = module(name, imports, `typeof ${binding} === 'undefined' ? 0 : 1`);
      await assert.rejects(compileRewardModule(file), (e: unknown) => {
        assert.ok(e instanceof RewardCompileError, `${name}: ${String(e)}`);
        assert.match(e.message, message, name);
        assert.equal(e.file, file, `${name}: the module is named`);
        assert.equal(e.line, 2, `${name}: the import's line`);
        return true;
      });
    }
    // Through the CLI (and so the Reward Lab): exit 2 with the same message; through `serve --reward`: refused to start.
    const cli = (...args: string[]) =>
      execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), ...args], {
        reject: false,
        timeout: 60_000,
      });
    const rollouts = join(dir, 'r.jsonl');
    writeFileSync(
      rollouts,
      `${JSON.stringify({ v: 1, id: 'r0', prompt: '', response: '<answer>a</answer>', golden: ['a'] })}\n`,
    );
    const [viaCli, viaReport, viaServe] = await Promise.all([
      cli('reward', join(mod, 'parent.reward.ts'), rollouts),
      cli('reward', join(mod, 'passwd.reward.ts'), rollouts, '--report'),
      cli('serve', '--port', '0', '--reward', join(mod, 'symlink.reward.ts')),
    ]);
    assert.equal(viaCli.exitCode, 2);
    assert.match(viaCli.stderr, /parent\.reward\.ts:2:\d+: "\.\.\/secret\.json" cannot be imported/);
    assert.doesNotMatch(viaCli.stdout + viaCli.stderr, /s3cret/);
    assert.equal(viaReport.exitCode, 2);
    const compileError = (JSON.parse(viaReport.stdout.trim()) as { compileError: { line: number; message: string } })
      .compileError;
    assert.equal(compileError.line, 2);
    assert.match(compileError.message, /"\/etc\/passwd" cannot be imported/);
    assert.equal(viaServe.exitCode, 2, viaServe.stderr);
    assert.match(viaServe.stderr, /"\.\/link\.json" cannot be imported/);
  });
});

describe('reward limits on every path', function () {
  this.timeout(180_000);
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-limits-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  const SLOW = join(HOSTILE_DIR, 'slow.reward.ts');
  const TOP_LOOP = join(HOSTILE_DIR, 'toplevel-loop.reward.ts');
  const rolloutFile = (name: string, cases: string[]) => {
    const f = join(dir, `${name}.jsonl`);
    writeFileSync(
      f,
      `${cases.map((c, i) => JSON.stringify({ v: 1, id: `r${i}`, prompt: 'Q', response: '<answer> x </answer>', golden: ['x'], meta: { case: c } })).join('\n')}\n`,
    );
    return f;
  };
  const cli = (...args: string[]) =>
    execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), 'reward', ...args], {
      reject: false,
      timeout: 120_000,
    });
  const postCases = async (port: number, cases: string[]) => {
    const res = await fetch(`http://127.0.0.1:${port}/reward`, {
      method: 'POST',
      body: JSON.stringify({
        items: cases.map((c, i) => ({
          id: `q${i}`,
          response: '<answer> x </answer>',
          golden: ['x'],
          meta: { case: c },
        })),
      }),
    });
    return ((await res.json()) as { results: { reward: number | null; error?: string }[] }).results;
  };
  const post = (port: number, n: number, c = 'ok') =>
    postCases(
      port,
      Array.from({ length: n }, () => c),
    );

  it('the per-batch limit: the sandbox API, the CLI (--batch-timeout) and /reward stop a batch of slow rollouts at its deadline', async () => {
    // 300 ms a rollout, one thread, a 3 s batch: a few score, the rest fail with the batch's limit. (The thread is
    // started and the module loaded first, so that a loaded machine's start-up is not counted in the batch.)
    const r = await openReward(SLOW, { workers: 1, itemTimeoutMs: 1000, batchTimeoutMs: 3000 });
    try {
      await r.sandbox.score([{ id: 'warm', prompt: '', response: '', golden: [] }]);
      const t0 = Date.now();
      const out = await r.sandbox.score(
        Array.from({ length: 40 }, (_, i) => ({ id: `s${i}`, prompt: '', response: '', golden: [] })),
      );
      assert.ok(Date.now() - t0 < 11_000, `stopped near its deadline, not after 40 × 300 ms (${Date.now() - t0} ms)`);
      const late = out.filter((o) => 'error' in o && o.error.kind === 'batch-timeout');
      assert.ok(late.length >= 20 && late.length < 40, `${late.length} of 40 past the batch limit`);
      assert.match((late[0] as { error: RewardError }).error.message, /the batch did not finish within 3000 ms/);
      const server = await startEnvServer({
        version: 'test',
        reward: { name: 'slow', file: r.compiled.file, sandbox: r.sandbox },
      });
      try {
        const results = await post(server.port, 40);
        assert.ok(results.filter((x) => /the batch did not finish within 3000 ms/.test(x.error ?? '')).length >= 20);
      } finally {
        await server.close();
      }
    } finally {
      await r.sandbox.close();
    }
    const viaCli = await cli(
      SLOW,
      rolloutFile(
        'slow',
        Array.from({ length: 40 }, () => 'ok'),
      ),
      '--workers',
      '1',
      '--batch-timeout',
      '1500',
      '--json',
    );
    assert.equal(viaCli.exitCode, 1);
    const items = (JSON.parse(viaCli.stdout) as { items: { error?: string }[] }).items;
    assert.ok(
      items.filter((it) => /the batch did not finish within 1500 ms/.test(it.error ?? '')).length >= 20,
      viaCli.stdout.slice(0, 500),
    );
  });

  it('a module that loops on every rollout is reported in seconds: the first rollouts time out, the rest are not run (CLI and /reward)', async () => {
    // The Reward Lab's hang: 2,048 looping rollouts a batch, each waiting out its limit. Now 8 in a row stop the batch.
    const loops = rolloutFile(
      'loop',
      Array.from({ length: 300 }, () => 'loop'),
    );
    const t0 = Date.now();
    const viaCli = await cli(HOSTILE, loops, '--timeout', '500', '--workers', '2');
    assert.equal(viaCli.exitCode, 1);
    assert.match(viaCli.stdout, /300 rollouts, 0 scored, 300 failed \((8|9) timed out, 29[12] not run\)/);
    assert.match(viaCli.stderr, /not run: \d+ rollouts in a row failed with a time or memory limit/);
    assert.ok(Date.now() - t0 < 60_000, `${Date.now() - t0} ms`);
    const r = await openReward(HOSTILE, { workers: 2, itemTimeoutMs: 500 });
    const server = await startEnvServer({
      version: 'test',
      reward: { name: 'hostile', file: r.compiled.file, sandbox: r.sandbox },
    });
    try {
      const first = await post(server.port, 100, 'loop');
      assert.ok(first.filter((x) => /did not finish within 500 ms/.test(x.error ?? '')).length >= 8);
      assert.ok(first.filter((x) => /not run/.test(x.error ?? '')).length >= 80);
      // Each request starts afresh: another request of loops stops after its own streak, in seconds.
      const t1 = Date.now();
      const again = await post(server.port, 100, 'loop');
      assert.ok(Date.now() - t1 < 20_000);
      assert.ok(again.filter((x) => /did not finish within 500 ms/.test(x.error ?? '')).length >= 8);
      assert.ok(again.filter((x) => /not run/.test(x.error ?? '')).length >= 80);
    } finally {
      await server.close();
    }
    // An unrelated request whose first rollout loops still scores its others: the last request's streak is not its.
    // (One thread, so that the looping rollout is the request's first outcome.)
    const one = await openReward(HOSTILE, { workers: 1, itemTimeoutMs: 300 });
    const server1 = await startEnvServer({
      version: 'test',
      reward: { name: 'hostile', file: one.compiled.file, sandbox: one.sandbox },
    });
    try {
      const runaway = await post(server1.port, 12, 'loop');
      assert.equal(runaway.filter((x) => /not run/.test(x.error ?? '')).length, 4);
      const mixed = await postCases(server1.port, ['loop', 'ok', 'ok', 'ok']);
      assert.match(mixed[0]!.error ?? '', /did not finish within 300 ms/);
      assert.deepEqual(
        mixed.slice(1).map((x) => x.reward),
        [1, 1, 1],
      );
    } finally {
      await server1.close();
    }
  });

  it('a module that loops in its top-level code: every rollout fails at once, on the CLI and on /reward', async () => {
    const viaCli = await cli(TOP_LOOP, rolloutFile('top', ['ok', 'ok', 'ok']), '--timeout', '500', '--json');
    assert.equal(viaCli.exitCode, 1);
    for (const it of (JSON.parse(viaCli.stdout) as { items: { error?: string }[] }).items)
      assert.match(it.error ?? '', /the module's top-level code did not finish within 500 ms/);
    const r = await openReward(TOP_LOOP, { workers: 1, itemTimeoutMs: 500 });
    const server = await startEnvServer({
      version: 'test',
      reward: { name: 'top', file: r.compiled.file, sandbox: r.sandbox },
    });
    try {
      const results = await post(server.port, 3);
      for (const x of results)
        assert.match(
          x.error ?? '',
          /toplevel-loop\.reward\.ts:5: the module's top-level code did not finish within 500 ms/,
        );
    } finally {
      await server.close();
    }
  });
});
