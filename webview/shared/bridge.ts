/** The webview side of the protocol: one `acquireVsCodeApi()` per document, one typed endpoint. */
import { viewEndpoint, type Contract, type ViewEndpoint, type WebviewName } from '../../src/core/protocol';

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

export function connect<C extends Contract>(name: WebviewName): ViewEndpoint<C> {
  const vscode = vscodeApi();
  return viewEndpoint<C>(
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
}
