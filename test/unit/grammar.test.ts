/**
 * The TextMate grammars, tokenised by the real engine VS Code uses (vscode-textmate + vscode-oniguruma):
 * snapshot files under test/grammar/ (UPDATE_SNAPSHOTS=1 rewrites them), plus assertions on what matters.
 * The JSON Lines host grammar for the injection test is VS Code's own, from the code-server install.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as oniguruma from 'vscode-oniguruma';
import * as vsctm from 'vscode-textmate';

const ROOT = join(__dirname, '..', '..');
const CASES = join(ROOT, 'test', 'grammar');
const JSONL_GRAMMAR = join(
  ROOT,
  '.vscode-test',
  'code-server',
  'node_modules',
  'code-server',
  'lib',
  'vscode',
  'extensions',
  'json',
  'syntaxes',
  'JSONL.tmLanguage.json',
);
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));

let registry: vsctm.Registry;

async function grammarFor(scope: string): Promise<vsctm.IGrammar> {
  const g = await registry.loadGrammar(scope);
  assert.ok(g, `grammar ${scope}`);
  return g;
}

interface Token {
  line: number;
  text: string;
  scopes: string[];
}

function tokenize(grammar: vsctm.IGrammar, text: string): Token[] {
  let stack = vsctm.INITIAL;
  const out: Token[] = [];
  text.split('\n').forEach((line, i) => {
    const r = grammar.tokenizeLine(line, stack);
    for (const t of r.tokens)
      out.push({ line: i + 1, text: line.slice(t.startIndex, t.endIndex), scopes: t.scopes.slice(1) });
    stack = r.ruleStack;
  });
  return out;
}

function snapshot(tokens: Token[]): string {
  return tokens
    .filter((t) => t.text.trim() !== '')
    .map((t) => `${t.line}: ${JSON.stringify(t.text)} ${t.scopes.join(' ') || '-'}`)
    .join('\n')
    .concat('\n');
}

function checkSnapshot(name: string, tokens: Token[]): void {
  const file = join(CASES, `${name}.snap`);
  const actual = snapshot(tokens);
  if (process.env.UPDATE_SNAPSHOTS || !existsSync(file)) {
    writeFileSync(file, actual);
    if (!process.env.UPDATE_SNAPSHOTS) assert.fail(`wrote a new snapshot ${file}; review it and commit it`);
    return;
  }
  assert.equal(actual, readFileSync(file, 'utf8'), `${name}.snap differs (UPDATE_SNAPSHOTS=1 to accept)`);
}

const scopesOf = (tokens: Token[], text: string, nth = 0) => {
  const hits = tokens.filter((t) => t.text.includes(text));
  assert.ok(hits[nth], `token containing ${JSON.stringify(text)}`);
  return hits[nth].scopes.join(' ');
};

describe('TextMate grammars (vscode-textmate)', () => {
  before(async () => {
    const wasm = readFileSync(join(ROOT, 'node_modules', 'vscode-oniguruma', 'release', 'onig.wasm'));
    await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
    const files: Record<string, string> = {};
    for (const g of pkg.contributes.grammars as { scopeName: string; path: string }[])
      files[g.scopeName] = join(ROOT, g.path);
    files['source.json.lines'] = JSONL_GRAMMAR;
    registry = new vsctm.Registry({
      onigLib: Promise.resolve({
        createOnigScanner: (s: string[]) => new oniguruma.OnigScanner(s),
        createOnigString: (s: string) => new oniguruma.OnigString(s),
      }),
      loadGrammar: async (scope) =>
        files[scope] ? vsctm.parseRawGrammar(readFileSync(files[scope]!, 'utf8'), files[scope]) : null,
      getInjections: (scope) =>
        (pkg.contributes.grammars as { scopeName: string; injectTo?: string[] }[])
          .filter((g) => g.injectTo?.includes(scope))
          .map((g) => g.scopeName),
    });
  });

  it('contributes the language, the grammar and the JSON Lines injection', () => {
    const lang = pkg.contributes.languages.find((l: { id: string }) => l.id === 'search-trajectory');
    assert.deepEqual(lang.extensions, ['.traj']);
    const injection = pkg.contributes.grammars.find(
      (g: { scopeName: string }) => g.scopeName === 'text.search-trajectory.injection',
    );
    assert.deepEqual(injection.injectTo, ['source.json.lines']);
  });

  it('colours each tag kind with its own standard scope and dims information blocks', async () => {
    const tokens = tokenize(
      await grammarFor('text.search-trajectory'),
      readFileSync(join(CASES, 'cases.traj'), 'utf8'),
    );
    checkSnapshot('cases.traj', tokens);
    assert.match(scopesOf(tokens, 'Varnholt observatory founder'), /meta\.block\.search.* string\.unquoted\.query/);
    assert.match(scopesOf(tokens, 'search', 0), /keyword\.control\.search/);
    assert.match(scopesOf(tokens, 'I need the founder.'), /markup\.italic\.think/);
    assert.match(scopesOf(tokens, 'think', 0), /entity\.name\.tag\.think/);
    assert.match(scopesOf(tokens, ' Ilse Marrow ', 0), /markup\.bold\.answer/);
    assert.match(
      scopesOf(tokens, 'information', 0),
      /comment\.block\.information.* punctuation\.definition\.comment\.information/,
    );
    // Document text is comment-scoped, including an <answer> inside a document: not an action.
    const inDoc = tokens.filter((t) => t.line === 9 && t.text.includes('answer'));
    assert.ok(inDoc.length > 0);
    for (const t of inDoc) {
      assert.ok(
        t.scopes.some((s) => s.startsWith('comment.block.information')),
        JSON.stringify(t),
      );
      assert.ok(!t.scopes.some((s) => s.startsWith('support.function.answer')), JSON.stringify(t));
    }
    assert.match(scopesOf(tokens, '"Varnholt Observatory"'), /doc-title/);
    assert.match(scopesOf(tokens, '<|im_start|>', 0), /meta\.preprocessor\.template/);
    assert.match(scopesOf(tokens, 'My previous action is invalid'), /invalid\.deprecated\.feedback/);
    const stray = tokens.find((t) => t.text === '</answer>');
    assert.equal(stray?.line, 19);
    assert.match(stray!.scopes.join(' '), /invalid\.illegal\.stray-tag/);
    assert.match(scopesOf(tokens, '### trajectory', 0), /markup\.heading\.separator/);
    assert.match(scopesOf(tokens, 'nested query'), /string\.unquoted\.query/);
  });

  it('colours tool calls (their JSON, the query as a query) and dims tool responses and ipython turns', async () => {
    const tokens = tokenize(
      await grammarFor('text.search-trajectory'),
      readFileSync(join(CASES, 'toolcall.traj'), 'utf8'),
    );
    checkSnapshot('toolcall.traj', tokens);
    const at = (line: number, text: string) => {
      const t = tokens.find((x) => x.line === line && x.text.includes(text));
      assert.ok(t, `line ${line}: ${text}`);
      return t.scopes.join(' ');
    };
    assert.match(at(16, 'tool_call'), /keyword\.control\.search\.tool-call/);
    assert.match(at(17, '"varnholt observatory founder"'), /meta\.block\.tool-call.* string\.unquoted\.query/);
    assert.match(at(17, '"name"'), /support\.type\.property-name\.json/);
    assert.match(at(17, '3'), /constant\.numeric\.json/);
    assert.match(at(17, 'false'), /constant\.language\.json/);
    // The tools preamble's example call is not coloured as a call.
    assert.doesNotMatch(at(9, 'tool_call'), /keyword\.control/);
    assert.match(at(9, 'tool_call'), /meta\.message\.system/);
    // A tool response is document text: its decoy call and answer too.
    assert.match(at(21, 'Varnholt Observatory'), /comment\.block\.information.*doc-title/);
    for (const t of tokens.filter((x) => x.line === 22)) {
      assert.ok(
        t.scopes.some((s) => s.startsWith('comment.block.information')),
        JSON.stringify(t),
      );
      assert.ok(
        !t.scopes.some((s) => s.startsWith('keyword.control') || s.startsWith('support.function.answer')),
        JSON.stringify(t),
      );
    }
    // A malformed body cannot hide the closing tag.
    assert.doesNotMatch(at(27, 'after the malformed call'), /meta\.block\.tool-call/);
    // Llama: the JSON call's query; the ipython turn dimmed, its decoy answer included.
    assert.match(at(33, '"quendal river"'), /meta\.block\.tool-call\.json.* string\.unquoted\.query/);
    assert.match(at(35, 'decoy'), /comment\.block\.information/);
    assert.doesNotMatch(at(35, 'decoy'), /support\.function\.answer/);
    assert.match(at(37, ' the Ossel '), /markup\.bold\.answer/);
  });

  it('colours the tags inside JSON strings of .jsonl rollout files', async function () {
    assert.ok(
      existsSync(JSONL_GRAMMAR),
      `VS Code's JSON Lines grammar (installed with code-server by setup --test): ${JSONL_GRAMMAR}`,
    );
    const tokens = tokenize(await grammarFor('source.json.lines'), readFileSync(join(CASES, 'rollouts.jsonl'), 'utf8'));
    checkSnapshot('rollouts.jsonl', tokens);
    assert.match(scopesOf(tokens, '<search>'), /string\.quoted\.double\.json\.lines .*keyword\.control\.search/);
    assert.match(scopesOf(tokens, '<information>'), /punctuation\.definition\.comment\.information/);
    assert.match(scopesOf(tokens, '<|im_start|>'), /meta\.preprocessor\.template/);
    // The JSON structure is intact after the strings: the reward key and value are still JSON.
    assert.match(scopesOf(tokens, 'reward'), /support\.type\.property-name\.json/);
  });
});
