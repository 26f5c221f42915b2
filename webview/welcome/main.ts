/** The welcome page: version, workspace trust, and the extension's commands as buttons. */
import '@vscode-elements/elements/dist/vscode-badge/index.js';
import '@vscode-elements/elements/dist/vscode-button/index.js';
import '@vscode-elements/elements/dist/vscode-divider/index.js';
import '@vscode-elements/elements/dist/vscode-icon/index.js';
import type { WelcomeContract, WelcomeInfo } from '../../src/core/protocol';
import { connect } from '../shared/bridge';
import { h, replaceChildren } from '../shared/dom';

const endpoint = connect<WelcomeContract>('welcome');
const root = document.getElementById('root')!;
let shown: WelcomeInfo | undefined;

function trustLine(trusted: boolean): HTMLElement {
  return h(
    'p',
    { class: trusted ? 'trust trusted' : 'trust untrusted', 'data-testid': 'trust' },
    h('vscode-icon', { name: trusted ? 'workspace-trusted' : 'workspace-untrusted' }),
    trusted
      ? ' This workspace is trusted: training and reward modules can run.'
      : ' Restricted mode: Search Agent Studio only views files here; it will not start the trainer or run reward code.',
  );
}

function render(info: WelcomeInfo): void {
  shown = info;
  replaceChildren(
    root,
    h(
      'header',
      {},
      h('h1', {}, 'Search Agent Studio'),
      h('vscode-badge', { 'data-testid': 'version', variant: 'counter' }, `v${info.version}`),
    ),
    h(
      'p',
      { class: 'lead' },
      'Author and debug the RL training of search agents: launch training, inspect rollouts, replay masked vs generated tokens, and edit rewards live.',
    ),
    trustLine(info.trusted),
    h('vscode-divider'),
    h('h2', {}, 'Commands'),
    h(
      'div',
      { class: 'commands' },
      ...info.commands.map((c) =>
        h(
          'vscode-button',
          {
            'data-command': c.id,
            secondary: c.id !== 'searchAgent.showLogs' ? undefined : true,
            onclick: () => void endpoint.request('runCommand', { id: c.id }).catch((e: Error) => showError(e.message)),
          },
          c.title,
        ),
      ),
    ),
    h('p', { class: 'meta' }, `Running in VS Code ${info.vscodeVersion}.`),
    h('p', { class: 'error', id: 'error', hidden: true }),
  );
}

function showError(message: string): void {
  const el = document.getElementById('error');
  if (!el) return;
  el.textContent = message;
  el.hidden = false;
}

endpoint.handle('describe', () => ({ rendered: shown !== undefined, trusted: shown?.trusted ?? null }));
endpoint.on('trustChanged', ({ trusted }) => {
  if (shown) render({ ...shown, trusted });
});

endpoint
  .request('getInfo')
  .then(render)
  .catch((e: Error) => {
    replaceChildren(root, h('p', { class: 'error' }, `Could not load: ${e.message}`));
  });
