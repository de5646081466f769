// npm run bench: every benchmark side by side in one run, ratios reported (timings on a shared 2-core box are noisy).
import { parseArgs } from 'node:util';
import { runJobsBench } from './jobs.js';

const { values } = parseArgs({
  options: {
    only: { type: 'string' }, // jobs | transfer
    jobs: { type: 'string', default: '20000' },
    rows: { type: 'string', default: '1000000' },
  },
});

const results: Record<string, unknown> = {};
if (!values.only || values.only === 'jobs') {
  console.error('== jobs benchmark');
  results.jobs = await runJobsBench({ jobs: Number(values.jobs), hosts: 2, concurrency: 500, singleJobs: 2000, durable: true });
  console.log(JSON.stringify({ jobs: results.jobs }, null, 2));
}
