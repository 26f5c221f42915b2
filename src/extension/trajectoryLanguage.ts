/**
 * The `search-trajectory` language in the editor: diagnostics from the parser (debounced, incremental per
 * conversation), folding per block, an outline of turns, and a hover on `<search>` with its turn and the
 * documents that came back. The analysis is `src/core/tags/document.ts`; this file only maps offsets to
 * positions. Hover text is built with `appendText` (model and document text is never markdown or HTML).
 */
import * as vscode from 'vscode';
import { type DocumentOptions, type OutlineKind, type OutlineNode, TrajectoryDocument } from '../core/tags/document';
import { trajectoryReadOptions } from './trajectorySettings';

export const LANGUAGE_ID = 'search-trajectory';
const DEBOUNCE_MS = 250;

interface Analysis {
  version: number;
  model: TrajectoryDocument;
}

const SEVERITY: Record<string, vscode.DiagnosticSeverity> = {
  error: vscode.DiagnosticSeverity.Error,
  warning: vscode.DiagnosticSeverity.Warning,
  info: vscode.DiagnosticSeverity.Information,
};

const SYMBOL_KIND: Record<OutlineKind, vscode.SymbolKind> = {
  trajectory: vscode.SymbolKind.Module,
  prompt: vscode.SymbolKind.String,
  turn: vscode.SymbolKind.Event,
  think: vscode.SymbolKind.Namespace,
  search: vscode.SymbolKind.Function,
  information: vscode.SymbolKind.Array,
  answer: vscode.SymbolKind.Constant,
  feedback: vscode.SymbolKind.Null,
};

export class TrajectoryLanguage implements vscode.Disposable {
  private readonly analyses = new Map<string, Analysis>();
  private readonly timers = new Map<string, ReturnType<typeof setTimeout>>();
  private readonly diagnostics = vscode.languages.createDiagnosticCollection(LANGUAGE_ID);
  private readonly disposables: vscode.Disposable[] = [this.diagnostics];

