/**
 * Root hooks for the e2e suite: one code-server session for all tests (starting one takes ~10 s); for every failed
 * attempt of a test (a failing test is run once more: .mocharc.json `retries`, reporter.cjs says so), each live
 * session's screenshot and logs saved under .e2e-artifacts/ and a digest of them printed (CI keeps only the output);
 * everything stopped at the end.
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
    // A failed attempt that mocha runs again (.mocharc.json retries) has no state yet; the reporter printed its error.
    if (!test || test.state === 'passed' || test.isPending()) return;
    const sessions = [...CodeServerSession.live];
    for (const [i, s] of sessions.entries()) {
      const dir = await s.saveArtifacts(`${sessions.length > 1 ? `${i + 1} ` : ''}${test.fullTitle()}`);
      console.log(`      artifacts: ${dir}`);
      console.log(await s.digest());
    }
  },
  async afterAll() {
    await shared?.stop();
    shared = undefined;
  },
};
