// What failed in a test suite's output, to print again after the summary (scripts/test-all.mjs).

/** The part of a failed suite's output that says what failed: mocha's "N failing" block, pytest's short test summary,
 * tsc's error lines; otherwise the last 40 lines. At most 120 lines. */
export function failureReport(output) {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips ANSI colour sequences
  const lines = output.replace(/\x1b\[[0-9;]*m/g, '').split(/\r?\n/);
  const cap = (ls) =>
    (ls.length > 120 ? [...ls.slice(0, 120), `  … ${ls.length - 120} more lines: the suite's output above`] : ls).join(
      '\n',
    );
  const mocha = lines.findIndex((l) => /^\s+\d+ failing\s*$/.test(l));
  if (mocha >= 0) return cap(lines.slice(mocha));
  const pytest = lines.findIndex((l) => /short test summary info/.test(l));
  if (pytest >= 0) return cap(lines.slice(pytest).filter((l) => l.trim()));
  const tsc = lines.filter((l) => /error TS\d+:/.test(l));
  if (tsc.length) return cap(tsc);
  return cap(lines.filter((l) => l.trim()).slice(-40));
}
