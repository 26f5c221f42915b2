/**
 * Bounds on untrusted JSON values, checked without recursion. A JSON document nested 10,000 deep parses (V8's
 * JSON.parse does not recurse) but then breaks everything that does: `JSON.stringify`, structured clone
 * (`postMessage` to a worker or a webview), recursive validators. So every value that goes on to one of those is
 * first checked here, and an error message never echoes a value back (a 1.5 M-element field is described, not
 * printed).
 */

/**
 * How deep a value from outside may nest (a scalar is depth 0, `{}` and `[]` depth 1): far beyond any record we or an
 * engine write (a rollout's `meta.retrieval` is 4 deep), far below what structured clone and `JSON.stringify` survive.
 */
export const MAX_JSON_DEPTH = 64;

/** Whether `value` nests deeper than `limit` (arrays and objects), walked with an explicit stack. */
export function nestsDeeperThan(value: unknown, limit: number = MAX_JSON_DEPTH): boolean {
  if (value === null || typeof value !== 'object') return false;
  const stack: unknown[] = [value];
  const depths: number[] = [1];
  while (stack.length) {
    const v = stack.pop() as object;
    const d = depths.pop()!;
    if (d > limit) return true;
    const children = Array.isArray(v) ? v : Object.values(v);
    for (const c of children) {
      if (c !== null && typeof c === 'object') {
        stack.push(c);
        depths.push(d + 1);
      }
    }
  }
  return false;
}

/**
 * A value as an error message may show it: a short scalar as JSON (strings cut at 60 characters), a container by
 * its kind and size. Never recurses and never prints a container's contents.
 */
export function describeValue(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  if (Array.isArray(v)) return `an array of ${v.length} element${v.length === 1 ? '' : 's'}`;
  if (typeof v === 'object') return 'an object';
  if (typeof v === 'string')
    return v.length > 60
      ? `a string of ${v.length} characters (${JSON.stringify(v.slice(0, 40))}…)`
      : JSON.stringify(v);
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  return typeof v;
}

/** The depth error for a field, naming it and the limit. */
export function depthMessage(field: string, limit: number = MAX_JSON_DEPTH): string {
  return `${field}: nested deeper than ${limit} levels (the limit for JSON values passed on)`;
}
