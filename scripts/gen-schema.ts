// Writes docs/schema/*.schema.json from the schemas in src/core (`npm run schema`).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderPublishedSchemas, TRAINER_SCHEMA_COPY } from '../src/core/run/format';

const dir = join(__dirname, '..', 'docs', 'schema');
mkdirSync(dir, { recursive: true });
for (const [name, text] of Object.entries(renderPublishedSchemas())) {
  writeFileSync(join(dir, name), text);
  console.log(`wrote docs/schema/${name}`);
}
writeFileSync(join(__dirname, '..', TRAINER_SCHEMA_COPY), renderPublishedSchemas()['run-config.schema.json']!);
console.log(`wrote ${TRAINER_SCHEMA_COPY}`);
