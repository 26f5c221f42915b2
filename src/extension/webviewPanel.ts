/**
 * The one helper every webview panel is created with: strict CSP with a fresh nonce, resources only from the
 * extension's `dist/` and `media/`, no `retainContextWhenHidden` (state is restored from the host through the
 * protocol's ready handshake), and a typed endpoint wired to the panel's message channel.
 */
import * as vscode from 'vscode';
import { type Contract, type HostEndpoint, hostEndpoint, type WebviewName } from '../core/protocol/messaging';
import { renderWebviewHtml } from '../core/webviewHtml';

export interface WebviewPanelSpec {
  name: WebviewName;
  title: string;
  viewColumn?: vscode.ViewColumn;
  preserveFocus?: boolean;
}

export interface OpenedWebview<C extends Contract> {
  panel: vscode.WebviewPanel;
  endpoint: HostEndpoint<C>;
}

/** Options every webview of ours gets. */
export function webviewOptions(extensionUri: vscode.Uri): vscode.WebviewOptions & vscode.WebviewPanelOptions {
  return {
    enableScripts: true,
    enableCommandUris: false,
    enableForms: false,
    localResourceRoots: [vscode.Uri.joinPath(extensionUri, 'dist'), vscode.Uri.joinPath(extensionUri, 'media')],
    retainContextWhenHidden: false,
  };
}

/** Sets a webview's HTML for the bundle `dist/webview/<name>.js` (+ `.css`), shared CSS and the codicons. */
export function setWebviewHtml(
  webview: vscode.Webview,
  extensionUri: vscode.Uri,
  name: WebviewName,
  title: string,
): string {
  const uri = (...segments: string[]) =>
    webview.asWebviewUri(vscode.Uri.joinPath(extensionUri, ...segments)).toString();
  const { html, nonce } = renderWebviewHtml({
    title,
    webview: name,
    cspSource: webview.cspSource,
    scripts: [uri('dist', 'webview', `${name}.js`)],
    styles: [
      { href: uri('dist', 'codicons', 'codicon.css'), id: 'vscode-codicon-stylesheet' },
      uri('media', 'webview.css'),
      uri('dist', 'webview', `${name}.css`),
    ],
  });
  webview.html = html;
  return nonce;
}

/** Opens a webview panel and connects its endpoint; the endpoint is disposed with the panel. */
export function openWebviewPanel<C extends Contract>(
  extensionUri: vscode.Uri,
  spec: WebviewPanelSpec,
  log: vscode.LogOutputChannel,
): OpenedWebview<C> {
  const panel = vscode.window.createWebviewPanel(
    `searchAgent.${spec.name}`,
    spec.title,
    { viewColumn: spec.viewColumn ?? vscode.ViewColumn.Active, preserveFocus: spec.preserveFocus ?? false },
    webviewOptions(extensionUri),
  );
  panel.iconPath = vscode.Uri.joinPath(extensionUri, 'media', 'icon.svg');
  const endpoint = connectWebview<C>(panel.webview, spec.name, log);
  panel.onDidDispose(() => endpoint.dispose());
  setWebviewHtml(panel.webview, extensionUri, spec.name, spec.title);
  return { panel, endpoint };
}

/** A typed endpoint over a webview's message channel (listening starts before any HTML is set). */
export function connectWebview<C extends Contract>(
  webview: vscode.Webview,
  name: WebviewName,
  log: vscode.LogOutputChannel,
): HostEndpoint<C> {
  return hostEndpoint<C>(
    name,
    {
      post: (message) => webview.postMessage(message),
      listen: (handler) => {
        const sub = webview.onDidReceiveMessage(handler);
        return () => sub.dispose();
      },
    },
    {
      onProtocolError: (error) => log.warn(`[webview ${name}] protocol: ${error}`),
      onLog: (level, message) => log[level](`[webview ${name}] ${message}`),
    },
  );
}
