/**
 * Chat-template drift (DESIGN §7): a record that keeps the chat messages its prompt and response were rendered from
 * (`meta.messages`: `[{role, content, …}]`, as engines that train on conversations record them) is checked the way
 * a pipeline that re-renders the conversation would see it — the messages rendered with the model's
 * `chat_template` (tokenizer_config.json) through `@huggingface/jinja`, Hugging Face's maintained JS implementation
 * of the Jinja subset chat templates use, then encoded as a whole and compared with the recorded ids.
 *
 * A tool-call conversation's prompt also holds the tools it declares (the template renders `tools` into its system
 * turn): a record gives them as `meta.tools` (`[{type: "function", function: {name, description, parameters}}]`, as
 * `apply_chat_template(messages, tools=…)` takes them), else the rendering has no tools block.
 *
 * Kinds: `template` — the rendered text is not the record's prompt + response (the template lays the conversation
 * out otherwise than the rollout did: another separator, a missing generation prompt, a system prompt added); `split`
 * or `text` as in drift.ts otherwise. A recorded prompt the messages cannot render (a tools block or a system turn the
 * record does not keep: miles' trajectories hold the messages without the tools) is not compared — it is not the
 * policy's doing —, the rest of the conversation is (`promptNotComparable`). Rendering past the recorded ids with whitespace only (the newline Qwen's
 * template puts after the last `<|im_end|>`) is not drift: no sampled id changes.
 */
import { Template } from '@huggingface/jinja';
import type { Rollout } from '../run/format';
import type { TokenizerCodec } from '../tokens/tokenizer';
import { type Drift, type DriftOptions, driftAt, findDrift, firstDifference } from './drift';

export interface ChatMessage {
  role: string;
  content?: unknown;
  [k: string]: unknown;
}

type Codec = Pick<TokenizerCodec, 'encode' | 'decode' | 'chatTemplate'>;

/** The chat messages a record carries (`meta.messages`: objects with a string role), if any. */
export function messagesOf(meta: Record<string, unknown> | undefined): ChatMessage[] | undefined {
  const m = meta?.messages;
  return Array.isArray(m) &&
    m.length > 0 &&
    m.every((x) => x && typeof x === 'object' && typeof (x as ChatMessage).role === 'string')
    ? (m as ChatMessage[])
    : undefined;
}

/** The tools a record's prompt declared (`meta.tools`: an array of objects), if any. */
export function toolsOf(meta: Record<string, unknown> | undefined): Record<string, unknown>[] | undefined {
  const t = meta?.tools;
  return Array.isArray(t) && t.length > 0 && t.every((x) => x && typeof x === 'object' && !Array.isArray(x))
    ? (t as Record<string, unknown>[])
    : undefined;
}

/** Renders messages with a chat template as `apply_chat_template(…, tools=…, tokenize=False, add_generation_prompt=False)` does. */
export function renderChat(
  template: string,
  messages: readonly ChatMessage[],
  extra: Record<string, unknown> = {},
): string {
  return new Template(template).render({
    messages,
    add_generation_prompt: false,
    bos_token: '',
    eos_token: '',
    ...extra,
  });
}

/** What the recorded prompt is: its text and how many of the record's ids it is. */
export interface RecordedPrompt {
  text: string;
  tokens: number;
}

/** A template drift check's result: the drift (null: none), and whether the recorded prompt could be compared. */
export interface TemplateDrift {
  drift: Drift | null;
  /**
   * Set when the messages rendered do not give the recorded prompt (the tools or a system turn it was rendered with
   * are not in the record): the prompt is not compared, the rest is — from the first generated token.
   */
  promptNotComparable?: true;
}

/** Whether rendering past the recorded ids adds only whitespace (Qwen's newline after the last `<|im_end|>`). */
function firstRealDifference(
  ids: readonly number[],
  reencoded: readonly number[],
  codec: Pick<TokenizerCodec, 'decode'>,
): number {
  const at = firstDifference(ids, reencoded);
  return at === ids.length && !codec.decode(reencoded.slice(ids.length)).trim() ? -1 : at;
}

/**
 * Whether the messages rendered miss part of the prompt that was fed, rather than lay it out otherwise: the recorded
 * prompt is the rendered one with one more stretch of text in it (a tools block, a system turn), and the record lacks
 * the tools or a system message that would render it. A rendering with more than the recorded prompt (a system
 * prompt the template adds) or another layout is not this: that is template drift.
 */
