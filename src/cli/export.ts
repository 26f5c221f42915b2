/**
 * `search-agent-studio export verl <config.run.json> --out DIR [--python PATH]`: a veRL run as files for one's own
 * cluster (src/core/host/verl.ts; docs/engines.md). veRL's Python: --python, the config's verl.python,
 * SAS_VERL_PYTHON, .venv-verl (the first with veRL 0.9.1).
 */
import { parseArgs } from 'node:util';
import { loadRunConfig, RunConfigError } from '../core/host/runConfig';
import { exportVerl, findVerlPython, noVerlPythonMessage, verlPythonCandidates } from '../core/host/verl';
import { packageRoot } from '../core/paths';

export async function exportCommand(args: string[], out: (s: string) => void, err: (s: string) => void): Promise<number> {
  const { values, positionals } = parseArgs({ args, options: { out: { type: 'string' }, python: { type: 'string' } }, allowPositionals: true, strict: true });
  if (positionals[0] !== 'verl' || positionals.length !== 2 || !values.out) {
    err('search-agent-studio export: usage: export verl <config.run.json> --out DIR [--python PATH]\n');
    return 2;
  }
  try {
    const loaded = await loadRunConfig(positionals[1]!);
    const search = await findVerlPython(verlPythonCandidates(loaded, [values.python], packageRoot()));
    if (!search.found) {
      err(`${noVerlPythonMessage(search)}\n`);
      return 1;
    }
    const result = await exportVerl(loaded, values.out, search.found.executable);
    out(`exported a veRL ${search.found.verl} run to ${result.dir}:\n${result.files.map((f) => `  ${f}\n`).join('')}  trainer/search_agent_trainer/ (our agent loops, tool, reward bridge, recorder)\n`);
    for (const note of result.notes) out(`note: ${note}\n`);
    out(`${result.checked ? 'checked: every override composed with veRL’s own config' : 'not checked against veRL’s config (this Python has no veRL)'}\n`);
    out(`launch: ${result.dir}/env-server.sh on every node, then SAS_ENV_URL=http://127.0.0.1:8790 PYTHON=<veRL's python> ${result.dir}/launch.sh (RAY_ADDRESS joins a Ray cluster; docs/engines.md)\n`);
    return 0;
  } catch (e) {
    if (e instanceof RunConfigError) {
      err(`search-agent-studio export: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
}
