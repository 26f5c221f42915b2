/**
 * Root hooks for the e2e suite: one code-server session for all tests (starting one takes ~10 s), a
 * screenshot plus the extension host's log saved for every failing test, and everything stopped at the end.
 * Tests that need another session (untrusted workspace, …) start their own with CodeServerSession.start.
 */
import type { Context } from 'mocha';
import { CodeServerSession } from './harness';

let shared: CodeServerSession | undefined;

/** The session shared by the suite (started on first use). */
export async function session(): Promise<CodeServerSession> {
  return (shared ??= await CodeServerSession.start());
}

export const mochaHooks = {
  async afterEach(this: Context) {
    const test = this.currentTest;
    if (test?.state === 'failed' && shared) {
      const dir = await shared.saveArtifacts(test.fullTitle());
      console.log(`      artifacts: ${dir}`);
    }
  },
  async afterAll() {
    await shared?.stop();
    shared = undefined;
  },
};
