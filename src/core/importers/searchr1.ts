/**
 * Search-R1 transcripts: text files of whole conversations with chat templates, several per file, as
 * `infer.py` prints them (a header line, the prompt with its template, then the response with information
 * blocks), or chat transcripts with tool calls (one conversation with its tool turns is one record). Each becomes
 * a record without tokens; golden answers are unknown.
 */

import { derivedFields } from '../run/fields';
import { type ReadOptions, ROLLOUT_RECORD_VERSION, type Rollout } from '../run/format';
import { parseTranscript, splitConversations } from '../tags/transcript';

export function importSearchR1Transcripts(text: string, source = 'transcript', read: ReadOptions = {}): Rollout[] {
  return splitConversations(text).map((span, k) => {
    const conversation = text.slice(span.start, span.end);
    const t = parseTranscript(conversation, { dialect: read.dialect, searchTool: read.searchTool });
    const prompt = conversation.slice(t.promptStart, t.promptEnd);
    const response = conversation.slice(t.responseStart, t.responseEnd);
    const line = text.slice(0, span.start).split('\n').length;
    return {
      v: ROLLOUT_RECORD_VERSION,
      id: `${source}#${k + 1}`,
      ...(t.question ? { question: t.question } : {}),
      golden: [],
      prompt,
      response,
      ...derivedFields(response, { prompt, dialect: read.dialect, searchTool: read.searchTool }),
      meta: { source, line, template: t.template, ...(span.label ? { label: span.label } : {}) },
    } satisfies Rollout;
  });
}
