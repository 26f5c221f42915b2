/**
 * The replay's audit (src/core/audit/microscope.ts) on records built with a real byte-level BPE tokenizer: Δ and
 * ratio overlays on trained tokens only, the first drift decoded on both sides, the importance preview, and the
 * engine's mask against ours as leaks.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addMicroscope, auditRollout, recordDrift, renderChat } from '../../src/core/audit';
import { replayModel } from '../../src/core/inspect/replay';
import { loadTokenizerCodec, type TokenizerCodec } from '../../src/core/tokens/tokenizer';
import { recordOf, writeTokenizerDir } from './bpe';

describe('audit: the replay microscope', () => {
  let dir: string;
  let codec: TokenizerCodec;
  const PROMPT = '<|im_start|>user\nThe capital of France?<|im_end|>\n<|im_start|>assistant\n';
  const at = { index: 0, file: 'f.jsonl', line: 1 };
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-microscope-'));
    codec = await loadTokenizerCodec(
      writeTokenizerDir(join(dir, 'model'), [' Paris', 'is', '<answer>', '</answer>', 'user', 'assistant']),
    );
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('Δ and ratio on trained tokens only, flags, the importance preview; a split word as drift, both sides decoded', () => {
    const r = recordOf(codec, PROMPT, [
      { text: '<answer>', role: 'generated' },
      { text: ' Par', role: 'generated' },
      { text: 'is', role: 'generated' },
      { text: ' </answer>', role: 'generated' },
    ]);
    const tk = r.tokens!;
    const first = tk.role.indexOf('generated');
    tk.rollout_logprob = tk.role.map((x) => (x === 'generated' ? -1 : null));
    // the first generated token: trainer −3 vs rollout −1 (ρ = e^−2); the prompt's values are garbage (masked)
    tk.logprob = tk.role.map((x, i) => (x === 'generated' ? (i === first ? -3 : -1) : -60));
    const m = addMicroscope(replayModel(r, at), r, { codec });
    const delta = m.tokens.overlays.delta!;
    assert.equal(delta.length, tk.ids.length);
    assert.ok(
      delta.every((d, i) => (tk.loss_mask[i] === 1) === (d !== null)),
      'Δ exactly on trained tokens',
    );
    assert.equal(delta[first], -2);
    assert.ok(Math.abs(m.tokens.overlays.ratio![first]! - Math.exp(-2)) < 1e-12);
    const ms = m.microscope!;
    assert.deepEqual(ms.flagged, [first]);
    assert.deepEqual([ms.importance!.clipped, ms.importance!.dropped], [[], [first]]);
    const d = ms.drift!;
    assert.equal(d.kind, 'split');
    assert.equal(d.token, codec.encode(PROMPT + '<answer>').length);
    assert.deepEqual(
      d.recorded.slice(d.token - d.from, d.token - d.from + 2).map((p) => p.text),
      [' Par', 'is'],
    );
    assert.equal(d.reencoded[d.token - d.from]!.text, ' Paris');
    assert.match(ms.driftNote, /drift checked with model\/tokenizer.json/);
    assert.deepEqual(ms.maskMismatch, []);
  });

  it("without a tokenizer drift is not checked and says why; the engine's mask against ours adds leaks", () => {
    const r = recordOf(codec, PROMPT, [{ text: '<answer> Paris </answer>', role: 'generated' }]);
    const engine = r.tokens!.loss_mask.map((x) => x);
    engine[1] = 1; // the engine trained on a prompt token our roles mask out
    r.meta = { engine_loss_mask: engine };
    const m = addMicroscope(replayModel(r, at), r, { noCodec: 'drift not checked: no tokenizer here' });
    assert.equal(m.microscope!.drift, null);
    assert.equal(m.microscope!.driftNote, 'drift not checked: no tokenizer here');
    assert.deepEqual(m.microscope!.maskMismatch, [1]);
    assert.deepEqual(m.audit!.leaks, [1], '"next leak" visits the disagreement');
    assert.equal(m.microscope!.importance, null, 'no log-probs recorded: no preview');
    assert.equal(m.tokens.overlays.delta, undefined);
  });
});

/** A ChatML template as Qwen2.5's lays out plain messages (system, user, assistant turns; no tools). */
const CHATML =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

