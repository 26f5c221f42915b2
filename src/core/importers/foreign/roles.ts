/**
 * Token roles for dumps that keep only a loss mask (prime-rl's token exports, NeMo-RL's train data, SkyRL's batch):
 * who wrote each token — the policy (`generated`), the prompt and the chat template's markers (`prompt`), the search
 * tool (`retrieved`), the environment's other text (`feedback`) — read from the token text with the model's
 * tokenizer and the markers of its chat template, independently of the mask, so the leak audit can set one against
 * the other: a token with loss mask 1 inside a tool response is a leak even though the dump's own mask says 1.
 *
 * The markers come from the chat template itself, rendered through `@huggingface/jinja` with placeholder messages
 * (`templateMarkers`): the assistant turn's header (the generation prompt, `<|im_start|>assistant\n` for ChatML,
 * `<|start_header_id|>assistant<|end_header_id|>\n\n` for Llama 3), the end-of-turn marker (`<|im_end|>`,
 * `<|eot_id|>`), the user turn's header, and a tool turn's header when the template gives tools a turn of their own
 * (`<|im_start|>tool\n`, Llama 3's `ipython`). Inside the text:
 *  - an assistant turn — its header's end up to and including its end-of-turn marker (or the end of the text when
 *    the turn was cut off) — is `generated`, except what the environment wrote inside it: Search-R1's
 *    `<information>…</information>` blocks with the whitespace around them (`retrieved`), `<tool_response>` blocks
 *    (`retrieved`), Search-R1's invalid-action message (`feedback`);
 *  - `<tool_response>…</tool_response>` anywhere else, and a tool turn's content, are `retrieved`;
 *  - the content of a user turn after the first assistant turn is `feedback` (the environment wrote it: an
 *    invalid-turn message); everything else — the prompt, turn headers, end-of-turn markers of non-assistant turns,
 *    the whitespace between turns — is `prompt`.
 * A token takes the role of the character it starts with. Without an assistant header in the text (a base model
 * prompted with Search-R1's plain template, or a template-less tokenizer) the prompt ends where the dump says
 * (its prompt length) or at the first trained token, and everything after it is `generated` but for the blocks
 * above. Without a tokenizer there is no text: roles come from the mask (see {@link rolesFromMask}).
 */
import { Template } from '@huggingface/jinja';
import type { TokenRole } from '../../run/format';
import { INVALID_ACTION_MESSAGE } from '../../tags/parser';

/** The markers of a chat template that tell turns apart (all literal text, as the template renders it). */
export interface ChatMarkers {
  /** The assistant turn's header: what `add_generation_prompt` adds. */
  assistant: string;
  /** The end-of-turn marker that closes an assistant turn (the model samples it). */
  endOfTurn: string;
  /** The user turn's header. */
  user?: string;
  /** A tool turn's header, when tool messages get a turn of their own (not the user's). */
  tool?: string;
}

const U = '\u0007USER\u0007';
const A = '\u0007ASSISTANT\u0007';
const T = '\u0007TOOL\u0007';

function render(template: string, messages: { role: string; content: string }[], addGenerationPrompt: boolean): string {
  return new Template(template).render({
    messages,
    add_generation_prompt: addGenerationPrompt,
    bos_token: '',
    eos_token: '',
    tools: undefined,
  });
}

/**
 * The turn markers of a chat template, or undefined when it cannot be rendered or does not set the assistant's
 * turn apart (then only the content-level blocks are found).
 */
export function templateMarkers(template: string): ChatMarkers | undefined {
  let withPrompt: string, without: string, pair: string;
  try {
    without = render(template, [{ role: 'user', content: U }], false);
    withPrompt = render(template, [{ role: 'user', content: U }], true);
    pair = render(
      template,
      [
        { role: 'user', content: U },
        { role: 'assistant', content: A },
      ],
      false,
    );
  } catch {
    return undefined;
  }
  // The generation prompt, without the <think> scaffolding some templates add to it (Qwen3 with thinking off).
  let assistant = withPrompt.startsWith(without) ? withPrompt.slice(without.length) : '';
  const think = assistant.indexOf('<think>');
  if (think > 0) assistant = assistant.slice(0, think);
  if (!assistant.trim()) return undefined;
  const a = pair.indexOf(A);
  if (a < 0) return undefined;
  const endOfTurn = /^\S+/.exec(pair.slice(a + A.length))?.[0] ?? '';
  if (!endOfTurn) return undefined;
  const u = without.indexOf(U);
  let user: string | undefined;
  if (u >= 0) {
    const before = without.slice(0, u);
    const cut = before.lastIndexOf(endOfTurn);
    user = (cut >= 0 ? before.slice(cut + endOfTurn.length) : before).replace(/^\s+/, '');
  }
  let tool: string | undefined;
  try {
    const withTool = render(
      template,
      [
        { role: 'user', content: U },
        { role: 'assistant', content: A },
        { role: 'tool', content: T },
      ],
      true,
    );
    const t = withTool.indexOf(T);
    const afterA = withTool.indexOf(endOfTurn, withTool.indexOf(A));
    if (t >= 0 && afterA >= 0) {
      const header = withTool.slice(afterA + endOfTurn.length, t).replace(/^\s+/, '');
      // A turn of its own: a header that is not the user's (Qwen renders tool results in a user turn instead).
      if (header && user !== undefined && !header.startsWith(user)) tool = header.replace(/<tool_response>\s*$/, '');
    }
  } catch {
    /* templates that refuse the tool role: tool results are found by their <tool_response> tags */
  }
  return { assistant, endOfTurn, ...(user ? { user } : {}), ...(tool ? { tool } : {}) };
}

