/**
 * One source for each data contract: a schema written once here gives
 *  - the TypeScript type (`Static<typeof X>`), so there is no hand-kept twin;
 *  - the JSON Schema (draft 2020-12) published in docs/schema/ (generated, and a test checks it is current);
 *  - a validator whose issues name the field path (`tokens.loss_mask[3]`).
 * Small on purpose: the subset of JSON Schema our contracts use.
 */

export type Node =
  | { t: 'string'; enum?: readonly string[]; minLength?: number; pattern?: string }
  | { t: 'number'; integer: boolean; minimum?: number; maximum?: number }
  | { t: 'boolean' }
  | { t: 'null' }
  | { t: 'const'; value: string | number | boolean }
  | { t: 'array'; items: Node; minItems?: number }
  | { t: 'object'; props: Record<string, Node>; required: string[]; additional: Node | boolean }
  | { t: 'union'; of: Node[] }
  | { t: 'any' };

interface Meta {
  description?: string;
  /** The value a reader uses when the field is absent (emitted as JSON Schema `default`). */
  default?: unknown;
  /** Cross-field checks JSON Schema cannot express (documented in the description). */
  refine?: (value: any, path: string) => Issue[];
}

export interface Schema<T> {
  readonly node: Node & Meta;
  /** Phantom: the static type. */
  readonly __type?: T;
  readonly __optional?: boolean;
}
export interface OptionalSchema<T> extends Schema<T> {
  readonly __optional: true;
}

export type Static<S> = S extends Schema<infer T> ? T : never;
type Simplify<T> = { [K in keyof T]: T[K] } & {};
type ObjectType<P extends Record<string, Schema<unknown>>> = Simplify<
  { [K in keyof P as P[K] extends OptionalSchema<unknown> ? never : K]: Static<P[K]> } & {
    [K in keyof P as P[K] extends OptionalSchema<unknown> ? K : never]?: Static<P[K]>;
  }
>;

const mk = <T>(node: Node & Meta): Schema<T> => ({ node });

export const S = {
  string: (
    o: { enum?: undefined; minLength?: number; pattern?: string; description?: string; default?: string } = {},
  ) => mk<string>({ t: 'string', ...o }),
  enum: <const E extends readonly string[]>(values: E, description?: string, dflt?: E[number]) =>
    mk<E[number]>({ t: 'string', enum: values, description, default: dflt }),
  number: (o: { minimum?: number; maximum?: number; description?: string; default?: number } = {}) =>
    mk<number>({ t: 'number', integer: false, ...o }),
  integer: (o: { minimum?: number; maximum?: number; description?: string; default?: number } = {}) =>
    mk<number>({ t: 'number', integer: true, ...o }),
  boolean: (description?: string, dflt?: boolean) => mk<boolean>({ t: 'boolean', description, default: dflt }),
  null: () => mk<null>({ t: 'null' }),
  literal: <const V extends string | number | boolean>(value: V, description?: string) =>
    mk<V>({ t: 'const', value, description }),
  array: <T>(items: Schema<T>, o: { minItems?: number; description?: string } = {}) =>
    mk<T[]>({ t: 'array', items: items.node, ...o }),
  object: <P extends Record<string, Schema<any>>>(
    props: P,
    o: { additional?: boolean | Schema<unknown>; description?: string; refine?: Meta['refine'] } = {},
  ): Schema<ObjectType<P>> =>
    mk({
      t: 'object',
      props: Object.fromEntries(Object.entries(props).map(([k, v]) => [k, v.node])),
      required: Object.entries(props)
        .filter(([, v]) => !v.__optional)
        .map(([k]) => k),
      additional: typeof o.additional === 'object' ? o.additional.node : (o.additional ?? true),
      description: o.description,
      refine: o.refine,
    }),
  /** A map from string keys to values of one schema. */
  record: <T>(values: Schema<T>, description?: string) =>
    mk<Record<string, T>>({ t: 'object', props: {}, required: [], additional: values.node, description }),
  union: <U extends Schema<any>[]>(...of: U) => mk<Static<U[number]>>({ t: 'union', of: of.map((s) => s.node) }),
  any: (description?: string) => mk<unknown>({ t: 'any', description }),
  optional: <T>(s: Schema<T>): OptionalSchema<T> => ({ node: s.node, __optional: true }),
  describe: <T>(s: Schema<T>, description: string): Schema<T> => ({ ...s, node: { ...s.node, description } }),
};

