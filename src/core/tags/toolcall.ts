/**
 * The tool-call dialects' semantics (DESIGN §4.1, second dialect): reading a call's JSON (what the engines do:
 * vLLM's and veRL's Hermes parsers, TRL's `parse_response`: `json.loads` of the `<tool_call>` body, then `name` and
 * `arguments`), telling the environment's error replies from results, the text of a tool response (veRL's search
 * tool wraps it as `{"result": "…"}`), the tools a prompt declares, and rendering chat messages with tool calls the
 * way the Qwen2.5 template does (for sources that store messages rather than text).
 */
import { jsonValueEnd } from './markers';
import type { DiagnosticCode, Dialect, Segment, TagDiagnostic, ToolCall } from './segments';

export interface ToolCallOptions {
  /** The search tool's name. */
  searchTool: string;
  /** Other tools the prompt declares. */
  tools: readonly string[];
  dialect: Dialect;
  /** Observations' kinds come from who wrote them (spans): an error reply is feedback already, never re-read. */
  kindsKnown?: boolean;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** JSON strings (no raw control characters, only JSON's escapes): what JSON.parse accepts. */
const JSON_STRING = '((?:[^"\\\\\\u0000-\\u001f]|\\\\(?:["\\\\/bfnrt]|u[0-9a-fA-F]{4}))*)';
/** A call exactly as the chat templates render one: valid JSON of this one shape, read by a regular expression. */
const CANONICAL_CALL = new RegExp(
  `^\\s*\\{"name": "${JSON_STRING}", "arguments": \\{"query": "${JSON_STRING}"\\}\\}\\s*$`,
);

/**
 * Reads a call's body. Valid: a JSON object with a string `name` and an object `arguments` (Llama: `parameters`);
 * a call of the search tool also needs a string `query` (or veRL's search tool's `query_list` of strings, joined
 * with `; `). A call of another declared tool is a valid action that is not a search.
 */
export function readToolCall(
  body: string,
  o: Pick<ToolCallOptions, 'searchTool' | 'tools'>,
): { call: ToolCall; problem?: { code: DiagnosticCode; severity: 'error' | 'warning' } } {
  const invalid = (code: DiagnosticCode, error: string, name?: string) => ({
    call: name === undefined ? { error } : { name, error },
    problem: { code, severity: 'error' as const },
  });
  const canonical = CANONICAL_CALL.exec(body);
  if (canonical && !canonical[1]!.includes('\\')) {
    // The layout the templates write (`{"name": "…", "arguments": {"query": "…"}}`): read without JSON.parse.
    const name = canonical[1]!;
    const q = canonical[2]!.includes('\\') ? (JSON.parse(`"${canonical[2]}"`) as string) : canonical[2]!;
    if (name === o.searchTool)
      return q.trim()
        ? { call: { name, query: q.trim() } }
        : { call: { name, query: '' }, problem: { code: 'empty-search', severity: 'warning' } };
  }
  // Unbalanced brackets (a call cut short, a brace missed): said without the cost of a JSON.parse exception.
  const first = body.search(/\S/);
  if (body.charCodeAt(first) === 123) {
    const { end, closed } = jsonValueEnd(body, first);
    if (!closed) return invalid('invalid-tool-call', 'the tool call is not valid JSON (a closing } or ] is missing)');
    if (/\S/.test(body.slice(end)))
      return invalid('invalid-tool-call', 'the tool call is not valid JSON (text after the object)');
  }
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch (e) {
    return invalid('invalid-tool-call', `the tool call is not valid JSON (${(e as Error).message})`);
  }
  if (!isObject(value) || typeof value.name !== 'string')
    return invalid(
      'invalid-tool-call',
      'the tool call must be a JSON object with a string "name" and an "arguments" object',
    );
  const name = value.name;
  const args = 'arguments' in value ? value.arguments : value.parameters;
  if (!isObject(args))
    return invalid(
      'invalid-tool-call',
      `the call of "${name}" needs an "arguments" object, got ${args === undefined ? 'none' : Array.isArray(args) ? 'an array' : typeof args}`,
      name,
    );
  if (name !== o.searchTool) {
    if (o.tools.includes(name)) return { call: { name } };
    return invalid(
      'unknown-tool',
      `unknown tool "${name}": the search tool is "${o.searchTool}"${o.tools.length ? ` (the prompt also declares ${o.tools.map((t) => `"${t}"`).join(', ')})` : ''}`,
      name,
    );
  }
  const q = args.query;
  if (typeof q === 'string') {
    return q.trim()
      ? { call: { name, query: q.trim() } }
      : { call: { name, query: '' }, problem: { code: 'empty-search', severity: 'warning' } };
  }
  const list = args.query_list;
  if (q === undefined && Array.isArray(list) && list.length > 0 && list.every((x) => typeof x === 'string'))
    return { call: { name, query: list.map((x) => x.trim()).join('; ') } };
  return invalid(
    'missing-query',
    q === undefined
      ? `the call of "${name}" has no "query" argument`
      : `"query" must be a string, got ${q === null ? 'null' : Array.isArray(q) ? 'an array' : typeof q}`,
    name,
  );
}

/** An environment's error reply: veRL's `Error when executing tool: …`, TRL's `{'error': …}`, an invalid-action message. */
const ERROR_REPLY = /^\s*(?:error\b|\{\s*["']error["']\s*:)|^My previous action is invalid\b/i;

export function isErrorReply(content: string): boolean {
  return ERROR_REPLY.test(content) || (startsJson(content) && ERROR_REPLY.test(toolResponseText(content)));
}

/** Whether the first non-blank character opens a JSON object or string (checked without copying the text). */
function startsJson(content: string): boolean {
  const c = content.charCodeAt(content.search(/\S/));
  return c === 123 || c === 34;
}

/** The text of a tool response: veRL's search tool returns `{"result": "…"}`, some tools a JSON string; else as is. */
export function toolResponseText(content: string): string {
  if (startsJson(content)) {
    const t = content.trim();
    try {
      const v: unknown = JSON.parse(t);
      if (typeof v === 'string') return v;
      if (isObject(v) && typeof v.result === 'string') return v.result;
    } catch {
      /* not JSON: the text itself */
    }
  }
  return content;
}

/**
 * After the scan: reads each complete call (setting `call` and a diagnostic when it is invalid) and turns a tool
 * response into `feedback` when it answers an invalid call or is an error reply. Responses answer the calls of
 * their turn in order (the templates render one `<tool_response>` per call, in the calls' order).
 */
export function annotateToolCalls(
  text: string,
  segments: Segment[],
  diagnostics: TagDiagnostic[],
  o: ToolCallOptions,
): void {
  let pending: Segment[] = [];
  let pendingTurn = -1;
  for (const s of segments) {
    if (s.turn !== pendingTurn) {
      pending = [];
      pendingTurn = s.turn;
    }
    if (s.kind === 'search') {
      if (!s.opened || !s.closed) continue;
      const r = readToolCall(text.slice(s.contentStart, s.contentEnd), o);
      s.call = r.call;
      if (r.problem) {
        const message = r.call.error ?? 'empty search query';
        diagnostics.push({
          code: r.problem.code,
          severity: r.problem.severity,
          message,
          start: s.contentStart,
          end: Math.max(s.contentEnd, s.contentStart + 1),
        });
      }
      pending.push(s);
    } else if (s.kind === 'information') {
      const answered = pending.shift();
      if (
        !o.kindsKnown &&
        (answered?.call?.error !== undefined || isErrorReply(text.slice(s.contentStart, s.contentEnd)))
      )
        s.kind = 'feedback';
    } else if (s.kind === 'feedback' && o.kindsKnown) {
      pending.shift();
    }
  }
}

let lastDeclaration = { block: '', names: [] as string[] };

/**
 * Tool names declared in a prompt's `<tools>…</tools>` (one JSON object per line: `{"type": "function",
 * "function": {"name": …}}`). The last block read is remembered (a run's prompts share it).
 */
export function declaredTools(prompt: string): string[] {
  const open = prompt.indexOf('<tools>');
  if (open < 0) return [];
  const close = prompt.indexOf('</tools>', open);
  const block = prompt.slice(open + 7, close < 0 ? undefined : close);
  if (block === lastDeclaration.block) return lastDeclaration.names;
  const names: string[] = [];
  lastDeclaration = { block, names };
  for (const line of block.split('\n')) {
    const t = line.trim();
    if (!t.startsWith('{')) continue;
    try {
      const v: unknown = JSON.parse(t);
      const fn = isObject(v) && isObject(v.function) ? v.function : v;
      if (isObject(fn) && typeof fn.name === 'string') names.push(fn.name);
    } catch {
      /* not a declaration */
    }
  }
  return names;
}

/** Whether a prompt ends inside an open `<think>` (a generation prompt that opens it for the model). */
export function promptOpensThink(prompt: string): boolean {
  return /<think>\s*$/.test(prompt);
}

export interface ChatMessage {
  role: string;
  content?: unknown;
  tool_calls?: unknown;
}

/** Whether chat messages carry tool calls or tool results (and so need a template to become text). */
export function hasToolMessages(messages: readonly unknown[]): boolean {
  return messages.some(
    (m) => isObject(m) && (m.role === 'tool' || (Array.isArray(m.tool_calls) && m.tool_calls.length > 0)),
  );
}

const contentText = (c: unknown): string =>
  typeof c === 'string'
    ? c
    : Array.isArray(c)
      ? c.map((p) => (isObject(p) && typeof p.text === 'string' ? p.text : '')).join('')
      : c === null || c === undefined
        ? ''
        : String(c);

/**
 * Chat messages as text, laid out as the Qwen2.5 template lays them out: an assistant message's content, then each
 * call as `\n<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`, closed by `<|im_end|>\n`; consecutive tool
 * messages in one user turn, each as `\n<tool_response>\n…\n</tool_response>`; other messages as
 * `<|im_start|>{role}\n{content}<|im_end|>\n`. A completion starts in the assistant's message, so the first one
 * gets no marker (the prompt ended with it); the text ends at the last `<|im_end|>`.
 */
export function renderToolMessages(messages: readonly unknown[]): string {
  let out = '';
  messages.forEach((raw, k) => {
    const m: ChatMessage =
      isObject(raw) && typeof raw.role === 'string' ? (raw as unknown as ChatMessage) : { role: 'user', content: raw };
    const content = contentText(m.content);
    if (m.role === 'assistant') {
      out += k === 0 ? content : `<|im_start|>assistant${content ? `\n${content}` : ''}`;
      const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
      for (const c of calls) {
        const fn = isObject(c) && isObject(c.function) ? c.function : isObject(c) ? c : {};
        const args = typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {});
        out += `${k === 0 && !out ? '' : '\n'}<tool_call>\n{"name": ${JSON.stringify(String(fn.name ?? ''))}, "arguments": ${args}}\n</tool_call>`;
      }
      out += '<|im_end|>\n';
    } else if (m.role === 'tool') {
      const prev = messages[k - 1];
      const next = messages[k + 1];
      if (!(isObject(prev) && prev.role === 'tool')) out += '<|im_start|>user';
      out += `\n<tool_response>\n${content}\n</tool_response>`;
      if (!(isObject(next) && next.role === 'tool')) out += '<|im_end|>\n';
    } else {
      out += `<|im_start|>${m.role}\n${content}<|im_end|>\n`;
    }
  });
  return out.endsWith('\n') ? out.slice(0, -1) : out;
}
