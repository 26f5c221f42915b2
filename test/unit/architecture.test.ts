/**
 * House rules that keep the layers apart, checked on the source itself:
 *  - src/core is pure TypeScript: no `vscode` import, no import from the extension layer;
 *  - the protocol module, shared with the browser bundles, imports nothing at all;
 *  - webviews never use HTML sinks (model and document text is hostile input).
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

const ROOT = join(__dirname, '..', '..');

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile() && /\.(ts|tsx|mts|cts|js|mjs)$/.test(d.name))
    .map((d) => join(d.parentPath, d.name));
}

/** Every module a file imports: static imports, re-exports, `require(...)` and `import(...)`. */
export function importsOf(source: string): string[] {
  return ts.preProcessFile(source, true, true).importedFiles.map((f) => f.fileName);
}

const HTML_SINKS = /\b(innerHTML|outerHTML|insertAdjacentHTML|document\.write|DOMParser|createContextualFragment)\b/;

describe('architecture', () => {
  it('finds vscode imports in every form it can be written (positive control)', () => {
    const forms = [
      "import * as vscode from 'vscode';",
      "import type { Uri } from 'vscode';",
      "export { window } from 'vscode';",
      "const v = require('vscode');",
      "const v = await import('vscode');",
    ];
    for (const f of forms) assert.ok(importsOf(f).includes('vscode'), f);
  });

  it('src/core imports neither vscode nor the extension layer', () => {
    const files = sourceFiles('src/core');
    assert.ok(files.length > 0);
    const offenders = files.flatMap((file) =>
      importsOf(readFileSync(file, 'utf8'))
        .filter((m) => m === 'vscode' || m.startsWith('vscode/') || /(^|\/)extension(\/|$)/.test(m))
        .map((m) => `${relative(ROOT, file)} imports ${m}`),
    );
    assert.deepEqual(offenders, []);
  });

  it('the protocol module imports nothing (it runs in webviews too)', () => {
    assert.deepEqual(importsOf(readFileSync(join(ROOT, 'src/core/protocol/messaging.ts'), 'utf8')), []);
  });

  it('webviews use no HTML sinks', () => {
    const offenders = sourceFiles('webview').filter((f) => HTML_SINKS.test(readFileSync(f, 'utf8')));
    assert.deepEqual(offenders.map((f) => relative(ROOT, f)), []);
    assert.ok(HTML_SINKS.test('el.innerHTML = x'), 'positive control');
  });

  it('webviews import from src/core only the protocol module', () => {
    const offenders = sourceFiles('webview').flatMap((file) =>
      importsOf(readFileSync(file, 'utf8'))
        .filter((m) => m.includes('src/') && !/src\/core\/protocol\/\w+$/.test(m))
        .map((m) => `${relative(ROOT, file)} imports ${m}`),
    );
    assert.deepEqual(offenders, []);
  });
});
