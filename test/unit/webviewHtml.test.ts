import assert from 'node:assert/strict';
import { contentSecurityPolicy, escapeHtml, makeNonce, renderWebviewHtml } from '../../src/core/webviewHtml';

const CSP_SOURCE = 'https://file+.vscode-resource.vscode-cdn.net';

function cspOf(html: string): Map<string, string[]> {
  const m = /<meta http-equiv="Content-Security-Policy" content="([^"]*)">/.exec(html);
  assert.ok(m, 'the document has a CSP meta tag');
  const policy = m[1]!.replace(/&#39;/g, "'");
  return new Map(
    policy.split(';').map((d) => {
      const [name, ...values] = d.trim().split(/\s+/);
      return [name!, values] as [string, string[]];
    }),
  );
}

describe('webview HTML and CSP', () => {
  it('denies by default and allows scripts only by nonce', () => {
    const { html, nonce } = renderWebviewHtml({
      title: 'Welcome',
      webview: 'dashboard',
      cspSource: CSP_SOURCE,
      scripts: ['https://x/dist/webview/dashboard.js'],
      styles: [
        { href: 'https://x/dist/codicons/codicon.css', id: 'vscode-codicon-stylesheet' },
        'https://x/media/webview.css',
      ],
    });
    const csp = cspOf(html);
    assert.deepEqual(csp.get('default-src'), ["'none'"]);
    assert.deepEqual(csp.get('script-src'), [`'nonce-${nonce}'`]);
    assert.deepEqual(csp.get('style-src'), [CSP_SOURCE]);
    assert.deepEqual(csp.get('font-src'), [CSP_SOURCE]);
    assert.deepEqual(csp.get('img-src'), [CSP_SOURCE, 'data:']);
    assert.ok(!html.includes('unsafe-inline') && !html.includes('unsafe-eval'));
    // Every script tag carries the nonce and a src; there is no inline script.
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    assert.equal(scripts.length, 1);
    for (const [, attrs, body] of scripts) {
      assert.ok(attrs!.includes(`nonce="${nonce}"`));
      assert.match(attrs!, /src="https:\/\/x\/dist\/webview\/dashboard\.js"/);
      assert.equal(body, '');
    }
    assert.match(
      html,
      /<link rel="stylesheet" href="https:\/\/x\/dist\/codicons\/codicon.css" id="vscode-codicon-stylesheet">/,
    );
  });

  it('uses a fresh 128-bit nonce per document', () => {
    const nonces = new Set(Array.from({ length: 200 }, () => makeNonce()));
    assert.equal(nonces.size, 200);
    for (const n of nonces) assert.equal(Buffer.from(n, 'base64').length, 16);
    const a = renderWebviewHtml({ title: 't', webview: 'w', cspSource: CSP_SOURCE, scripts: [], styles: [] });
    const b = renderWebviewHtml({ title: 't', webview: 'w', cspSource: CSP_SOURCE, scripts: [], styles: [] });
    assert.notEqual(a.nonce, b.nonce);
  });

  it('escapes text and attribute values', () => {
    const { html } = renderWebviewHtml({
      title: '<img src=x onerror=alert(1)>',
      webview: 'w"><script>',
      cspSource: CSP_SOURCE,
      scripts: ['https://x/a.js" onload="alert(1)'],
      styles: [],
    });
    assert.ok(!html.includes('<img'));
    assert.ok(!html.includes('"><script>'));
    assert.ok(!html.includes('" onload="'));
    assert.equal(escapeHtml(`<a href="x">'&'</a>`), '&#60;a href=&#34;x&#34;&#62;&#39;&#38;&#39;&#60;/a&#62;');
  });

  it('refuses a nonce or CSP source that could widen the policy', () => {
    assert.throws(() => contentSecurityPolicy(CSP_SOURCE, "abc'; script-src *"), /invalid CSP nonce/);
    assert.throws(() => contentSecurityPolicy(`${CSP_SOURCE}; script-src *`, makeNonce()), /invalid CSP source/);
    assert.throws(() => contentSecurityPolicy('', makeNonce()), /invalid CSP source/);
    for (const widening of ["'self' 'unsafe-inline'", '*', 'https:// *', "'unsafe-eval'", 'https://a.net, *']) {
      assert.throws(() => contentSecurityPolicy(widening, makeNonce()), /invalid CSP source/, widening);
    }
  });

  it('accepts the CSP sources VS Code and code-server hand out', () => {
    for (const source of [
      CSP_SOURCE,
      "'self' https://*.vscode-cdn.net",
      'vscode-webview-resource:',
      'vscode-resource: https://file+.vscode-resource.vscode-cdn.net',
    ]) {
      const csp = contentSecurityPolicy(source, makeNonce());
      assert.ok(csp.includes(`style-src ${source};`), csp);
    }
  });
});
