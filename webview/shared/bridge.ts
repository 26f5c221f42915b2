/** The webview side of the protocol: one `acquireVsCodeApi()` per document, one typed endpoint. */
import { type Contract, type ViewEndpoint, viewEndpoint, type WebviewName } from '../../src/core/protocol/messaging';

interface VsCodeApi {
  postMessage(message: unknown): void;
  getState(): unknown;
  setState(state: unknown): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

let api: VsCodeApi | undefined;

export function vscodeApi(): VsCodeApi {
  return (api ??= acquireVsCodeApi());
}

/**
 * Connects this webview to the extension host. Uncaught errors and CSP violations are reported to the host's
 * log ("Search Agent: Show Logs"), where a user (and the e2e tests) can see them.
 */
export function connect<C extends Contract>(name: WebviewName): ViewEndpoint<C> {
  const vscode = vscodeApi();
  const endpoint = viewEndpoint<C>(
    name,
    {
      post: (message) => vscode.postMessage(message),
      listen: (handler) => {
        const onMessage = (event: MessageEvent) => handler(event.data);
        window.addEventListener('message', onMessage);
        return () => window.removeEventListener('message', onMessage);
      },
    },
    { onProtocolError: (error) => console.warn(`[protocol] ${error}`) },
  );
  document.addEventListener('securitypolicyviolation', (e) =>
    endpoint.log(
      'error',
      `CSP blocked ${e.effectiveDirective}: ${e.blockedURI || 'inline'} (${e.sourceFile || 'document'}:${e.lineNumber})`,
    ),
  );
  window.addEventListener('error', (e) => {
    // Chromium reports a resize that caused another layout within one frame as an error event; it is benign (the
    // observers run again next frame), so it is logged as information, not as an error.
    if (/^ResizeObserver loop/.test(e.message)) endpoint.log('info', `benign: ${e.message}`);
    else endpoint.log('error', `uncaught: ${e.message} (${e.filename}:${e.lineno})`);
  });
  window.addEventListener('unhandledrejection', (e) =>
    endpoint.log('error', `unhandled rejection: ${String(e.reason)}`),
  );
  return endpoint;
}