describe("audit: chat-template drift (@huggingface/jinja renders the model's chat_template)", () => {
  let dir: string;
  let codec: TokenizerCodec;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sas-template-'));
    codec = await loadTokenizerCodec(
      writeTokenizerDir(join(dir, 'model'), [' Paris', 'is', '<answer>', '</answer>', 'user', 'assistant', 'system'], {
        chatTemplate: CHATML,
      }),
    );
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const messages = [
    { role: 'user', content: 'The capital of France?' },
    { role: 'assistant', content: '<answer> Paris </answer>' },
  ];
  const PROMPT = '<|im_start|>user\nThe capital of France?<|im_end|>\n<|im_start|>assistant\n';
  const asRecorded = (pieces: { text: string; role: 'generated' | 'prompt' }[], meta: Record<string, unknown>) =>
    recordOf(codec, PROMPT, pieces, { meta });

  it('renders ChatML as the model would; a record laid out as its template does has no drift (the trailing newline is not drift)', () => {
    assert.equal(renderChat(codec.chatTemplate!, messages), `${PROMPT}<answer> Paris </answer><|im_end|>\n`);
    const r = asRecorded([{ text: '<answer> Paris </answer><|im_end|>', role: 'generated' }], { messages });
    assert.equal(auditRollout(r, { tokenizer: codec }).drift, null);
  });

  it('a rollout laid out otherwise than the template (no newline after <|im_end|> between turns): drift of kind "template"', () => {
    const r = recordOf(
      codec,
      PROMPT.replace('<|im_end|>\n', '<|im_end|>'),
      [{ text: '<answer> Paris </answer><|im_end|>', role: 'generated' }],
      { meta: { messages } },
    );
    const d = auditRollout(r, { tokenizer: codec }).drift!;
    assert.equal(d.kind, 'template');
    assert.equal(d.token, codec.encode('<|im_start|>user\nThe capital of France?<|im_end|>').length);
    assert.equal(codec.decode([d.reencoded[d.token - d.from]!]), '\n');
  });

  it('the same text sampled as a non-canonical split: kind "split", found through the template too', () => {
    const r = asRecorded(
      [
        { text: '<answer>', role: 'generated' },
        { text: ' Par', role: 'generated' },
        { text: 'is', role: 'generated' },
        { text: ' </answer><|im_end|>', role: 'generated' },
      ],
      { messages },
    );
    const d = auditRollout(r, { tokenizer: codec }).drift!;
    assert.equal(d.kind, 'split');
    assert.equal(d.token, codec.encode(PROMPT + '<answer>').length);
  });

  it('a tool-call conversation: the tools its prompt declared (meta.tools) are rendered too; without them the prompt is not compared, the rest is', async () => {
    // Qwen2.5's layout, shortened: the tools in a system turn, a call in the assistant turn, the response in a user turn.
    const TOOLS_TEMPLATE =
      "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}" +
      "{%- for message in messages %}{%- if message.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}" +
      "{%- elif message.tool_calls %}{{- '<|im_start|>assistant\\n' + message.content }}{%- for tc in message.tool_calls %}{{- '<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": ' + (tc.function.arguments | tojson) + '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}" +
      "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}" +
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
    const tools = [
      {
        type: 'function',
        function: {
          name: 'search',
          description: 'Searches the documents.',
          parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
        },
      },
    ];
    const conversation = [
      { role: 'user', content: 'The capital of France?' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [{ type: 'function', function: { name: 'search', arguments: { query: 'France capital' } } }],
      },
      { role: 'tool', content: 'Paris is the capital.' },
      { role: 'assistant', content: '<answer> Paris </answer>' },
    ];
    const full = renderChat(TOOLS_TEMPLATE, conversation, { tools });
    const prompt = renderChat(TOOLS_TEMPLATE, conversation.slice(0, 1), { tools, add_generation_prompt: true });
    const call = '<tool_call>\n{"name": "search", "arguments": {"query": "France capital"}}\n</tool_call><|im_end|>';
    const pieces = [
      { text: call, role: 'generated' as const },
      { text: '\n<|im_start|>user\n<tool_response>\n', role: 'prompt' as const },
      { text: 'Paris is the capital.', role: 'retrieved' as const },
      { text: '\n</tool_response><|im_end|>\n<|im_start|>assistant\n', role: 'prompt' as const },
      { text: '<answer> Paris </answer><|im_end|>', role: 'generated' as const },
    ];
    assert.equal(
      `${prompt}${pieces.map((p) => p.text).join('')}\n`,
      full,
      'the record is laid out as the template lays it out',
    );
    const tokenizer = await loadTokenizerCodec(
      writeTokenizerDir(join(dir, 'tools-model'), ['search', 'query', 'France', ' capital', ' Paris'], {
        chatTemplate: TOOLS_TEMPLATE,
      }),
    );
    const r = recordOf(tokenizer, prompt, pieces, { meta: { messages: conversation, tools } });
    assert.equal(auditRollout(r, { tokenizer }).drift, null);
    assert.equal(auditRollout(r, { tokenizer }).drift_prompt, undefined);
    // Without them (miles' trajectory keeps the messages, not the tools) the messages do not render the prompt that
    // was fed: its tools block is not the policy's doing, so the prompt is not compared (no drift at token 1), the
    // rest of the conversation is.
    const without = recordOf(tokenizer, prompt, pieces, { meta: { messages: conversation } });
    const a = auditRollout(without, { tokenizer });
    assert.equal(a.drift, null);
    assert.equal(a.drift_prompt, 'not comparable');
    // … so a turn laid out otherwise than the template (no newline before the tool turn) is still found, where it is
    const otherwise = pieces.map((p, k) => (k === 1 ? { ...p, text: '<|im_start|>user\n<tool_response>\n' } : p));
    const b = auditRollout(recordOf(tokenizer, prompt, otherwise, { meta: { messages: conversation } }), {
      tokenizer,
    });
    assert.equal(b.drift_prompt, 'not comparable');
    assert.equal(b.drift!.kind, 'template');
    assert.equal(b.drift!.token, tokenizer.encode(prompt + call).length);
    assert.deepEqual(
      b.drift!.recorded.slice(0, 3),
      tokenizer.encode(prompt + call).slice(b.drift!.from, b.drift!.from + 3),
    );
  });

  it('a system prompt the template adds (the rollout had none) is still drift of kind "template"', async () => {
    const tokenizer = await loadTokenizerCodec(
      writeTokenizerDir(join(dir, 'system-model'), [' Paris', 'is', '<answer>', '</answer>', 'user', 'assistant'], {
        chatTemplate: `{%- if messages[0].role != 'system' %}{{- '<|im_start|>system\\nBe brief.<|im_end|>\\n' }}{%- endif %}${CHATML}`,
      }),
    );
    const r = recordOf(tokenizer, PROMPT, [{ text: '<answer> Paris </answer><|im_end|>', role: 'generated' }], {
      meta: { messages },
    });
    const a = auditRollout(r, { tokenizer });
    assert.equal(a.drift?.kind, 'template');
    assert.equal(a.drift?.token, 1);
    assert.equal(a.drift_prompt, undefined);
  });

  it('a template that does not render falls back to the text check and says why', () => {
    const r = asRecorded([{ text: '<answer> Paris </answer><|im_end|>', role: 'generated' }], { messages });
    const out = recordDrift(r, { ...codec, chatTemplate: '{% for m in messages %}{{ m.role ' });
    assert.match(out.templateError!, /^chat_template: /);
    assert.equal(out.drift, null);
  });
});
