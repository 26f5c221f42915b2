/**
 * Reading a run config (`*.run.json`) the way the host needs it: validated against the one schema (every problem
 * named by file and key path), relative paths resolved against the file, files that must exist checked before
 * anything is spawned, and the env server's command line derived from it.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { findNodeAtLocation, type Node as JsonNode, parseTree } from 'jsonc-parser';
import { demoCorpusPath, formerBuiltinName, resolveConfigPath } from '../paths';
import { type TrainerNeeds, trainerNeeds } from '../python';
import { type RunConfig, RunConfigSchema } from '../run/config';
import { validate } from '../schema/schema';

export class RunConfigError extends Error {
  constructor(
    readonly file: string,
    readonly problems: string[],
  ) {
    super(`${file}: ${problems.join('; ')}`);
    this.name = 'RunConfigError';
  }
}

export interface LoadedRunConfig {
  /** The config file (absolute), or the run.json it came from on resume. */
  file: string;
  /** The directory relative paths in the config are resolved against. */
  base: string;
  config: RunConfig;
}

function lineCol(text: string, message: string): string {
  const m = /position (\d+)/.exec(message);
  if (!m) return '';
  const before = text.slice(0, Number(m[1]));
  const line = before.split('\n').length;
  return `:${line}:${Number(m[1]) - before.lastIndexOf('\n')}`;
}

/** Reads and validates a run config; throws RunConfigError naming the file, line (for JSON) and key path.
 * `files: false` (the memory plan's reading: `plan` needs only the model's config.json): the schema is checked, the
 * files the config names (data, retriever, model) need not exist. */