  constructor(private readonly log: vscode.LogOutputChannel) {
    const selector: vscode.DocumentSelector = { language: LANGUAGE_ID };
    this.disposables.push(
      vscode.workspace.onDidOpenTextDocument((d) => this.schedule(d, 0)),
      vscode.workspace.onDidChangeTextDocument((e) => this.schedule(e.document, DEBOUNCE_MS)),
      vscode.workspace.onDidCloseTextDocument((d) => this.forget(d)),
      vscode.languages.registerFoldingRangeProvider(selector, { provideFoldingRanges: (d) => this.folding(d) }),
      vscode.languages.registerDocumentSymbolProvider(
        selector,
        { provideDocumentSymbols: (d) => this.symbols(d) },
        { label: 'Turns' },
      ),
      vscode.languages.registerHoverProvider(selector, { provideHover: (d, p) => this.hover(d, p) }),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (!e.affectsConfiguration('searchAgent.trajectory')) return;
        // Another dialect or search tool: every document is read again.
        this.analyses.clear();
        for (const d of vscode.workspace.textDocuments) this.schedule(d, 0);
      }),
    );
    for (const d of vscode.workspace.textDocuments) this.schedule(d, 0);
  }

  /** The analysis of a document's current version (parsing only the conversations that changed). */
  analyze(document: vscode.TextDocument): TrajectoryDocument {
    const key = document.uri.toString();
    const known = this.analyses.get(key);
    if (known?.version === document.version) return known.model;
    const t0 = Date.now();
    const model = (known?.model ?? new TrajectoryDocument('', this.documentOptions(document))).update(
      document.getText(),
    );
    const ms = Date.now() - t0;
    if (ms > 200)
      this.log.info(
        `parsed ${document.uri.fsPath} (${document.getText().length} chars, ${model.parsedLastUpdate} conversations re-parsed) in ${ms} ms`,
      );
    this.analyses.set(key, { version: document.version, model });
    return model;
  }

  /** `searchAgent.trajectory.dialect` (auto, or a dialect to force) and `.searchTool`. */
  private documentOptions(document: vscode.TextDocument): DocumentOptions {
    return trajectoryReadOptions(document.uri, this.log);
  }

  private schedule(document: vscode.TextDocument, delay: number): void {
    if (document.languageId !== LANGUAGE_ID) {
      if (this.analyses.has(document.uri.toString())) this.forget(document); // language changed away
      return;
    }
    const key = document.uri.toString();
    clearTimeout(this.timers.get(key));
    this.timers.set(
      key,
      setTimeout(() => {
        this.timers.delete(key);
        if (!document.isClosed) this.publish(document);
      }, delay),
    );
  }

  private publish(document: vscode.TextDocument): void {
    const model = this.analyze(document);
    this.diagnostics.set(
      document.uri,
      model.diagnostics().map((d) => {
        const diag = new vscode.Diagnostic(
          new vscode.Range(document.positionAt(d.start), document.positionAt(d.end)),
          d.message,
          SEVERITY[d.severity],
        );
        diag.source = 'search-trajectory';
        diag.code = d.code;
        return diag;
      }),
    );
  }

  private forget(document: vscode.TextDocument): void {
    const key = document.uri.toString();
    clearTimeout(this.timers.get(key));
    this.timers.delete(key);
    this.analyses.delete(key);
    this.diagnostics.delete(document.uri);
  }

  private folding(document: vscode.TextDocument): vscode.FoldingRange[] {
    const ranges: vscode.FoldingRange[] = [];
    for (const s of this.analyze(document).foldingSpans()) {
      const start = document.positionAt(s.start).line;
      const end = document.positionAt(Math.max(s.start, s.end - 1)).line;
      if (end > start)
        ranges.push(
          new vscode.FoldingRange(
            start,
            end,
            s.kind === 'comment' ? vscode.FoldingRangeKind.Comment : vscode.FoldingRangeKind.Region,
          ),
        );
    }
    return ranges;
  }

  private symbols(document: vscode.TextDocument): vscode.DocumentSymbol[] {
    const range = (a: number, b: number) => new vscode.Range(document.positionAt(a), document.positionAt(b));
    const toSymbol = (n: OutlineNode): vscode.DocumentSymbol => {
      const full = range(n.start, n.end);
      const selection = range(
        Math.max(n.start, n.selectionStart),
        Math.min(n.end, Math.max(n.selectionStart, n.selectionEnd)),
      );
      const symbol = new vscode.DocumentSymbol(
        n.name,
        n.detail,
        SYMBOL_KIND[n.kind],
        full,
        full.contains(selection) ? selection : full,
      );
      symbol.children = n.children.map(toSymbol);
      return symbol;
    };
    return this.analyze(document).outline(document.getText()).map(toSymbol);
  }

  private hover(document: vscode.TextDocument, position: vscode.Position): vscode.Hover | undefined {
    const offset = document.offsetAt(position);
    const info = this.analyze(document).searchAt(document.getText(), offset);
    if (!info) return undefined;
    const md = new vscode.MarkdownString();
    md.isTrusted = false;
    md.supportHtml = false;
    md.appendMarkdown('**Turn ');
    md.appendText(String(info.turn));
    if (info.error !== undefined) {
      md.appendMarkdown('** · invalid tool call: ');
      md.appendText(info.error);
    } else if (info.tool !== undefined && info.query === '' && info.dialect !== 'searchr1') {
      md.appendMarkdown('** · tool call: ');
      md.appendText(info.tool);
    } else {
      md.appendMarkdown(info.dialect === 'searchr1' ? '** · search: ' : '** · search (tool call): ');
      md.appendText(`“${info.query}”`);
    }
    md.appendMarkdown('\n\n');
    if (info.docs.length === 0) {
      md.appendText(
        info.dialect === 'searchr1'
          ? 'No documents came back (no <information> block after this search).'
          : 'No documents came back (no tool response answered this call).',
      );
    }
    for (const d of info.docs.slice(0, 10)) {
      md.appendMarkdown('---\n\n**');
      md.appendText(`Doc ${d.index}${d.title ? ` · ${d.title}` : ''}`);
      md.appendMarkdown('**\n\n');
      md.appendText(d.text.length > 400 ? `${d.text.slice(0, 399)}…` : d.text);
      md.appendMarkdown('\n\n');
    }
    return new vscode.Hover(md, new vscode.Range(document.positionAt(info.start), document.positionAt(info.end)));
  }

  dispose(): void {
    for (const t of this.timers.values()) clearTimeout(t);
    for (const d of this.disposables.splice(0)) d.dispose();
    this.analyses.clear();
  }
}
