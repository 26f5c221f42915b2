/**
 * `search-agent-studio import <auto|searchr1|verl|trl|prime-rl|nemo-rl|miles|slime|skyrl|searchr1-dataset> <src>
 * --out <file.jsonl>`: converts a source into our rollout JSONL (or, for a Search-R1 dataset, our JSONL dataset),
 * streaming.
 */
import {
  detectSource,
  IMPORT_KINDS,
  type ImportKind,
  importDataset,
  importKindToSource,
  readSource,
  type SourceKind,
  sourceFiles,
} from '../core/importers';
import type { DatasetImportIssue } from '../core/importers/dataset';
import type { ForeignOptions } from '../core/importers/foreign';
import { formatIssue, type ReadOptions } from '../core/run/format';
import { defineCommand } from './command';
import { withInputErrors } from './inputErrors';
import {
  foreignOptionsFromArgs,
  readOptionsFromArgs,
  tokenizerFromArg,
  withForeignOptions,
  withReadOptions,
} from './inspect';
import { OutputFile } from './output';

export async function importCommand(
  kind: string,
  src: string,
  outPath: string,
  err: (s: string) => void,
  read: ReadOptions = {},
  foreign: ForeignOptions = {},
): Promise<number> {
  if (!(IMPORT_KINDS as readonly string[]).includes(kind)) {
    err(`unknown import kind "${kind}"; expected one of ${IMPORT_KINDS.join(', ')}\n`);
    return 2;
  }
  // The output is refused when it is one of the files read, and put in place only when the whole source was read.
  const out = await OutputFile.create(
    outPath,
    await sourceFiles(src, kind === 'auto' ? undefined : importKindToSource(kind as Exclude<ImportKind, 'auto'>)),
  );
  const write = (line: string) => out.write(`${line}\n`);
  let written = 0;
  let skipped = 0;
  try {
    if ((kind as ImportKind) === 'searchr1-dataset') {
      const issues: DatasetImportIssue[] = [];
      for await (const ex of importDataset(src, issues)) {
        await write(JSON.stringify(ex));
        written++;
      }
      skipped = issues.length;
      for (const i of issues.slice(0, 50)) err(`${i.message}\n`);
    } else {
      const sourceKind: SourceKind = kind === 'auto' ? await detectSource(src) : (kind as SourceKind);
      for await (const item of readSource(src, sourceKind, read, 'all', foreign)) {
        if (!item.record) {
          skipped++;
          for (const i of item.issues) if (skipped <= 50) err(`${formatIssue(i)}\n`);
          continue;
        }
        await write(JSON.stringify(item.record));
        written++;
      }
    }
    // nothing converted is not a conversion: no empty file is left where a user (or a script) expects data
    if (written) await out.commit();
  } finally {
    await out.abort();
  }
  const what = kind === 'searchr1-dataset' ? 'examples' : 'trajectories';
  if (!written) {
    err(
      `search-agent-studio: ${src}: nothing to import: no ${what} were read${skipped ? ` (${skipped} skipped, above)` : ' (an empty file, or a directory without them)'}; ${outPath} not written\n`,
    );
    return 2;
  }
  err(`${src} → ${outPath}: ${written} ${what}${skipped ? `, ${skipped} skipped` : ''}\n`);
  return 0;
}

export const importCommandDef = defineCommand({
  command: 'import <kind> <src>',
  describe: 'convert into our rollout JSONL (a Search-R1 dataset: our dataset JSONL)',
  builder: (y) =>
    withForeignOptions(
      withReadOptions(
        y
          .positional('kind', {
            type: 'string',
            choices: IMPORT_KINDS,
            demandOption: true,
            describe: 'what <src> holds (auto: detected, as inspect does)',
          })
          .positional('src', { type: 'string', demandOption: true, describe: 'the file or directory to convert' })
          .option('out', { type: 'string', demandOption: true, describe: 'the JSONL file to write' })
          .option('tokenizer', {
            type: 'string',
            describe:
              "the model's tokenizer for dumps that hold only token ids (prime-rl, NeMo-RL, miles, slime, SkyRL): token text, and roles from its chat template",
          }),
      ),
    ),
  run: async (a, io) => {
    const read = readOptionsFromArgs(a);
    const tokenizer = a.tokenizer ? await tokenizerFromArg(a.tokenizer) : undefined;
    return withInputErrors(io, () =>
      importCommand(a.kind, a.src, a.out, io.err, read, foreignOptionsFromArgs(a, tokenizer, io.err)),
    );
  },
});