function lacksWhatPromptHad(
  recorded: string,
  rendered: string,
  messages: readonly ChatMessage[],
  tools: readonly Record<string, unknown>[] | undefined,
): boolean {
  if (recorded.length <= rendered.length) return false;
  if (tools && messages.some((m) => m.role === 'system')) return false;
  let p = 0;
  while (p < rendered.length && recorded[p] === rendered[p]) p++;
  let q = 0;
  while (q < rendered.length - p && recorded[recorded.length - 1 - q] === rendered[rendered.length - 1 - q]) q++;
  return p + q === rendered.length;
}

/**
 * Drift of recorded ids against the messages rendered with `template` and re-encoded; null when they agree. With
 * `prompt` (the recorded prompt), a first difference inside it whose cause is that the messages do not render it —
 * the messages before the first assistant turn, rendered with the generation prompt, miss a stretch of its text (a
 * tools block or a system turn the record does not keep: lacksWhatPromptHad) — is not drift: the conversation is compared from the first generated
 * token instead (the rendering's own prompt set against the recorded one), and `promptNotComparable` says so.
 */
export function findTemplateDrift(
  ids: readonly number[],
  text: string,
  messages: readonly ChatMessage[],
  template: string,
  codec: Pick<TokenizerCodec, 'encode' | 'decode'>,
  options: DriftOptions = {},
  tools?: readonly Record<string, unknown>[],
  prompt?: RecordedPrompt,
): TemplateDrift {
  const extra = tools ? { tools } : {};
  const rendered = renderChat(template, messages, extra);
  const reencoded = codec.encode(rendered);
  const at = firstRealDifference(ids, reencoded, codec);
  if (at < 0) return { drift: null };
  const firstAssistant = messages.findIndex((m) => m.role === 'assistant');
  if (prompt && at < prompt.tokens && firstAssistant > 0) {
    const renderedPrompt = renderChat(template, messages.slice(0, firstAssistant), {
      ...extra,
      add_generation_prompt: true,
    });
    if (lacksWhatPromptHad(prompt.text, renderedPrompt, messages, tools) && rendered.startsWith(renderedPrompt)) {
      // the rendering's prompt (encoded as part of the whole when it is a prefix of it) replaced by the recorded one
      const ownPrompt = codec.encode(renderedPrompt);
      const rest =
        firstDifference(ownPrompt, reencoded) === ownPrompt.length
          ? reencoded.slice(ownPrompt.length)
          : codec.encode(rendered.slice(renderedPrompt.length));
      const aligned = [...ids.slice(0, prompt.tokens), ...rest];
      const d = firstRealDifference(ids, aligned, codec);
      if (d < 0) return { drift: null, promptNotComparable: true };
      const response = text.slice(prompt.text.length);
      const tail = rendered.slice(renderedPrompt.length);
      const kind =
        text.startsWith(prompt.text) && tail.startsWith(response) && !tail.slice(response.length).trim()
          ? codec.decode(ids.slice(prompt.tokens)) === response
            ? 'split'
            : 'text'
          : 'template';
      return { drift: driftAt(ids, aligned, d, kind, options.context ?? 3), promptNotComparable: true };
    }
  }
  const kind =
    rendered.startsWith(text) && !rendered.slice(text.length).trim()
      ? codec.decode(ids) === text
        ? 'split'
        : 'text'
      : 'template';
  return { drift: driftAt(ids, reencoded, at, kind, options.context ?? 3) };
}

/**
 * The drift of a record as `audit` checks it: through the chat template when the record carries messages and the
 * tokenizer has a template, else by re-encoding its text (drift.ts). A template that does not render falls back
 * to the text check, and `templateError` says why; `promptNotComparable`: the messages do not render the recorded
 * prompt, which was not compared (findTemplateDrift).
 */
export function recordDrift(
  r: Rollout,
  codec: Codec,
  options: DriftOptions = {},
): { drift: Drift | null; templateError?: string; promptNotComparable?: true } {
  const tk = r.tokens!;
  const messages = messagesOf(r.meta);
  if (messages && codec.chatTemplate) {
    try {
      let promptTokens = tk.role.findIndex((x) => x !== 'prompt');
      if (promptTokens < 0) promptTokens = tk.ids.length;
      return findTemplateDrift(
        tk.ids,
        r.prompt + r.response,
        messages,
        codec.chatTemplate,
        codec,
        options,
        toolsOf(r.meta),
        { text: r.prompt, tokens: promptTokens },
      );
    } catch (e) {
      return {
        drift: findDrift(tk.ids, r.prompt + r.response, codec, { ...options, role: tk.role }),
        templateError: `chat_template: ${(e as Error).message}`,
      };
    }
  }
  return { drift: findDrift(tk.ids, r.prompt + r.response, codec, { ...options, role: tk.role }) };
}
