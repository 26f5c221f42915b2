/**
 * The rollout inspector's filter language: a small, typed expression over a row's facts, e.g.
 *
 *     reward == 0 && answer ~ golden        (a right answer the reward missed)
 *     searches > 3 || finish == "length"
 *     group.zero_variance && step >= 10
 *     mask.leaks > 0
 *     drift || logprob.flagged > 0
 *     alarm == "answer-enumeration"
 *     !tokens && data_source == "nq"
 *     answer ~ /^\d+$/
 *
 * Grammar (lowest precedence first):
 *
 *     expr    := and ( ("||" | "or") and )*
 *     and     := unary ( ("&&" | "and") unary )*
 *     unary   := ("!" | "not") unary | compare
 *     compare := operand ( ("==" | "!=" | "<" | "<=" | ">" | ">=" | "~" | "!~") operand )?
 *     operand := number | "string" | 'string' | /regex/flags | true | false | null | field | "(" expr ")"
 *     field   := name ( "." name )*
 *
 * `list == "x"` (and `!=`): the list holds exactly "x", e.g. `alarm == "answer-enumeration"`.
 * `a ~ b` ("matches"): a regex literal is tested against `a` as is; otherwise `b` (a string, or any element of a
 * list such as `golden`) is contained in `a` after Search-R1's answer normalisation (lower case, no punctuation or
 * articles, single spaces) — so `answer ~ golden` is Search-R1's sub-EM. A field used on its own is a condition
 * (`group.zero_variance`, `tokens`). A missing value (no reward recorded) makes a comparison false, except
 * `== null` / `!= null`.
 *
 * Compilation type-checks against the field table and reports errors with their character span, for the
 * inspector to underline; evaluation is a closure per node (no `eval`).
 */
import { normalizeAnswer } from '../rewards/normalize';
import { closest } from '../schema/schema';

export type FieldType = 'number' | 'string' | 'boolean' | 'strings';

/** What a filter sees of one row (see `RowFacts` in table.ts, plus its group's statistics). */
export interface FilterRow {
  [field: string]: number | string | boolean | readonly string[] | null | undefined;
}

export interface FieldSpec {
  type: FieldType;
  doc: string;
}

/** The fields a filter can use. Dotted names are fields of their own. */
export const FILTER_FIELDS: Record<string, FieldSpec> = {
  step: { type: 'number', doc: 'training step' },
  group: { type: 'string', doc: 'GRPO group id (compare with a number or a string)' },
  sample: { type: 'number', doc: 'index within the group' },
  reward: { type: 'number', doc: 'recorded reward' },
  em: { type: 'number', doc: 'exact match: reward_parts.em, else computed from the answer and golden' },
  searches: { type: 'number', doc: 'searches made (<search> blocks, or valid calls of the search tool)' },
  turns: { type: 'number', doc: 'turns' },
  length: { type: 'number', doc: 'response length: generated tokens when recorded, else characters' },
  finish: { type: 'string', doc: 'answer | max_turns | length | invalid' },
  data_source: { type: 'string', doc: 'data source' },
  split: { type: 'string', doc: 'train, val, …' },
  answer: { type: 'string', doc: 'the final <answer> (null when there is none)' },
  golden: { type: 'strings', doc: 'golden answers' },
  question: { type: 'string', doc: 'the question' },
  id: { type: 'string', doc: 'rollout id' },
  file: { type: 'string', doc: 'the file the row is in' },
  line: { type: 'number', doc: 'line number in its file' },
  index: { type: 'number', doc: 'row number (0-based)' },
  valid: { type: 'boolean', doc: 'the response follows the format (Search-R1’s, or its tool-call counterpart)' },
  dialect: { type: 'string', doc: 'searchr1 | toolcall | llama-json' },
  invalid: {
    type: 'number',
    doc: 'invalid actions (tool calls: bad JSON, unknown tool, no query; answered turns without an action)',
  },
  tokens: { type: 'boolean', doc: 'token arrays were recorded' },
  error: { type: 'boolean', doc: 'the row is malformed' },
  'group.size': { type: 'number', doc: 'rewarded samples in the group' },
  'group.zero_variance': { type: 'boolean', doc: 'every reward in the group is equal (GRPO learns nothing from it)' },
  'group.reward_mean': { type: 'number', doc: "mean of the group's rewards" },
  'group.reward_std': { type: 'number', doc: "standard deviation of the group's rewards" },
  'mask.leaks': { type: 'number', doc: 'tokens whose loss mask disagrees with their role' },
  'mask.trained': { type: 'number', doc: 'tokens in the loss (mask 1)' },
  leaks: {
    type: 'number',
    doc: "leaked tokens: loss mask against role, and the engine's mask against ours (as `audit`)",
  },
  drift: {
    type: 'boolean',
    doc: 're-encoding prompt + response gives other ids than the recorded ones (needs a tokenizer)',
  },
  'drift.token': { type: 'number', doc: 'the first token index where recorded and re-encoded ids differ' },
  'logprob.max_abs_diff': { type: 'number', doc: 'max |logprob − rollout_logprob| over trained tokens' },
  'logprob.flagged': {
    type: 'number',
    doc: 'trained tokens whose ratio exp(logprob − rollout_logprob) lies outside [0.5, 2]',
  },
  'is.clipped': {
    type: 'number',
    doc: 'trained tokens truncated importance sampling would clip: ratio > C (searchAgent.audit.isCap, default 2; at sequence level all of a clipped sequence)',
  },
  'is.dropped': {
    type: 'number',
    doc: 'trained tokens masked importance sampling would drop: ratio outside [1/C, C] (token or sequence level, searchAgent.audit.isLevel)',
  },
  alarm: {
    type: 'strings',
    doc: 'the alarms of one rollout (docs/instruments.md): answer-enumeration, think-degenerate, length-capped, search-repeat, answer-in-search, query-copies-question, search-after-found, non-finite (alarm == "search-repeat"); group and run-level alarms are in audit and the dashboard',
  },
};

