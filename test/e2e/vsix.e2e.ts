/** What the packaged VSIX holds: the runtime, and nothing of the sources, tests, fixtures or benchmarks. */
import assert from 'node:assert/strict';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { ROOT } from './harness';

describe('the VSIX', () => {
  it('ships the runtime and leaves sources, tests and fixtures out', async () => {
    const vsix = readFileSync(join(ROOT, 'out', 'vsix-path.txt'), 'utf8').trim();
    const { stdout } = await execa('unzip', ['-Z1', vsix]);
    const files = stdout.split('\n').map((f) => f.replace(/^extension\//, ''));
    for (const must of [
      'examples/demo/corpus.jsonl',
      'examples/demo-multihop/corpus.jsonl',
      'examples/demo-multihop/train.jsonl',
      'examples/rewards/em.reward.ts',
      'dist/reward-api.mjs',
      'dist/reward-api.d.ts',
      'node_modules/esbuild/lib/main.js',
      'package.json',
      'dist/extension.js',
      'dist/server.js',
      'dist/cli.js',
      'docs/training.md',
      'docs/images/dashboard.png',
      'media/walkthrough/setup.md',
      'syntaxes/search-trajectory.tmLanguage.json',
      'trainer/search_agent_trainer/__main__.py',
      'trainer/search_agent_trainer/train.py',
      'trainer/search_agent_trainer/run_config.schema.json',
      'examples/demo.run.json',
      'examples/demo-multihop.run.json',
      'docs/images/demo-multihop-seeds-learning-curve.png',
      'docs/schema/run-config.schema.json',
      'dist/webview/dashboard.js',
      'dist/webview/dashboard.css',
      'node_modules/search-agent-studio-reward-types/index.js',
      'node_modules/search-agent-studio-reward-types/package.json',
      'dist/bm25-worker.js',
      'dist/audit-worker.js',
      'dist/inspector-worker.js',
      'dist/inspector-facts-worker.js',
      'trainer/search_agent_trainer/engines/trl/engine.py',
      'trainer/requirements-trl.txt',
      'trainer/search_agent_trainer/engines/verl/main.py',
      'trainer/requirements-verl.txt',
      'examples/qwen2.5-3b-grpo-verl.run.json',
      'examples/trl-tiny.run.json',
      'examples/trl-tiny/model/config.json',
      'examples/trl-tiny/model/tokenizer.json',
      'examples/accelerate/zero3-8gpu.yaml',
    ]) {
      assert.ok(files.includes(must), `${must} ships`);
    }
    const allowed = (f: string) =>
      /^examples\/demo(-multihop)?\/[^/]+\.jsonl$/.test(f) ||
      /^examples\/rewards\/[^/]+\.reward\.ts$/.test(f) ||
      /^examples\/(ablations\/)?[^/]+\.run\.json$/.test(f) ||
      /^examples\/trl-tiny\/model\/[^/]+$/.test(f) ||
      /^examples\/accelerate\/[^/]+\.yaml$/.test(f) ||
      f === 'dist/reward-api.d.ts' ||
      f === 'docs/schema/run-config.schema.json' ||
      /^docs\/[^/]+\.md$/.test(f) ||
      /^docs\/images\/[^/]+\.png$/.test(f);
    const leaks = files.filter(
      (f) =>
        !allowed(f) &&
        (/^(src|test|webview|scripts|bench|docs|examples|\.bench|\.vscode-test|out)\//.test(f) ||
          /\.(ts|map)$/.test(f) ||
          /__pycache__|fixtures/.test(f)),
    );
    assert.deepEqual(leaks, []);
    const platforms = new Set(
      files.filter((f) => f.includes('onnxruntime-node/bin/')).map((f) => f.split('/').slice(3, 6).join('/')),
    );
    assert.deepEqual([...platforms], [`napi-v6/${process.platform}/${process.arch}`]);
    // Executables keep their mode through packaging (esbuild compiles reward modules at run time).
    const { stdout: long } = await execa('unzip', ['-Z', vsix]);
    const esbuildBin = long.split('\n').find((l) => /extension\/node_modules\/@esbuild\/[^/]+\/bin\/esbuild$/.test(l));
    assert.match(esbuildBin ?? '', /^-rwx/, esbuildBin);
    const mb = statSync(vsix).size / 1e6;
    assert.ok(mb < 40, `VSIX is ${mb.toFixed(1)} MB`);
  });
});