export interface Issue {
  /** The field, as a path: `tokens.loss_mask[3]`; '' for the value itself. */
  path: string;
  message: string;
}

function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  return typeof v;
}

const join = (path: string, key: string) =>
  /^[A-Za-z_$][\w$]*$/.test(key) ? (path ? `${path}.${key}` : key) : `${path}[${JSON.stringify(key)}]`;

/** The edit distance of two names (insertions, deletions, substitutions). */
function levenshtein(a: string, b: string): number {
  const d = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0]!;
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const t = d[j]!;
      d[j] = Math.min(d[j]! + 1, d[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = t;
    }
  }
  return d[b.length]!;
}

/** The candidate a mistyped `name` most likely meant (a few edits away, fewer than its length), else undefined. */
export function closest(name: string, candidates: Iterable<string>): string | undefined {
  let best: { c: string; d: number } | undefined;
  for (const c of candidates) {
    const d = levenshtein(name, c);
    if (!best || d < best.d) best = { c, d };
  }
  return best && best.d <= Math.max(2, name.length / 3) && best.d < name.length ? best.c : undefined;
}

/** Validates a value; returns at most `limit` issues (default 20), each naming its field. */
export function validate<T>(schema: Schema<T>, value: unknown, limit = 20): Issue[] {
  const issues: Issue[] = [];
  check(schema.node, value, '', issues, limit);
  return issues;
}

export function is<T>(schema: Schema<T>, value: unknown): value is T {
  return validate(schema, value, 1).length === 0;
}

function check(node: Node & Meta, v: unknown, path: string, out: Issue[], limit: number): void {
  if (out.length >= limit) return;
  const fail = (message: string) => out.push({ path, message });
  switch (node.t) {
    case 'any':
      break;
    case 'null':
      if (v !== null) fail(`expected null, got ${typeName(v)}`);
      break;
    case 'boolean':
      if (typeof v !== 'boolean') fail(`expected a boolean, got ${typeName(v)}`);
      break;
    case 'const':
      if (v !== node.value) fail(`expected ${JSON.stringify(node.value)}, got ${JSON.stringify(v)}`);
      break;
    case 'string':
      if (typeof v !== 'string') fail(`expected a string, got ${typeName(v)}`);
      else if (node.enum && !node.enum.includes(v))
        fail(`expected one of ${node.enum.map((e) => JSON.stringify(e)).join(', ')}, got ${JSON.stringify(v)}`);
      else if (node.minLength !== undefined && v.length < node.minLength)
        fail(node.minLength === 1 ? 'must not be empty' : `must have at least ${node.minLength} characters`);
      else if (node.pattern !== undefined && !new RegExp(node.pattern, 'u').test(v)) fail(`must match ${node.pattern}`);
      break;
    case 'number':
      if (typeof v !== 'number' || !Number.isFinite(v))
        fail(`expected ${node.integer ? 'an integer' : 'a number'}, got ${typeName(v)}`);
      else if (node.integer && !Number.isInteger(v)) fail(`expected an integer, got ${v}`);
      else if (node.minimum !== undefined && v < node.minimum) fail(`must be ≥ ${node.minimum}, got ${v}`);
      else if (node.maximum !== undefined && v > node.maximum) fail(`must be ≤ ${node.maximum}, got ${v}`);
      break;
    case 'array':
      if (!Array.isArray(v)) fail(`expected an array, got ${typeName(v)}`);
      else {
        if (node.minItems !== undefined && v.length < node.minItems)
          fail(`must have at least ${node.minItems} item${node.minItems === 1 ? '' : 's'}`);
        // Elements that pass the quick test need no path string (token arrays have thousands of elements).
        for (let i = 0; i < v.length && out.length < limit; i++)
          if (!quickOk(node.items, v[i])) check(node.items, v[i], `${path}[${i}]`, out, limit);
      }
      break;
    case 'object': {
      if (typeof v !== 'object' || v === null || Array.isArray(v)) {
        fail(`expected an object, got ${typeName(v)}`);
        break;
      }
      const o = v as Record<string, unknown>;
      for (const k of node.required)
        if (!(k in o) || o[k] === undefined) out.push({ path: join(path, k), message: 'is required' });
      for (const [k, value] of Object.entries(o)) {
        if (out.length >= limit) break;
        const prop = Object.hasOwn(node.props, k) ? node.props[k] : undefined;
        if (prop) check(prop, value, join(path, k), out, limit);
        else if (node.additional === false) {
          const meant = closest(k, Object.keys(node.props));
          out.push({ path: join(path, k), message: `is not a known field${meant ? ` (did you mean ${meant}?)` : ''}` });
        } else if (node.additional !== true) check(node.additional, value, join(path, k), out, limit);
      }
      break;
    }
    case 'union': {
      const attempts = node.of.map((n) => {
        const sub: Issue[] = [];
        check(n, v, path, sub, limit);
        return sub;
      });
      if (attempts.some((a) => a.length === 0)) break;
      fail(`expected ${node.of.map(describeNode).join(' or ')}, got ${typeName(v)}`);
      break;
    }
  }
  if (node.refine && out.length === 0) out.push(...node.refine(v, path).slice(0, limit - out.length));
}