interface Span {
  start: number;
  end: number;
  role: TokenRole;
}

/** Blocks the environment writes inside any turn: Search-R1's observations and feedback, tool responses. */
function environmentBlocks(text: string, from: number, to: number, out: Span[]): void {
  const block = (open: string, close: string, whole: boolean) => {
    let at = text.indexOf(open, from);
    while (at >= 0 && at < to) {
      const closeAt = text.indexOf(close, at + open.length);
      const inner = closeAt < 0 || closeAt >= to ? to : closeAt;
      let end = inner === to ? to : inner + close.length;
      let start = at;
      if (whole) {
        // Search-R1's observation is `\n\n<information>…</information>\n\n`, all of it the environment's.
        while (start > from && /\s/.test(text[start - 1]!)) start--;
        while (end < to && /\s/.test(text[end]!)) end++;
        out.push({ start, end, role: 'retrieved' });
      } else {
        // A tool response as our tool-call rollouts record it: the tags are template text, what they hold is retrieved.
        out.push({ start, end, role: 'prompt' }, { start: at + open.length, end: inner, role: 'retrieved' });
      }
      at = text.indexOf(open, end);
    }
  };
  block('<information>', '</information>', true);
  block('<tool_response>', '</tool_response>', false);
  let f = text.indexOf(INVALID_ACTION_MESSAGE, from);
  while (f >= 0 && f < to) {
    let start = f;
    let end = Math.min(to, f + INVALID_ACTION_MESSAGE.length);
    while (start > from && /\s/.test(text[start - 1]!)) start--;
    while (end < to && /\s/.test(text[end]!)) end++;
    out.push({ start, end, role: 'feedback' });
    f = text.indexOf(INVALID_ACTION_MESSAGE, end);
  }
}

export interface InferredRoles {
  roles: TokenRole[];
  /** How they were found: `chat template` (turn markers found in the text) or `text blocks` (no turn markers: the prompt boundary from the dump). */
  how: 'chat template' | 'text blocks';
}

/**
 * Roles of tokens whose texts (each token decoded on its own) are `pieces`. `promptEnd`: where the prompt ends when
 * the text has no assistant header (the dump's prompt length, else the first trained token).
 */
export function inferRoles(
  pieces: readonly string[],
  markers: ChatMarkers | undefined,
  promptEnd: number,
): InferredRoles {
  const starts: number[] = [];
  let text = '';
  for (const p of pieces) {
    starts.push(text.length);
    text += p;
  }
  const spans: Span[] = [];
  const firstHeader = markers ? text.indexOf(markers.assistant) : -1;
  let how: InferredRoles['how'];
  let base: TokenRole[];
  if (markers && firstHeader >= 0) {
    how = 'chat template';
    // Assistant turns: from each header's end through its end-of-turn marker.
    const assistant: Span[] = [];
    let at = firstHeader;
    while (at >= 0) {
      const start = at + markers.assistant.length;
      const eot = text.indexOf(markers.endOfTurn, start);
      const end = eot < 0 ? text.length : eot + markers.endOfTurn.length;
      assistant.push({ start, end, role: 'generated' });
      at = text.indexOf(markers.assistant, end);
    }
    const promptEndChar = assistant[0]!.start;
    // Non-assistant turn contents after the first assistant turn: tool turns retrieved, user turns feedback.
    const others: Span[] = [];
    const header = (h: string | undefined, role: TokenRole) => {
      if (!h) return;
      let i = text.indexOf(h, promptEndChar);
      while (i >= 0) {
        const start = i + h.length;
        const eot = text.indexOf(markers.endOfTurn, start);
        const end = eot < 0 ? text.length : eot;
        // A user turn that holds tool responses (Qwen's layout) is the template's, not the environment's feedback.
        const own =
          role === 'feedback' && text.slice(start, end).trimStart().startsWith('<tool_response>') ? 'prompt' : role;
        if (!assistant.some((s) => start > s.start && start < s.end)) others.push({ start, end, role: own });
        i = text.indexOf(h, Math.max(end, start));
      }
    };
    header(markers.user, 'feedback');
    header(markers.tool, 'retrieved');
    spans.push(...assistant, ...others);
    for (const s of [...assistant, ...others]) environmentBlocks(text, s.start, s.end, spans);
    // tool responses written outside any turn we know
    environmentBlocks(text, promptEndChar, text.length, spans);
    base = pieces.map(() => 'prompt');
  } else {
    how = 'text blocks';
    const end = Math.max(0, Math.min(promptEnd, pieces.length));
    const from = end < pieces.length ? starts[end]! : text.length;
    environmentBlocks(text, from, text.length, spans);
    base = pieces.map((_, i) => (i < end ? 'prompt' : 'generated'));
  }
  // Later spans win over earlier ones: turns first, then the blocks inside them.
  const roles = base.slice();
  for (let i = 0; i < pieces.length; i++) {
    const c = starts[i]!;
    for (let k = spans.length - 1; k >= 0; k--) {
      const s = spans[k]!;
      if (c >= s.start && c < s.end) {
        roles[i] = s.role;
        break;
      }
    }
  }
  return { roles, how };
}

/**
 * Roles when there is no text to read them from (no tokenizer): the prompt up to `promptEnd`, then `generated` where
 * the loss mask is 1 and `retrieved` where it is 0 — the dump's own mask restated, so the leak audit can find nothing
 * in it (a record says so: `meta.roles`).
 */
export function rolesFromMask(mask: readonly number[], promptEnd: number): TokenRole[] {
  return mask.map((m, i) => (i < promptEnd ? 'prompt' : m ? 'generated' : 'retrieved'));
}
