// Keel's functions are written for READ COMMITTED: a claim's SKIP LOCKED, a heartbeat or a move that waited for a row
// lock re-reads the row once the other transaction commits. Under a default_transaction_isolation of REPEATABLE READ
// or SERIALIZABLE set by a DBA (ALTER DATABASE / ALTER ROLE … SET, the server's configuration, the URL's options) the same statements
// fail with 40001 "could not serialize access due to concurrent update" whenever they meet a concurrent writer: claims,
// heartbeats and progress writes in an error loop under any concurrency. So the pools that run them ask for READ
// COMMITTED as a startup option of every connection (it outranks the database's and the role's defaults, and comes
// after the user's own options, which otherwise still apply; a transaction that names its level still gets it).
// node-postgres takes the URL's options over the pool's own, and PGOPTIONS only when neither is given: the URL's or the
// pool's are passed on first; PGOPTIONS (libpq's variable, not a Keel setting) no longer reaches these sessions (put
// options in the URL), and the statement-timeout probe (jobStore.ts) connects the same way, so it reads what they get.
// DateStyle and IntervalStyle too: node-postgres parses a timestamptz or interval from its text only in the ISO and
// 'postgres' styles and asks for neither as it connects, so a database or login set to 'SQL, DMY' (a European default)
// read every time back as null or an Invalid Date: a job's times, the store's clock (maintenance's cutoffs, the
// scheduler's resume offset), schedules' last ticks (chaos hunt 6; test/engines/postgres.dateStyle.test.ts).
export const READ_COMMITTED_OPTION =
  '-c default_transaction_isolation=read\\ committed -c datestyle=iso,mdy -c intervalstyle=postgres';

export function readCommittedOptions(
  connectionString: string,
  ownOptions?: string,
): { connectionString: string; options: string } {
  let fromUrl: string | null = null;
  let cs = connectionString;
  try {
    const u = new URL(connectionString);
    fromUrl = u.searchParams.get('options');
    if (fromUrl !== null) {
      u.searchParams.delete('options');
      cs = u.toString();
    }
  } catch {
    // not a URL (node-postgres reads no options from it either)
  }
  const user = fromUrl ?? ownOptions;
  return { connectionString: cs, options: user ? `${user} ${READ_COMMITTED_OPTION}` : READ_COMMITTED_OPTION };
}
