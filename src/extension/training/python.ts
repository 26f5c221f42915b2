/**
 * The trainer's Python, found the way issue 8 asks: `searchAgent.pythonPath`, then the Python extension's active
 * interpreter (when that extension is installed), then the usual candidates (the project's .venv, python3 on PATH,
 * /usr/bin/python3); each checked by importing torch. The checking is core's (src/core/python.ts).
 */
import * as vscode from 'vscode';
import { findPython, pythonCandidates, type PythonSearch } from '../../core/python';

interface PythonExtensionApi {
  environments?: { getActiveEnvironmentPath(resource?: vscode.Uri): { path: string } | undefined };
  settings?: { getExecutionDetails(resource?: vscode.Uri): { execCommand?: string[] } };
}

/** The Python extension's active interpreter, if that extension is present (never fails). */
async function pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>('ms-python.python');
  if (!ext) return undefined;
  try {
    const api = ext.isActive ? ext.exports : await ext.activate();
    const env = api?.environments?.getActiveEnvironmentPath(resource)?.path;
    if (env) return env;
    return api?.settings?.getExecutionDetails(resource)?.execCommand?.[0];
  } catch {
    return undefined;
  }
}

export async function findTrainerPython(extensionRoot: string, resource?: vscode.Uri): Promise<PythonSearch> {
  const configured = vscode.workspace.getConfiguration('searchAgent', resource).get<string>('pythonPath') || undefined;
  const fromExtension = await pythonExtensionInterpreter(resource);
  return findPython(pythonCandidates([configured, fromExtension], extensionRoot));
}