export class FilterError extends Error {
  constructor(
    message: string,
    readonly start: number,
    readonly end: number,
  ) {
    super(message);
    this.name = 'FilterError';
  }
}

type Tok =
  | { k: 'num'; v: number; s: number; e: number }
  | { k: 'str'; v: string; s: number; e: number }
  | { k: 're'; v: RegExp; s: number; e: number }
  | { k: 'id'; v: string; s: number; e: number }
  | { k: 'op'; v: string; s: number; e: number }
  | { k: 'end'; s: number; e: number };

const OPS = ['&&', '||', '==', '!=', '<=', '>=', '!~', '<', '>', '~', '!', '(', ')'];

export function tokenize(src: string): Tok[] {
  const out: Tok[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const s = i;
    if (
      /[0-9]/.test(c) ||
      (c === '-' && /[0-9.]/.test(src[i + 1] ?? '')) ||
      (c === '.' && /[0-9]/.test(src[i + 1] ?? ''))
    ) {
      const m = /^-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/.exec(src.slice(i))!;
      i += m[0].length;
      out.push({ k: 'num', v: Number(m[0]), s, e: i });
      continue;
    }
    if (c === '"' || c === "'") {
      let v = '';
      i++;
      for (;;) {
        if (i >= src.length) throw new FilterError('unterminated string', s, src.length);
        const d = src[i]!;
        if (d === c) break;
        if (d === '\\' && i + 1 < src.length) {
          const n = src[i + 1]!;
          v += n === 'n' ? '\n' : n === 't' ? '\t' : n;
          i += 2;
          continue;
        }
        v += d;
        i++;
      }
      i++;
      out.push({ k: 'str', v, s, e: i });
      continue;
    }
    if (c === '/') {
      let j = i + 1;
      let body = '';
      let inClass = false;
      for (;;) {
        if (j >= src.length) throw new FilterError('unterminated regular expression', s, src.length);
        const d = src[j]!;
        if (d === '\\' && j + 1 < src.length) {
          body += d + src[j + 1];
          j += 2;
          continue;
        }
        if (d === '[') inClass = true;
        else if (d === ']') inClass = false;
        else if (d === '/' && !inClass) break;
        body += d;
        j++;
      }
      j++;
      const flags = /^[a-z]*/.exec(src.slice(j))![0];
      j += flags.length;
      let re: RegExp;
      try {
        re = new RegExp(body, flags);
      } catch (e) {
        throw new FilterError(`invalid regular expression: ${(e as Error).message}`, s, j);
      }
      i = j;
      out.push({ k: 're', v: re, s, e: i });
      continue;
    }
    if (/[A-Za-z_]/.test(c)) {
      const m = /^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*/.exec(src.slice(i))!;
      i += m[0].length;
      out.push({ k: 'id', v: m[0], s, e: i });
      continue;
    }
    const op = OPS.find((o) => src.startsWith(o, i));
    if (op) {
      i += op.length;
      out.push({ k: 'op', v: op, s, e: i });
      continue;
    }
    if (c === '=') throw new FilterError('use == to compare', s, s + 1);
    if (c === '&' || c === '|') throw new FilterError(`use ${c}${c}`, s, s + 1);
    throw new FilterError(`unexpected character ${JSON.stringify(c)}`, s, s + 1);
  }
  out.push({ k: 'end', s: src.length, e: src.length });
  return out;
}

