// Runs TypeScript under Node without a separate compile step: each .ts file is transformed with esbuild
// (the project's own compiler) to CommonJS when it is required, with an inline source map for stack traces.
// Used by mocha (`.mocharc.json`) and by scripts: `node -r ./test/register.cjs file.ts`.
'use strict';
const { transformSync } = require('esbuild');
const fs = require('node:fs');

process.setSourceMapsEnabled(true);

require.extensions['.ts'] = function compileTs(module, filename) {
  const source = fs.readFileSync(filename, 'utf8');
  const { code } = transformSync(source, {
    loader: 'ts',
    format: 'cjs',
    target: 'node20',
    sourcemap: 'inline',
    sourcefile: filename,
    tsconfigRaw: { compilerOptions: { useDefineForClassFields: true } },
  });
  module._compile(code, filename);
};
