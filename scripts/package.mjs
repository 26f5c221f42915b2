// Builds (production) and packages a platform-specific VSIX with @vscode/vsce into out/.
// The extension, server and CLI are bundled, so the only node_modules that ship are onnxruntime-node (native)
// and its JS API; of onnxruntime-node's per-platform binaries only this target's ship (~45 MB of the ~290 MB).
//   node scripts/package.mjs [--target linux-x64]
import { spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import yauzl from 'yauzl';
import yazl from 'yazl';

const root = join(import.meta.dirname, '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const arg = process.argv.indexOf('--target');
const target = arg > 0 ? process.argv[arg + 1] : `${process.platform}-${process.arch}`;
const [os, cpu] = target.split('-');

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

run(process.execPath, ['esbuild.mjs', '--production']);
run(process.execPath, ['scripts/reward-types.mjs']);

// A per-target ignore file: the base .vscodeignore plus the one onnxruntime binary folder for this target.
const binDir = `node_modules/onnxruntime-node/bin/napi-v6/${os}/${cpu}`;
if (!existsSync(join(root, binDir))) {
  console.error(
    `package: onnxruntime-node has no binaries for ${target} (${binDir}); dense retrieval would not load there.`,
  );
  process.exit(1);
}
mkdirSync(join(root, 'out'), { recursive: true });
const ignoreFile = join(root, 'out', `.vscodeignore.${target}`);
const esbuildBin = `node_modules/@esbuild/${target}`;
if (!existsSync(join(root, esbuildBin))) {
  console.error(
    `package: esbuild has no binary package for ${target} (${esbuildBin}); reward modules could not compile there.`,
  );
  process.exit(1);
}
writeFileSync(
  ignoreFile,
  `${readFileSync(join(root, '.vscodeignore'), 'utf8')}\n# added by scripts/package.mjs for ${target}\n!${binDir}/**\n!${esbuildBin}/**\n`,
);

const vsix = join(root, 'out', `${pkg.name}-${target}-${pkg.version}.vsix`);
run(process.execPath, [
  join(root, 'node_modules', '@vscode', 'vsce', 'vsce'),
  'package',
  '--target',
  target,
  '--ignoreFile',
  ignoreFile,
  '--out',
  vsix,
  '--allow-missing-repository',
  '--no-rewrite-relative-links',
]);
await addTsPlugin(vsix);
const mb = (statSync(vsix).size / 1024 / 1024).toFixed(1);
console.log(`VSIX: ${vsix} (${mb} MB)`);
writeFileSync(join(root, 'out', 'vsix-path.txt'), vsix);

/**
 * The TypeScript server plugin (src/ts-plugin, contributes.typescriptServerPlugins) must be a package under the
 * extension's node_modules, where tsserver looks for plugins; it is our own bundle, not an npm dependency, so it is
 * added to the VSIX here (vsce only packages node_modules it gets from `npm ls`).
 */
async function addTsPlugin(file) {
  const name = pkg.contributes.typescriptServerPlugins[0].name;
  const plugin = {
    [`extension/node_modules/${name}/package.json`]: Buffer.from(
      `${JSON.stringify({ name, version: pkg.version, private: true, main: 'index.js', description: "Search Agent Studio's TypeScript server plugin: the reward API's types for reward modules" }, null, 2)}\n`,
    ),
    [`extension/node_modules/${name}/index.js`]: readFileSync(join(root, 'dist', 'ts-plugin', 'index.js')),
  };
  const tmp = `${file}.tmp`;
  const zip = new yazl.ZipFile();
  const done = new Promise((resolve, reject) =>
    zip.outputStream.pipe(createWriteStream(tmp)).on('close', resolve).on('error', reject),
  );
  await new Promise((resolve, reject) =>
    yauzl.open(file, { lazyEntries: true }, (err, src) => {
      if (err) return reject(err);
      src.on('entry', (entry) => {
        if (/\/$/.test(entry.fileName) || plugin[entry.fileName]) return src.readEntry();
        src.openReadStream(entry, (e, stream) => {
          if (e) return reject(e);
          const chunks = [];
          stream
            .on('data', (c) => chunks.push(c))
            .on('end', () => {
              // Keep each file's unix mode (esbuild's binary must stay executable).
              const mode = (entry.externalFileAttributes >>> 16) & 0xffff;
              zip.addBuffer(Buffer.concat(chunks), entry.fileName, {
                mtime: entry.getLastModDate(),
                ...(mode ? { mode } : {}),
              });
              src.readEntry();
            });
        });
      });
      src.on('end', resolve).on('error', reject);
      src.readEntry();
    }),
  );
  for (const [path, data] of Object.entries(plugin)) zip.addBuffer(data, path);
  zip.end();
  await done;
  renameSync(tmp, file);
}
