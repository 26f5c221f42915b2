// Runs TypeScript under Node without a separate compile step: each .ts file is transformed with esbuild
// (the project's own compiler) to CommonJS when it is required, with an inline source map for stack traces.
// Used by mocha (`.mocharc.json`) and by scripts: `node -r ./test/register.cjs file.ts`.
//
// The transforms are cached on disk (node_modules/.cache/sas-register/, keyed by the source's hash, esbuild's version
// and these options): the tests start the CLI and the env server as processes hundreds of times, and each start
// transformed some 150 modules anew (0.26 s of CPU a start, beside 0.16 s for the bundled CLI). A cached transform is
// the same text esbuild wrote; SAS_REGISTER_CACHE=0 turns the cache off.
'use strict';
const { createHash } = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const OPTIONS = {
  loader: 'ts',
  format: 'cjs',
  target: 'node20',
  sourcemap: 'inline',
  tsconfigRaw: { compilerOptions: { useDefineForClassFields: true } },
};
const CACHE =
  process.env.SAS_REGISTER_CACHE === '0' ? null : path.join(__dirname, '..', 'node_modules', '.cache', 'sas-register');
let esbuild; // loaded on the first transform the cache does not hold (it starts esbuild's service)
let salt;

process.setSourceMapsEnabled(true);

function transform(source, filename) {
  esbuild ??= require('esbuild');
  return esbuild.transformSync(source, { ...OPTIONS, sourcefile: filename }).code;
}

function cached(source, filename) {
  salt ??= JSON.stringify([require('esbuild/package.json').version, OPTIONS]);
  const key = createHash('sha256').update(salt).update('\0').update(filename).update('\0').update(source).digest('hex');
  const file = path.join(CACHE, key.slice(0, 2), `${key}.js`);
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    const code = transform(source, filename);
    try {
      // written whole or not at all: another process may be reading or writing the same entry
      fs.mkdirSync(path.dirname(file), { recursive: true });
      const tmp = `${file}.${process.pid}.tmp`;
      fs.writeFileSync(tmp, code);
      fs.renameSync(tmp, file);
    } catch {
      // a read-only or full disk: the transform is still good, just not kept
    }
    return code;
  }
}

require.extensions['.ts'] = function compileTs(module, filename) {
  const source = fs.readFileSync(filename, 'utf8');
  module._compile(CACHE ? cached(source, filename) : transform(source, filename), filename);
};
