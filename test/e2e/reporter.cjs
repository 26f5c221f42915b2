// Mocha's spec reporter, saying when an e2e test failed and is run once more (.mocharc.json `retries`), and why it
// failed: without this a test that passed on its second attempt would look like any other pass.
'use strict';
const Mocha = require('mocha');
const Spec = Mocha.reporters.Spec;
const { EVENT_TEST_RETRY } = Mocha.Runner.constants;

class SpecWithRetries extends Spec {
  constructor(runner, options) {
    super(runner, options);
    runner.on(EVENT_TEST_RETRY, (test, err) => {
      const first = String(err?.message ?? err)
        .split('\n')
        .slice(0, 3)
        .join(' / ');
      console.log(`    ↻ attempt ${test.currentRetry() + 1} failed, running it again: ${test.title}\n      ${first}`);
    });
  }
}

module.exports = SpecWithRetries;