type Value = number | string | boolean | readonly string[] | null | undefined;
type Node = {
  type: FieldType | 'null' | 'regex';
  s: number;
  e: number;
  eval: (r: FilterRow) => Value;
  regex?: RegExp;
  field?: string;
};

function suggest(name: string): string {
  const meant = closest(name, Object.keys(FILTER_FIELDS));
  return meant ? `; did you mean ${meant}?` : `; fields: ${Object.keys(FILTER_FIELDS).join(', ')}`;
}

const truthy = (v: Value): boolean =>
  Array.isArray(v) ? v.length > 0 : v !== undefined && v !== null && v !== false && v !== 0 && v !== '';

/** How a field is read from a row; the default reads the property of that name. */
export type FieldResolver = (name: string) => (row: any) => Value;
const byProperty: FieldResolver = (name) => (r: FilterRow) => r[name];

class Parser {
  private p = 0;
  constructor(
    private readonly toks: Tok[],
    private readonly resolve: FieldResolver = byProperty,
  ) {}

  private peek(): Tok {
    return this.toks[this.p]!;
  }
  private isOp(...ops: string[]): boolean {
    const t = this.peek();
    return (t.k === 'op' && ops.includes(t.v)) || (t.k === 'id' && ops.includes(t.v));
  }

  parse(): Node {
    const n = this.or();
    const t = this.peek();
    if (t.k !== 'end')
      throw new FilterError(t.k === 'op' && t.v === ')' ? 'unbalanced )' : 'expected && or || here', t.s, t.e);
    return n;
  }

  private or(): Node {
    return this.chain(['||', 'or'], () => this.and(), true);
  }

  private and(): Node {
    return this.chain(['&&', 'and'], () => this.unary(), false);
  }

  /** `next (op next)*`, left-associative, short-circuiting. */
  private chain(ops: string[], next: () => Node, any: boolean): Node {
    let left = next();
    while (this.isOp(...ops)) {
      this.p++;
      const a = left;
      const b = next();
      left = {
        type: 'boolean',
        s: a.s,
        e: b.e,
        eval: any ? (r) => truthy(a.eval(r)) || truthy(b.eval(r)) : (r) => truthy(a.eval(r)) && truthy(b.eval(r)),
      };
    }
    return left;
  }

  private unary(): Node {
    if (this.isOp('!', 'not')) {
      const s = this.peek().s;
      this.p++;
      const a = this.unary();
      return { type: 'boolean', s, e: a.e, eval: (r) => !truthy(a.eval(r)) };
    }
    return this.compare();
  }

  private compare(): Node {
    const left = this.operand();
    const t = this.peek();
    if (!(t.k === 'op' && ['==', '!=', '<', '<=', '>', '>=', '~', '!~'].includes(t.v))) {
      if (left.type === 'regex') throw new FilterError('a regular expression goes on the right of ~', left.s, left.e);
      return left;
    }
    this.p++;
    const right = this.operand();
    return compareNode(t.v, left, right, t);
  }

  private operand(): Node {
    const t = this.peek();
    this.p++;
    switch (t.k) {
      case 'num':
        return { type: 'number', s: t.s, e: t.e, eval: () => t.v };
      case 'str':
        return { type: 'string', s: t.s, e: t.e, eval: () => t.v };
      case 're':
        return { type: 'regex', s: t.s, e: t.e, eval: () => null, regex: t.v };
      case 'id': {
        if (t.v === 'true' || t.v === 'false') return { type: 'boolean', s: t.s, e: t.e, eval: () => t.v === 'true' };
        if (t.v === 'null') return { type: 'null', s: t.s, e: t.e, eval: () => null };
        if (['and', 'or', 'not'].includes(t.v)) throw new FilterError(`expected a value before ${t.v}`, t.s, t.e);
        const spec = FILTER_FIELDS[t.v];
        if (!spec) throw new FilterError(`unknown field ${t.v}${suggest(t.v)}`, t.s, t.e);
        return { type: spec.type, s: t.s, e: t.e, eval: this.resolve(t.v), field: t.v };
      }
      case 'op':
        if (t.v === '(') {
          const n = this.or();
          const close = this.peek();
          if (!(close.k === 'op' && close.v === ')')) throw new FilterError('missing )', t.s, close.s);
          this.p++;
          return { ...n, s: t.s, e: close.e };
        }
        throw new FilterError(`expected a value, found ${t.v}`, t.s, t.e);
      case 'end':
        throw new FilterError('expected a value', t.s, t.e);
    }
  }
}

