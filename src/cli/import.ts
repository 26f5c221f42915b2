/**
 * `search-agent-studio import <searchr1|verl|trl|searchr1-dataset> <src> --out <file.jsonl>`: converts a
 * source into our rollout JSONL (or, for a Search-R1 dataset, our JSONL dataset), streaming.
 */
import { IMPORT_KINDS, importDataset, readSource, sourceFiles, type ImportKind, type SourceKind } from '../core/importers';
import type { DatasetImportIssue } from '../core/importers/dataset';
import { formatIssue, type ReadOptions } from '../core/run/format';
import { defineCommand } from './command';
import { withInputErrors } from './inputErrors';
import { readOptionsFromArgs, withReadOptions } from './inspect';
import { OutputFile } from './output';

export async function importCommand(kind: string, src: string, outPath: string, err: (s: string) => void, read: ReadOptions = {}): Promise<number> {
  if (!(IMPORT_KINDS as readonly string[]).includes(kind)) {
    err(`unknown import kind "${kind}"; expected one of ${IMPORT_KINDS.join(', ')}\n`);
    return 2;
  }
  // The output is refused when it is one of the files read, and put in place only when the whole source was read.
  const out = await OutputFile.create(outPath, await sourceFiles(src, (kind as ImportKind) === 'searchr1-dataset' ? 'dataset' : (kind as SourceKind)));
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
      for await (const item of readSource(src, kind as 'searchr1' | 'verl' | 'trl', read)) {
        if (!item.record) {
          skipped++;
          for (const i of item.issues) if (skipped <= 50) err(`${formatIssue(i)}\n`);
          continue;
        }
        await write(JSON.stringify(item.record));
        written++;
      }
    }
    await out.commit();
  } finally {
    await out.abort();
  }
  err(`${src} → ${outPath}: ${written} ${kind === 'searchr1-dataset' ? 'examples' : 'trajectories'}${skipped ? `, ${skipped} skipped` : ''}\n`);
  return 0;
}

export const importCommandDef = defineCommand({
  command: 'import <kind> <src>',
  describe: 'convert into our rollout JSONL (a Search-R1 dataset: our dataset JSONL)',
  builder: (y) =>
    withReadOptions(
      y
      .positional('kind', { type: 'string', choices: IMPORT_KINDS, demandOption: true, describe: 'what <src> holds' })
      .positional('src', { type: 'string', demandOption: true, describe: 'the file or directory to convert' })
      .option('out', { type: 'string', demandOption: true, describe: 'the JSONL file to write' })
    ),
  run: async (a, io) => {
    const read = readOptionsFromArgs(a);
    return withInputErrors(io, () => importCommand(a.kind, a.src, a.out, io.err, read));
  },
});