export async function loadRunConfig(file: string, options: { files?: boolean } = {}): Promise<LoadedRunConfig> {
  const abs = resolve(file);
  let text: string;
  try {
    text = await readFile(abs, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new RunConfigError(abs, [
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EISDIR'
          ? 'a directory, not a run config: name its *.run.json file (a run directory is continued with --resume --run-dir DIR)'
          : (e as Error).message,
    ]);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new RunConfigError(abs + lineCol(text, (e as Error).message), [`not valid JSON: ${(e as Error).message}`]);
  }
  try {
    return checkRunConfig(value, abs, dirname(abs), options);
  } catch (e) {
    if (!(e instanceof RunConfigError)) throw e;
    const root = parseTree(text); // parsed once for every problem's line
    throw new RunConfigError(
      abs,
      e.problems.map((p) => withLine(text, root, p)),
    );
  }
}

/**
 * A problem of checkRunConfig (`key.path: what`) with the line of the config file where that key is written —
 * `line 4: rollout.batchsize: is not a known field` — found with jsonc-parser (the JSON parser of VS Code's own JSON
 * service, offsets included); a key the file lacks (a required one) gets the line of the closest parent it has.
 */
function withLine(text: string, root: JsonNode | undefined, problem: string): string {
  const m = /^((?:[A-Za-z_$][\w$]*|\["(?:[^"\\]|\\.)*"\])(?:\.[A-Za-z_$][\w$]*|\[\d+\]|\["(?:[^"\\]|\\.)*"\])*): /.exec(
    problem,
  );
  if (!m) return problem;
  const path: (string | number)[] = [];
  for (const t of m[1]!.matchAll(/([A-Za-z_$][\w$]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]/g))
    path.push(t[1] ?? (t[2] !== undefined ? Number(t[2]) : (JSON.parse(t[3]!) as string)));
  if (!root) return problem;
  let node: JsonNode | undefined;
  for (let n = path.length; n > 0 && !node; n--) node = findNodeAtLocation(root, path.slice(0, n));
  node ??= root; // a top-level key the file lacks: the object that lacks it
  const at = node.parent?.type === 'property' ? node.parent.offset : node.offset; // the key, where there is one
  return `line ${text.slice(0, at).split('\n').length}: ${problem}`;
}

/**
 * The config a run directory was started with, for resuming (or forking: `purpose` words the error): run.json keeps it completed by the trainer,
 * its relative paths made absolute but its `builtin:NAME` data as named, so that the names resolve in this install,
 * not the one that started the run. A run.json of an older version, which held them as paths into that install, gets
 * the compatibility step of `formerBuiltinName` (the trainer, reading run.json itself on --resume, does the same).
 */
export async function loadRunDirConfig(runDir: string, purpose = 'to resume'): Promise<LoadedRunConfig> {
  const file = resolve(runDir, 'run.json');
  let run: { config?: unknown };
  try {
    run = JSON.parse(await readFile(file, 'utf8'));
  } catch (e) {
    throw new RunConfigError(file, [`cannot read the run's config ${purpose} (${(e as Error).message})`]);
  }
  const config = structuredClone(run.config);
  for (const place of pathPlaces(config)) {
    const name = formerBuiltinName(place.value);
    if (name) place.set(name);
  }
  return checkRunConfig(config, file, resolve(runDir));
}

/** The keys of a run config that name files (and model.tiny.vocab's entries), as the trainer's PATH_KEYS (config.py). */
const PATH_KEYS = [
  ['data', 'train'],
  ['data', 'eval'],
  ['model', 'path'],
  ['model', 'init'],
  ['retriever', 'corpus'],
  ['retriever', 'index'],
  ['retriever', 'model'],
  ['trl', 'accelerate_config'],
] as const;

/** The paths a config (not yet validated) names, by key: PATH_KEYS' and model.tiny.vocab's string entries. */
function pathPlaces(config: unknown): { key: string; value: string; set(value: string): void }[] {
  const out: { key: string; value: string; set(value: string): void }[] = [];
  const obj = (v: unknown): Record<string, unknown> | undefined =>
    v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  const c = obj(config);
  for (const [section, key] of PATH_KEYS) {
    const sec = obj(c?.[section]);
    const value = sec?.[key];
    if (typeof value === 'string') out.push({ key: `${section}.${key}`, value, set: (v) => (sec![key] = v) });
  }
  const vocab = obj(obj(c?.model)?.tiny)?.vocab;
  if (Array.isArray(vocab))
    vocab.forEach(
      (value, i) =>
        typeof value === 'string' && out.push({ key: `model.tiny.vocab[${i}]`, value, set: (v) => (vocab[i] = v) }),
    );
  return out;
}

/**
 * A loaded config as the content of a file that may live anywhere (the demo's `--seed` writes one into the run
 * directory): its relative paths (PATH_KEYS', model.tiny.vocab's, reward.module's, output_dir) made absolute against
 * the config's own directory; `builtin:` names kept as names.
 */
export function standaloneConfig(loaded: LoadedRunConfig): Record<string, any> {
  const config = structuredClone(loaded.config) as Record<string, any>;
  const abs = (p: string) => (p.startsWith('builtin:') ? p : resolveConfigPath(p, loaded.base));
  for (const place of pathPlaces(config)) place.set(abs(place.value));
  if (typeof config.reward?.module === 'string') config.reward.module = abs(config.reward.module);
  if (typeof config.output_dir === 'string') config.output_dir = abs(config.output_dir);
  return config;
}

export function checkRunConfig(
  value: unknown,
  file: string,
  base: string,
  options: { files?: boolean } = {},
): LoadedRunConfig {
  const issues = validate(RunConfigSchema, value);
  if (issues.length)
    throw new RunConfigError(
      file,
      issues.map((i) => `${i.path || '(the file)'}: ${i.message}`),
    );
  const config = value as RunConfig;
  const missing: string[] = [];
  const need = (key: string, p: string | undefined) => {
    if (p === undefined) return;
    let path: string;
    try {
      path = resolveConfigPath(p, base);
    } catch (e) {
      missing.push(`${key}: ${(e as Error).message}`);
      return;
    }
    if (!existsSync(path)) missing.push(`${key}: no such file or directory: ${path}`);
  };
  const files = options.files ?? true;
  if (files) for (const { key, value } of pathPlaces(config)) need(key, value);
  const module = config.reward?.module;
  if (files && module && !module.startsWith('builtin:')) need('reward.module', module);
  const r = config.retriever;
  if (files && config.model.kind === 'hf' && !config.model.path)
    missing.push('model.path: is required when model.kind is "hf"');
  if (r?.kind === 'bm25' && !r.index && !r.corpus)
    missing.push('retriever: kind "bm25" needs index (a built index) or corpus (a JSONL corpus)');
  if (r?.kind === 'dense' && (!r.index || !r.model)) missing.push('retriever: kind "dense" needs index and model');
  if (r?.kind === 'remote' && !r.url) missing.push('retriever: kind "remote" needs url');
  if (missing.length) throw new RunConfigError(file, missing);
  return { file, base, config };
}

export { resolveConfigPath };

/** The env server's arguments (`node dist/server.js …`) for a run config. */
export function envServerArgs(loaded: LoadedRunConfig, options: { port?: number } = {}): string[] {
  const { config, base } = loaded;
  const at = (p: string) => resolveConfigPath(p, base);
  const r = config.retriever ?? { kind: 'demo' as const };
  const args = ['--port', String(options.port ?? 0), '--topk', String(r.topk ?? 3)];
  switch (r.kind) {
    case 'demo':
      args.push('--corpus', r.corpus ? at(r.corpus) : demoCorpusPath());
      break;
    case 'bm25':
      args.push('--retriever', 'bm25', ...(r.index ? ['--index', at(r.index)] : ['--corpus', at(r.corpus as string)]));
      break;
    case 'dense':
      args.push('--retriever', 'dense', '--index', at(r.index as string), '--model', at(r.model as string));
      break;
    case 'remote':
      args.push('--retriever', 'remote', '--url', r.url as string);
      break;
    case 'none':
      args.push('--retriever', 'none');
      break;
  }
  const module = config.reward?.module ?? 'builtin:em';
  args.push('--reward', module.startsWith('builtin:') ? module : at(module));
  return args;
}

/** A fresh run directory: <output_dir or fallback>/<name>-<YYYYMMDD-HHMMSS>, never one that exists. */
export function newRunDir(loaded: LoadedRunConfig, fallbackParent: string, now = new Date()): string {
  const { config, base } = loaded;
  const parent = config.output_dir
    ? isAbsolute(config.output_dir)
      ? config.output_dir
      : resolve(base, config.output_dir)
    : fallbackParent;
  const name =
    (config.name ?? basename(loaded.file).replace(/\.run\.json$|\.json$/, '')).replace(/[^\w.-]+/g, '-') || 'run';
  const p2 = (n: number) => String(n).padStart(2, '0');
  const stamp = `${now.getFullYear()}${p2(now.getMonth() + 1)}${p2(now.getDate())}-${p2(now.getHours())}${p2(now.getMinutes())}${p2(now.getSeconds())}`;
  let dir = join(parent, `${name}-${stamp}`);
  for (let i = 2; existsSync(dir); i++) dir = join(parent, `${name}-${stamp}-${i}`);
  return dir;
}

/**
 * A new run directory as newRunDir names it, created — atomically, so two runs started in the same second (two
 * terminals, the editor and the CLI) never share one: a name another process took between the check and the
 * creation is skipped for the next (`-2`, `-3`, …).
 */
export function makeNewRunDir(loaded: LoadedRunConfig, fallbackParent: string, now = new Date()): string {
  for (;;) {
    const dir = newRunDir(loaded, fallbackParent, now);
    mkdirSync(dirname(dir), { recursive: true });
    try {
      mkdirSync(dir);
      return dir;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
}

/**
 * What a run needs of the trainer's Python beyond torch (transformers for a Hugging Face model, peft for LoRA), from
 * its config or, to resume, its run.json; {} when that cannot be read (the host reports why when it starts).
 */
export async function runNeeds(what: { config?: string; runDir?: string; resume?: boolean }): Promise<TrainerNeeds> {
  try {
    return trainerNeeds(
      (what.resume ? await loadRunDirConfig(what.runDir!) : await loadRunConfig(what.config!)).config,
    );
  } catch {
    return {};
  }
}
