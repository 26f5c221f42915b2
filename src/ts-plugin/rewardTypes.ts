/**
 * A TypeScript server plugin (package.json `contributes.typescriptServerPlugins`): adds the reward API's
 * declarations (dist/reward-api.d.ts, which declares the module `search-agent-studio/reward`) to every TypeScript
 * project holding a reward module (`*.reward.{ts,mts,js,mjs}`), so that in any workspace — with nothing written
 * into it — `import { defineReward } from 'search-agent-studio/reward'` resolves and `traj`/`example` are typed
 * (a mistake such as `traj.searches > 1`, an array compared with a number, is an error in the editor).
 *
 * VS Code loads it from the extension's `node_modules/search-agent-studio-reward-types/` (scripts/package.mjs puts
 * this bundle there in the VSIX); it runs inside tsserver, so it imports nothing but Node's `path`.
 */
import { join } from 'node:path';
import type * as ts from 'typescript/lib/tsserverlibrary';

const REWARD_MODULE = /\.reward\.(ts|mts|js|mjs)$/;

/**
 * The plugin: the project's list of script files (what its program is built from) gains `declarations` whenever a
 * reward module is among them. (A plugin's "external files" are not in the program, so the host's list is wrapped.)
 */
export function rewardTypesPlugin(declarations: string): ts.server.PluginModuleFactory {
  return () => ({
    create: (info) => {
      const host = info.languageServiceHost;
      const scriptFileNames = host.getScriptFileNames.bind(host);
      host.getScriptFileNames = () => {
        const names = scriptFileNames();
        return names.some((f) => REWARD_MODULE.test(f)) && !names.includes(declarations)
          ? [...names, declarations]
          : names;
      };
      return info.languageService;
    },
  });
}

/** The entry tsserver requires: dist/reward-api.d.ts two levels up from node_modules/<plugin>/index.js. */
export default rewardTypesPlugin(join(__dirname, '..', '..', 'dist', 'reward-api.d.ts'));
