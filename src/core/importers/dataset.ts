/**
 * Search-R1 datasets (`train.parquet` / `test.parquet` made by scripts/data_process/*.py) → our JSONL dataset
 * for the trainer: one `{id, question, golden, data_source, split}` per row. Golden answers come from
 * `reward_model.ground_truth.target` (falling back to `golden_answers`); the question from the `question`
 * column, else from the prompt's `Question: …`.
 */

import { goldenList, messageText, toNumber } from '../run/fields';
import { S, type Static } from '../schema/schema';
import { extractQuestion } from '../tags/transcript';
import { parquetRows } from './parquet';

export const DatasetExampleSchema = S.object(
  {
    id: S.string({ minLength: 1 }),
    question: S.string({ minLength: 1 }),
    golden: S.array(S.string(), { minItems: 1, description: 'Golden answers (any one counts as correct).' }),
    data_source: S.optional(S.string()),
    split: S.optional(S.string()),
    meta: S.optional(S.record(S.any())),
  },
  { description: 'A line of a training/evaluation dataset (JSONL) for the trainer.' },
);
export type DatasetExample = Static<typeof DatasetExampleSchema>;

export interface DatasetImportIssue {
  row: number;
  message: string;
}

export async function* importSearchR1Dataset(
  path: string,
  issues: DatasetImportIssue[] = [],
): AsyncGenerator<DatasetExample> {
  let row = 0;
  for await (const r of parquetRows(path)) {
    row++;
    const extra = (r.extra_info ?? {}) as Record<string, unknown>;
    const rm = (r.reward_model ?? {}) as Record<string, unknown>;
    const golden = goldenList(rm.ground_truth).length ? goldenList(rm.ground_truth) : goldenList(r.golden_answers);
    const question =
      (typeof r.question === 'string' && r.question.trim()) || extractQuestion(messageText(r.prompt)) || '';
    if (!question) {
      issues.push({
        row,
        message: `${path}: row ${row}: question: none (no question column and no "Question:" in prompt)`,
      });
      continue;
    }
    if (golden.length === 0) {
      issues.push({ row, message: `${path}: row ${row}: reward_model.ground_truth.target: no golden answers` });
      continue;
    }
    const dataSource = r.data_source === undefined || r.data_source === null ? undefined : String(r.data_source);
    const split = typeof extra.split === 'string' ? extra.split : undefined;
    const index = toNumber(extra.index);
    const id =
      r.id !== undefined && r.id !== null ? String(r.id) : `${dataSource ?? 'row'}-${split ?? 'x'}-${index ?? row - 1}`;
    yield {
      id,
      question: question.trim(),
      golden,
      ...(dataSource ? { data_source: dataSource } : {}),
      ...(split ? { split } : {}),
    };
  }
}
