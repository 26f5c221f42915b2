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
 * or `text` as in drift.ts otherwise. Rendering past the recorded ids with whitespace only (the newline Qwen's
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

/** Drift of recorded ids against the messages rendered with `template` and re-encoded; null when they agree. */
export function findTemplateDrift(
  ids: readonly number[],
  text: string,
  messages: readonly ChatMessage[],
  template: string,
  codec: Pick<TokenizerCodec, 'encode' | 'decode'>,
  options: DriftOptions = {},
  tools?: readonly Record<string, unknown>[],
): Drift | null {
  const rendered = renderChat(template, messages, tools ? { tools } : {});
  const reencoded = codec.encode(rendered);
  let at = firstDifference(ids, reencoded);
  if (at === ids.length && !codec.decode(reencoded.slice(ids.length)).trim()) at = -1;
  if (at < 0) return null;
  const kind =
    rendered.startsWith(text) && !rendered.slice(text.length).trim()
      ? codec.decode(ids) === text
        ? 'split'
        : 'text'
      : 'template';
  return driftAt(ids, reencoded, at, kind, options.context ?? 3);
}

/**
 * The drift of a record as `audit` checks it: through the chat template when the record carries messages and the
 * tokenizer has a template, else by re-encoding its text (drift.ts). A template that does not render falls back
 * to the text check, and `templateError` says why.
 */
export function recordDrift(
  r: Rollout,
  codec: Codec,
  options: DriftOptions = {},
): { drift: Drift | null; templateError?: string } {
  const tk = r.tokens!;
  const messages = messagesOf(r.meta);
  if (messages && codec.chatTemplate) {
    try {
      return {
        drift: findTemplateDrift(
          tk.ids,
          r.prompt + r.response,
          messages,
          codec.chatTemplate,
          codec,
          options,
          toolsOf(r.meta),
        ),
      };
    } catch (e) {
      return {
        drift: findDrift(tk.ids, r.prompt + r.response, codec, { ...options, role: tk.role }),
        templateError: `chat_template: ${(e as Error).message}`,
      };
    }
  }
  return { drift: findDrift(tk.ids, r.prompt + r.response, codec, { ...options, role: tk.role }) };
}
