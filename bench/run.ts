// npm run bench: every benchmark side by side in one run, ratios reported (timings on a shared 2-core box are noisy).
//   npm run bench                      jobs (20,000) and transfer (1,000,000 rows)
//   npm run bench -- --only jobs       one of them; --jobs N / --rows N to resize
//   npm run bench -- --pg-url URL      on that running server (an admin URL; or KEEL_BENCH_PG_URL), not the embedded one
import { parseArgs } from 'node:util';
import { runJobsBench } from './jobs.js';
import { runTransferBench } from './transfer.js';
import { PG_URL_OPTION, benchPgUrl } from './server.js';

const { values } = parseArgs({
  options: {
    only: { type: 'string' },
    jobs: { type: 'string', default: '20000' },
    rows: { type: 'string', default: '1000000' },
    ...PG_URL_OPTION,
  },
});
const pgUrl = benchPgUrl(values);
if (values.only && !['jobs', 'transfer'].includes(values.only)) {
  console.error(`--only must be jobs or transfer (got "${values.only}")`);
  process.exit(2);
}

const results: Record<string, unknown> = {};
if (!values.only || values.only === 'jobs') {
  console.error(
    `== jobs benchmark: ${values.jobs} no-op jobs through the processor on ${pgUrl ? 'the external' : 'embedded'} PostgreSQL`,
  );
  results.jobs = await runJobsBench({
    jobs: Number(values.jobs),
    hosts: 2,
    concurrency: 500,
    singleJobs: 2000,
    durable: true,
    pgUrl,
  });
}
if (!values.only || values.only === 'transfer') {
  console.error(`== transfer benchmark: ${values.rows} rows PostgreSQL -> PostgreSQL`);
  results.transfer = await runTransferBench({ rows: Number(values.rows), pgUrl, log: (s) => console.error(s) });
}
console.log(JSON.stringify(results, null, 2));
