/**
 * The one place that writes a webview's HTML document. Pure: the caller supplies the URIs and the CSP source
 * (from `vscode.Webview`), so this is unit-tested without VS Code.
 *
 * Policy: `default-src 'none'`; scripts only by nonce (fresh per document, from `crypto.randomBytes`); styles,
 * fonts and images only from the webview's resource origin (`cspSource`), images also as `data:` URIs; nothing
 * else (no connect, no frames, no forms, no inline style attributes, no inline scripts).
 * The document has no model or document text in it: webviews receive data by message and render it with DOM
 * APIs as text.
 */
import { randomBytes } from 'node:crypto';

export interface WebviewHtmlOptions {
  /** Page title (plain text, escaped). */
  title: string;
  /** `webview.cspSource`. */
  cspSource: string;
  /** Nonce for the script tags; {@link makeNonce} by default. */
  nonce?: string;
  /** Script URIs (as `webview.asWebviewUri(...).toString()`), loaded as ES modules in order. */
  scripts: string[];
  /** Stylesheet URIs; an entry may carry an element id (e.g. the codicon stylesheet that vscode-elements looks up). */
  styles: (string | { href: string; id: string })[];
  /** The webview's name, set as `data-webview` on `<body>` (for CSS and tests). */
  webview: string;
}

/** A fresh nonce: 128 random bits, base64. */
export function makeNonce(): string {
  return randomBytes(16).toString('base64');
}

const NONCE_RE = /^[A-Za-z0-9+/=_-]{16,}$/;
/** One source expression of `webview.cspSource` (e.g. `'self'`, `https://*.vscode-cdn.net`, `vscode-resource:`). */
const SOURCE_RE = /^('self'|[a-z][a-z0-9+.-]*:(\/\/[^\s;,'"*][^\s;,'"]*|\/\/\*\.[^\s;,'"]+)?|[^\s;,'"*:][^\s;,'"]*)$/i;

/** Checks `webview.cspSource`: source expressions only, nothing that widens the policy (`*`, keywords, `;`). */
function checkCspSource(cspSource: string): string {
  const tokens = cspSource.trim().split(/\s+/);
  if (cspSource.trim() === '' || !tokens.every((t) => SOURCE_RE.test(t))) {
    throw new Error(`invalid CSP source: ${JSON.stringify(cspSource)}`);
  }
  return tokens.join(' ');
}

/** The Content-Security-Policy for a webview document. */
export function contentSecurityPolicy(cspSource: string, nonce: string): string {
  if (!NONCE_RE.test(nonce)) throw new Error(`invalid CSP nonce: ${JSON.stringify(nonce)}`);
  cspSource = checkCspSource(cspSource);
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src ${cspSource}`,
    `font-src ${cspSource}`,
    `img-src ${cspSource} data:`,
    "connect-src 'none'",
    "frame-src 'none'",
    "form-action 'none'",
    "base-uri 'none'",
  ].join('; ');
}

/** Escapes text for an HTML attribute value or text node. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Builds the full HTML document. Returns the nonce used, so a caller can assert on it. */
export function renderWebviewHtml(options: WebviewHtmlOptions): { html: string; nonce: string } {
  const nonce = options.nonce ?? makeNonce();
  const csp = contentSecurityPolicy(options.cspSource, nonce);
  const styleTags = options.styles.map((s) => {
    const { href, id } = typeof s === 'string' ? { href: s, id: undefined } : s;
    return `<link rel="stylesheet" href="${escapeHtml(href)}"${id ? ` id="${escapeHtml(id)}"` : ''}>`;
  });
  const scriptTags = options.scripts.map(
    (src) => `<script type="module" nonce="${escapeHtml(nonce)}" src="${escapeHtml(src)}"></script>`,
  );
  const html = [
    '<!DOCTYPE html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="UTF-8">',
    `<meta http-equiv="Content-Security-Policy" content="${escapeHtml(csp)}">`,
    '<meta name="viewport" content="width=device-width, initial-scale=1.0">',
    ...styleTags,
    `<title>${escapeHtml(options.title)}</title>`,
    '</head>',
    `<body data-webview="${escapeHtml(options.webview)}">`,
    '<div id="root"></div>',
    ...scriptTags,
    '</body>',
    '</html>',
  ].join('\n');
  return { html, nonce };
}