/** True when a value surely passes a primitive node (no allocation); false means "run the full check". */
function quickOk(n: Node & Meta, v: unknown): boolean {
  if (n.refine) return false;
  switch (n.t) {
    case 'any':
      return true;
    case 'boolean':
      return typeof v === 'boolean';
    case 'const':
      return v === n.value;
    case 'string':
      return (
        typeof v === 'string' &&
        (!n.enum || n.enum.includes(v)) &&
        (n.minLength === undefined || v.length >= n.minLength) &&
        n.pattern === undefined
      );
    case 'number':
      return (
        typeof v === 'number' &&
        Number.isFinite(v) &&
        (!n.integer || Number.isInteger(v)) &&
        (n.minimum === undefined || v >= n.minimum) &&
        (n.maximum === undefined || v <= n.maximum)
      );
    case 'union':
      return n.of.some((x) => quickOk(x as Node & Meta, v));
    default:
      return false;
  }
}

function describeNode(n: Node): string {
  switch (n.t) {
    case 'string':
      return n.enum ? n.enum.map((e) => JSON.stringify(e)).join('/') : 'a string';
    case 'number':
      return n.integer ? 'an integer' : 'a number';
    case 'const':
      return JSON.stringify(n.value);
    case 'array':
      return 'an array';
    case 'object':
      return 'an object';
    default:
      return n.t;
  }
}

/** JSON Schema (draft 2020-12) for a schema. */
export function toJsonSchema(
  schema: Schema<unknown>,
  meta: { $id?: string; title?: string; description?: string } = {},
): Record<string, unknown> {
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    ...(meta.$id ? { $id: meta.$id } : {}),
    ...(meta.title ? { title: meta.title } : {}),
    ...emit(schema.node, meta.description),
  };
}

function emit(n: Node & Meta, description = n.description): Record<string, unknown> {
  const d = { ...(description ? { description } : {}), ...(n.default !== undefined ? { default: n.default } : {}) };
  switch (n.t) {
    case 'any':
      return { ...d };
    case 'null':
      return { ...d, type: 'null' };
    case 'boolean':
      return { ...d, type: 'boolean' };
    case 'const':
      return { ...d, const: n.value };
    case 'string':
      return {
        ...d,
        type: 'string',
        ...(n.enum ? { enum: n.enum } : {}),
        ...(n.minLength !== undefined ? { minLength: n.minLength } : {}),
        ...(n.pattern ? { pattern: n.pattern } : {}),
      };
    case 'number':
      return {
        ...d,
        type: n.integer ? 'integer' : 'number',
        ...(n.minimum !== undefined ? { minimum: n.minimum } : {}),
        ...(n.maximum !== undefined ? { maximum: n.maximum } : {}),
      };
    case 'array':
      return {
        ...d,
        type: 'array',
        items: emit(n.items),
        ...(n.minItems !== undefined ? { minItems: n.minItems } : {}),
      };
    case 'object':
      return {
        ...d,
        type: 'object',
        ...(Object.keys(n.props).length
          ? { properties: Object.fromEntries(Object.entries(n.props).map(([k, v]) => [k, emit(v)])) }
          : {}),
        ...(n.required.length ? { required: n.required } : {}),
        additionalProperties: typeof n.additional === 'boolean' ? n.additional : emit(n.additional),
      };
    case 'union':
      return { ...d, anyOf: n.of.map((x) => emit(x)) };
  }
}
