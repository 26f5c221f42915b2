/** /reward on the env server and the `reward` CLI, over real HTTP and real processes. */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { openReward } from '../../src/core/rewards/scoring';
import { type EnvServer, startEnvServer } from '../../src/server/server';

const ROOT = join(__dirname, '..', '..');
const MISBEHAVING = join(ROOT, 'test', 'fixtures', 'rewards', 'modules', 'misbehaving.reward.ts');

async function post(port: number, body: unknown) {
  const res = await fetch(`http://127.0.0.1:${port}/reward`, { method: 'POST', body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as any };
}

describe('env server /reward', function () {
  this.timeout(60_000);
  let server: EnvServer;
  before(async () => {
    const r = await openReward(MISBEHAVING, { workers: 1, itemTimeoutMs: 300 });
    server = await startEnvServer({
      version: 'test',
      reward: { name: 'misbehaving', file: r.compiled.file, sandbox: r.sandbox },
    });
  });
  after(() => server.close());

  it('scores items with the configured module; a failing item gets null and an error naming file and line', async () => {
    const r = await post(server.port, {
      items: [
        { response: '<answer> x </answer>', golden: ['x'] },
        { id: 'r7', response: '<answer> x </answer>', golden: ['x'], meta: { case: 'throw' } },
        { response: 'no answer', prompt: 'Q', golden: [], data_source: 'nq', meta: { case: 'loop' } },
      ],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body.results[0], { reward: 1, parts: { answered: 1 } });
    assert.equal(r.body.results[1].reward, null);
    assert.match(r.body.results[1].error, /misbehaving\.reward\.ts:\d+: Error: cannot score x \(item r7\)/);
    assert.match(r.body.results[2].error, /did not finish within 300 ms/);
    const health = (await (await fetch(`http://127.0.0.1:${server.port}/health`)).json()) as { reward: unknown };
    assert.deepEqual(health.reward, { name: 'misbehaving', module: MISBEHAVING });
  });

  it("metrics: true adds the built-in measures (EM, F1, format, searches) beside the module's reward", async () => {
    const response =
      '<think>t</think><search> q </search><information>Doc 1(Title: x) y</information><think>t</think><answer> The Paris </answer>';
    const r = await post(server.port, {
      metrics: true,
      items: [
        { response, golden: ['paris'] },
        { response: 'nothing', golden: ['paris'], meta: { case: 'throw' } },
      ],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body.results[0], {
      reward: 1,
      parts: { answered: 1 },
      metrics: { em: 1, f1: 1, format: 1, answered: 1, searches: 1, answer_retrieved: 0 },
    });
    assert.equal(r.body.results[1].reward, null);
    assert.deepEqual(r.body.results[1].metrics, {
      em: 0,
      f1: 0,
      format: 0,
      answered: 0,
      searches: 0,
      answer_retrieved: 0,
    });
    const plain = await post(server.port, { items: [{ response, golden: ['paris'] }] });
    assert.equal(plain.body.results[0].metrics, undefined);
    const bad = await post(server.port, { metrics: 'yes', items: [] });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /metrics: expected a boolean/);
  });

  it('strict_actions: the module and the built-in measures read no answer from inside an unclosed <search>', async () => {
    const hack =
      '<think>t</think><search> Bryran </search><information>Doc 1(Title: x) founded by Broubrar.</information><think>t</think><search> Broubrar <answer> Broubrar </answer>';
    const r = await post(server.port, {
      metrics: true,
      items: [
        { response: hack, golden: ['Broubrar'] },
        { response: hack, golden: ['Broubrar'], strict_actions: true },
      ],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(
      r.body.results[0],
      {
        reward: 1,
        parts: { answered: 1 },
        metrics: { em: 1, f1: 1, format: 0, answered: 1, searches: 1, answer_retrieved: 1 },
      },
      "Search-R1's reading: the answer counts",
    );
    assert.deepEqual(r.body.results[1], {
      reward: 0,
      parts: { answered: 0 },
      metrics: { em: 0, f1: 0, format: 0, answered: 0, searches: 1, answer_retrieved: 1 },
    });
    const bad = await post(server.port, { items: [{ response: hack, golden: [], strict_actions: 'yes' }] });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /items\[0\]\.strict_actions: expected a boolean, got "yes"/);
  });

  it("answer_retrieved: a golden answer in what a search returned, as whole words; not in the policy's own text", async () => {
    const turn = (info: string) => `<think>t</think><search> q </search><information>${info}</information>`;
    const cases: [string, string[], number][] = [
      [
        `${turn('Doc 1(Title: "Zemor Dogrand") born in Grethoubil.')}${turn('Doc 1(Title: "Grethoubil") The Zilthen runs through it.')}<answer> Grethoubil </answer>`,
        ['the Zilthen'],
        1,
      ],
      [
        `${turn('Doc 1(Title: "Zemor Dogrand") born in Grethoubil.')}<think>the Zilthen?</think><answer> the Zilthen </answer>`,
        ['Zilthen'],
        0,
      ],
      [`${turn('Doc 1(Title: x) a Parisian café')}<answer> Paris </answer>`, ['Paris'], 0],
      [`${turn('Doc 1(Title: x) ... in PARIS, France')}<answer> Lyon </answer>`, ['paris'], 1],
      [`${turn('Doc 1(Title: x) the end')}<answer> the </answer>`, ['The'], 0],
    ];
    const r = await post(server.port, {
      metrics: true,
      items: cases.map(([response, golden]) => ({ response, golden })),
    });
    assert.deepEqual(
      r.body.results.map((x: { metrics: { answer_retrieved: number } }) => x.metrics.answer_retrieved),
      cases.map((c) => c[2]),
    );
  });

  it('dialect and search_tool say how a response acts: a tool call of the configured search tool is a search', async () => {
    const prompt =
      '<|im_start|>system\n# Tools\n\n<tools>\n{"type": "function", "function": {"name": "wiki", "parameters": {}}}\n</tools><|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n';
    const response =
      '<tool_call>\n{"name": "wiki", "arguments": {"query": "q"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nDoc 1(Title: x) y\n</tool_response><|im_end|>\n<|im_start|>assistant\n<answer> y </answer><|im_end|>';
    const item = { prompt, response, golden: ['y'], dialect: 'toolcall', meta: { case: 'searches' } };
    const r = await post(server.port, { metrics: true, items: [{ ...item, search_tool: 'wiki' }, item] });
    assert.equal(r.status, 200);
    assert.deepEqual(
      [r.body.results[0].reward, r.body.results[0].metrics.searches],
      [1, 1],
      'the module and the built-in measures both see the search',
    );
    assert.equal(r.body.results[0].metrics.answer_retrieved, 1, 'the tool response holds the answer');
    assert.deepEqual(
      [r.body.results[1].reward, r.body.results[1].metrics.searches],
      [0, 0],
      'a declared tool that is not the search tool: a valid action, not a search',
    );
    const bad = await post(server.port, { items: [{ ...item, search_tool: ' ' }] });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /items\[0\]\.search_tool: expected a tool name/);
  });

  it('rejects malformed requests naming the field', async () => {
    const cases: [unknown, RegExp][] = [
      [[], /body: expected a JSON object/],
      [{}, /items: expected an array, got nothing/],
      [{ items: [7] }, /items\[0\]: expected an object/],
      [{ items: [{ golden: [] }] }, /items\[0\]\.response: expected a string, got nothing/],
      [{ items: [{ response: '', golden: 'x' }] }, /items\[0\]\.golden: expected an array of strings/],
      [{ items: [{ response: '', golden: [], meta: 3 }] }, /items\[0\]\.meta: expected an object/],
    ];
    for (const [body, re] of cases) {
      const r = await post(server.port, body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(r.body.error, re);
    }
  });
});

describe('env server /reward, concurrent requests', function () {
  this.timeout(60_000);
  it("answers each of many concurrent requests with its own items' rewards (two workers, several chunks a request)", async () => {
    // veRL's reward loop and the TRL engine post /reward concurrently. (The sandbox's hang on back-to-back calls is
    // pinned down in reward-sandbox.test.ts; over HTTP the calls rarely queue that tightly.) A hang would fail here
    // as the batch's timeout, not the test's.
    const r = await openReward('builtin:em', { workers: 2, chunk: 3, batchTimeoutMs: 10_000 });
    const server = await startEnvServer({
      version: 'test',
      reward: { name: 'em', file: r.compiled.file, sandbox: r.sandbox },
    });
    try {
      for (let round = 0; round < 10; round++) {
        const requests = Array.from({ length: 12 }, (_, q) =>
          Array.from({ length: 1 + ((q * 5 + round) % 9) }, (_, i) => ({
            id: `q${q}-${i}`,
            response: `<answer> ${(q + i + round) % 3 ? 'Paris' : 'Lyon'} </answer>`,
            golden: ['Paris'],
          })),
        );
        const answers = await Promise.all(requests.map((items) => post(server.port, { items })));
        answers.forEach((a, q) => {
          assert.equal(a.status, 200);
          assert.deepEqual(
            a.body.results.map((x: { reward: number }) => x.reward),
            requests[q]!.map((_, i) => ((q + i + round) % 3 ? 1 : 0)),
            `round ${round}, request ${q}`,
          );
        });
      }
    } finally {
      await server.close(); // closes the sandbox too
    }
  });
});

describe('CLI reward', function () {
  this.timeout(60_000);
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sas-reward-cli-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));
  const cli = (...args: string[]) =>
    execa(process.execPath, ['-r', join(ROOT, 'test/register.cjs'), join(ROOT, 'src/cli/main.ts'), 'reward', ...args], {
      reject: false,
    });
  const rollouts = () => {
    const f = join(dir, 'rollouts.jsonl');
    const rec = (i: number, answer: string, reward: number) =>
      JSON.stringify({
        v: 1,
        id: `r${i}`,
        step: 1,
        group: Math.floor(i / 2),
        sample: i % 2,
        prompt: 'p',
        response: `<think>t</think>\n<answer> ${answer} </answer>`,
        golden: ['Ilse Marrow'],
        reward,
        data_source: 'demo',
      });
    writeFileSync(
      f,
      [
        rec(0, 'Ilse Marrow', 1),
        rec(1, 'Quendal', 1),
        rec(2, 'ilse marrow', 0),
        rec(3, 'the Ilse Marrow', 1),
        '{broken',
      ].join('\n'),
    );
    return f;
  };

  it('--json prints count, mean, frac_zero_std_groups and items', async () => {
    const r = await cli('builtin:em', rollouts(), '--json');
    assert.equal(r.exitCode, 0, r.stderr);
    const o = JSON.parse(r.stdout);
    assert.equal(o.count, 4);
    assert.equal(o.mean, 0.75);
    assert.equal(o.frac_zero_std_groups, 0.5, 'group 1 (ilse marrow, the Ilse Marrow) both score 1');
    assert.deepEqual(
      o.items.map((i: { id: string; reward: number }) => [i.id, i.reward]),
      [
        ['r0', 1],
        ['r1', 0],
        ['r2', 1],
        ['r3', 1],
      ],
    );
    assert.match(r.stderr, /rollouts\.jsonl:5: invalid JSON/);
  });

  it('--out streams the rollouts with the new rewards, keeping the recorded one', async () => {
    const out = join(dir, 'scored.jsonl');
    const r = await cli('builtin:f1', rollouts(), '--out', out);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /4 rollouts, 4 scored/);
    const lines = readFileSync(out, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      lines.map((l) => [l.reward, l.meta.reward_recorded]),
      [
        [1, 1],
        [0, 1],
        [1, 0],
        [1, 1],
      ],
    );
    assert.deepEqual(lines[0].reward_parts, { em: 1, f1: 1 });
  });

  it('exits 1 when items fail (reporting file, line and rollout), 2 for a module that does not compile', async () => {
    const f = join(dir, 'bad.jsonl');
    writeFileSync(
      f,
      `${JSON.stringify({ v: 1, id: 'r9', prompt: '', response: '<answer>a</answer>', golden: ['a'], meta: { case: 'throw' } })}\n`,
    );
    const r = await cli(MISBEHAVING, f);
    assert.equal(r.exitCode, 1);
    assert.match(r.stderr, /misbehaving\.reward\.ts:\d+: Error: cannot score a — on rollout r9 \(.*bad\.jsonl:1\)/);
    const c = await cli(join(ROOT, 'test', 'fixtures', 'rewards', 'modules', 'syntax-error.reward.ts'), f);
    assert.equal(c.exitCode, 2);
    assert.match(c.stderr, /syntax-error\.reward\.ts:6:\d+: /);
    assert.equal((await cli('builtin:nope', f)).exitCode, 2);
  });
});
