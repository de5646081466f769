// A client that reads the plans of every statement a call runs (nested and trigger statements included) through
// auto_explain: JSON plans logged at NOTICE level to this connection only. The plan guard (postgres.plans) and the
// claim's plan-cache check (postgres.claimPlan) read plans so, not timings.
import pg from 'pg';

export interface LoggedPlan<P = unknown> {
  'Query Text': string;
  Plan: P;
  JIT?: unknown;
}

export interface PlanLoggingClient<P> {
  client: pg.Client;
  // Runs fn with auto_explain on for this connection; answers fn's result and the plans logged meanwhile.
  explained<T>(fn: () => Promise<T>): Promise<{ result: T; plans: LoggedPlan<P>[] }>;
}

export async function planLoggingClient<P = unknown>(
  url: string,
  applicationName: string,
): Promise<PlanLoggingClient<P>> {
  const plans: LoggedPlan<P>[] = [];
  const client = new pg.Client({ connectionString: url, application_name: applicationName });
  client.on('error', () => undefined); // a test failure reports it; nothing else uses this client
  client.on('notice', (n) => {
    const m = /^duration: [\d.]+ ms {2}plan:\n([\s\S]*)$/.exec(n.message ?? '');
    if (m) plans.push(JSON.parse(m[1]!) as LoggedPlan<P>);
  });
  await client.connect();
  const q = (sql: string) => client.query(sql);
  return {
    client,
    async explained(fn) {
      plans.length = 0;
      await q(`load 'auto_explain'`);
      await q(`set auto_explain.log_min_duration = 0`);
      await q(`set auto_explain.log_nested_statements = on`);
      await q(`set auto_explain.log_format = 'json'`);
      await q(`set auto_explain.log_level = 'notice'`);
      try {
        const result = await fn();
        return { result, plans: plans.splice(0) };
      } finally {
        await q(`set auto_explain.log_min_duration = -1`);
      }
    },
  };
}
