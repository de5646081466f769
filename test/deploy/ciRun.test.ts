// .ci/run is what CI executes on every landing: a syntax error in it fails the landing after every test has passed
// (an apostrophe inside its single-quoted summary script once did). Checked here without running it: `bash -n`, and
// its closing summary run on made-up vitest reports (what CI's reader sees of a failure).
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const CI_RUN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../.ci/run');

// The node script between `if ! node -e '` and `'; then`.
function summaryScript(): string {
  const text = readFileSync(CI_RUN, 'utf8');
  const start = text.indexOf("if ! node -e '\n");
  const end = text.indexOf("\n'; then", start);
  expect(start, 'the summary script of .ci/run').toBeGreaterThan(0);
  return text.slice(start + "if ! node -e '\n".length, end);
}

describe('.ci/run', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'keel-ci-run-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const report = (file: string, body: object) => writeFileSync(path.join(dir, '.tmp', file), JSON.stringify(body));
  const summarise = () =>
    spawnSync(process.execPath, ['-e', summaryScript()], { cwd: dir, encoding: 'utf8', timeout: 30_000 });

  it('parses as bash', () => {
    const r = spawnSync('bash', ['-n', CI_RUN], { encoding: 'utf8', timeout: 30_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('summarises both runs: each failed test with its message up to the stack, a failed teardown counted', () => {
    mkdirSync(path.join(dir, '.tmp'), { recursive: true });
    report('vitest-results.json', {
      numPassedTests: 3,
      numFailedTests: 1,
      numPendingTests: 2,
      testResults: [
        {
          name: path.join(dir, 'test/a.test.ts'),
          status: 'failed',
          message: '',
          assertionResults: [
            {
              status: 'failed',
              fullName: 'chaos run',
              failureMessages: [
                "Error: chaos: 1 problem(s): the job's lease\nsecond line\n    at run (a.ts:1:1)\n    at x",
              ],
            },
          ],
        },
      ],
    });
    report('vitest-results-stock.json', { numPassedTests: 4, numFailedTests: 0, numPendingTests: 0, testResults: [] });
    writeFileSync(
      path.join(dir, '.tmp/vitest-results-stock.json.teardown'),
      'the server logged 1 "deadlock detected"\n',
    );
    const r = summarise();
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(
      "failed on embedded: test/a.test.ts > chaos run: Error: chaos: 1 problem(s): the job's lease / second line\n",
    );
    expect(r.stdout).not.toContain('a.ts:1:1');
    expect(r.stdout).toContain('run failed on stock after its tests: the server logged 1 "deadlock detected"');
    expect(r.stdout.trim().split('\n').at(-1)).toBe('tests: 7 passed, 2 failed, 2 skipped');
  });

  it('fails when a run wrote no report', () => {
    rmSync(path.join(dir, '.tmp/vitest-results-stock.json'));
    const r = summarise();
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('no readable report for stock');
  });
});