function compareNode(op: string, a: Node, b: Node, at: { s: number; e: number }): Node {
  const span = { s: a.s, e: b.e };
  if (op === '~' || op === '!~') {
    if (a.type !== 'string' && a.type !== 'strings')
      throw new FilterError(`~ needs text on its left (${a.type} here)`, a.s, a.e);
    let test: (x: string, r: FilterRow) => boolean;
    if (b.type === 'regex') {
      const re = b.regex!;
      test = (x) => {
        re.lastIndex = 0;
        return re.test(x);
      };
    } else if (b.type === 'string' || b.type === 'strings') {
      test = (x, r) => {
        const v = b.eval(r);
        if (v === undefined || v === null) return false;
        const nx = normalizeAnswer(x);
        return (Array.isArray(v) ? v : [v as string]).some((g) => nx.includes(normalizeAnswer(g)));
      };
    } else throw new FilterError(`~ needs text or a /regex/ on its right (${b.type} here)`, b.s, b.e);
    const neg = op === '!~';
    return {
      type: 'boolean',
      ...span,
      eval: (r) => {
        const v = a.eval(r);
        if (v === undefined || v === null) return false;
        const hit = (Array.isArray(v) ? v : [v as string]).some((x) => test(x, r));
        return neg ? !hit : hit;
      },
    };
  }
  if (a.type === 'regex' || b.type === 'regex')
    throw new FilterError('a regular expression only goes on the right of ~', at.s, at.e);
  if (op === '==' || op === '!=') {
    const neg = op === '!=';
    if (a.type === 'null' || b.type === 'null') {
      const x = a.type === 'null' ? b : a;
      return { type: 'boolean', ...span, eval: (r) => ((x.eval(r) ?? null) === null) !== neg };
    }
    const types = new Set([a.type, b.type]);
    // A list == a string: the list holds that exact string (alarm == "answer-enumeration").
    if (types.has('strings') && types.has('string')) {
      const [list, item] = a.type === 'strings' ? [a, b] : [b, a];
      return {
        type: 'boolean',
        ...span,
        eval: (r) => {
          const l = list.eval(r);
          const x = item.eval(r);
          const hit = Array.isArray(l) && x !== undefined && x !== null && l.includes(x as string);
          return hit !== neg;
        },
      };
    }
    // A group id may be a number or a string: compared as text.
    const asText = types.has('string') && types.has('number') && (a.field === 'group' || b.field === 'group');
    if (a.type !== b.type && !asText) {
      if (types.has('strings'))
        throw new FilterError(
          'compare a list with ~ (answer ~ golden) or with == and a string (alarm == "search-repeat")',
          at.s,
          at.e,
        );
      throw new FilterError(`cannot compare ${a.type} with ${b.type}`, at.s, at.e);
    }
    return {
      type: 'boolean',
      ...span,
      eval: (r) => {
        const x = a.eval(r);
        const y = b.eval(r);
        if (x === undefined || x === null || y === undefined || y === null) return neg && !(x == null && y == null);
        const eq = asText ? String(x) === String(y) : x === y;
        return eq !== neg;
      },
    };
  }
  // < <= > >=
  const ok = (a.type === 'number' && b.type === 'number') || (a.type === 'string' && b.type === 'string');
  if (!ok)
    throw new FilterError(`${op} compares two numbers or two strings (${a.type} ${op} ${b.type} here)`, at.s, at.e);
  const cmp =
    op === '<'
      ? (x: number) => x < 0
      : op === '<='
        ? (x: number) => x <= 0
        : op === '>'
          ? (x: number) => x > 0
          : (x: number) => x >= 0;
  return {
    type: 'boolean',
    ...span,
    eval: (r) => {
      const x = a.eval(r);
      const y = b.eval(r);
      if (x === undefined || x === null || y === undefined || y === null) return false;
      return cmp(typeof x === 'number' ? x - (y as number) : (x as string).localeCompare(y as string));
    },
  };
}

export type CompiledFilter<R = FilterRow> = (row: R) => boolean;

/**
 * Compiles a filter; an empty one matches every row. Throws FilterError with the span of the problem. `resolve`
 * says how to read a field from a row (the table reads its facts in place, without building an object per row).
 */
export function compileFilter<R = FilterRow>(src: string, resolve?: FieldResolver): CompiledFilter<R> {
  if (!src.trim()) return () => true;
  const node = new Parser(tokenize(src), resolve).parse();
  if (node.type === 'regex') throw new FilterError('a regular expression goes on the right of ~', node.s, node.e);
  return (row) => truthy(node.eval(row as unknown as FilterRow));
}

/** A compile check for the editor: null when fine, else the error with its span. */
export function checkFilter(src: string): { message: string; start: number; end: number } | null {
  try {
    compileFilter(src);
    return null;
  } catch (e) {
    if (e instanceof FilterError) return { message: e.message, start: e.start, end: e.end };
    throw e;
  }
}
