// The job store's statement timeout (docs/operations.md, "The job store's statement timeout"). The store's pool set
// statement_timeout = 60 s as a startup parameter of every connection, which outranks every setting a user can make:
// a role's or a database's (ALTER ROLE / ALTER DATABASE … SET) and the URL's own options=-c statement_timeout=….
// Now a timeout the user set anywhere applies, and Keel's 60 s only where none was set. The store's sessions are
// checked by what they do: a statement longer than the user's timeout is cancelled by the server. A setting the user
// makes or removes while the store runs reaches the connections the pool opens after it (Keel's default is set per
// connection, only where the session got none; as a startup parameter it outranked the user's until a restart).
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  PostgresJobStore,
  STORE_STATEMENT_TIMEOUT_MS,
  storeStatementTimeout,
} from '../../shared/engines/postgres/jobStore.js';
import { appUrl, createTestDatabase } from '../support/pg.js';
import { withClient, withLogin } from '../../dev/pgAdmin.js';

let url = ''; // the schema owner's
let db = '';
const login = `keel_st_${randomBytes(4).toString('hex')}`; // a login of its own: ALTER ROLE reaches every database
const password = randomBytes(12).toString('hex');
const admin = (sql: string) => withClient(url, (c) => c.query(sql));

beforeAll(async () => {
  url = await createTestDatabase('stmt_timeout');
  db = decodeURIComponent(new URL(url).pathname.slice(1));
  const store = await PostgresJobStore.connect(appUrl(url), { poolSize: 1, migrateUrl: url });
  await store.close();
  await admin(`create role ${login} login password '${password}' in role keel_executor`);
});

afterAll(async () => {
  if (url) await admin(`drop role if exists ${login}`);
});

// The store's session: its statement_timeout, and whether a 1.5 s statement is cancelled by it.
async function session(storeUrl: string): Promise<{ setting: string; slowCancelled: boolean }> {
  const store = await PostgresJobStore.connect(storeUrl, { poolSize: 1, migrate: false });
  try {
    await store.getJob('1'); // a job call, through the pool every call uses
    const setting = (await store.pool.query<{ v: string }>(`select current_setting('statement_timeout') as v`)).rows[0]!
      .v;
    const slow = await store.pool.query('select pg_sleep(1.5)').then(
      () => null,
      (err: unknown) => err as Error,
    );
    if (slow && !/statement timeout/.test(slow.message)) throw slow;
    return { setting, slowCancelled: slow !== null };
  } finally {
    await store.close();
  }
}

const withOptions = (u: string, options: string) => {
  const x = new URL(u);
  x.searchParams.set('options', options);
  return x.toString();
};

describe("the job store's statement timeout", () => {
  it("is Keel's 60 s where the user set none", async () => {
    expect(await storeStatementTimeout(appUrl(url), 'keel-test')).toEqual({
      ms: STORE_STATEMENT_TIMEOUT_MS,
      source: 'keel',
    });
    expect(await session(appUrl(url))).toEqual({ setting: '1min', slowCancelled: false });
  });

  it("a role's own (ALTER ROLE … SET statement_timeout) applies", async () => {
    await admin(`alter role ${login} set statement_timeout = 700`);
    try {
      const own = withLogin(url, login, password);
      expect(await storeStatementTimeout(own, 'keel-test')).toEqual({ ms: 700, source: 'user' });
      expect(await session(own)).toEqual({ setting: '700ms', slowCancelled: true });
    } finally {
      await admin(`alter role ${login} reset statement_timeout`);
    }
  });

  it("the app login's in this database (ALTER ROLE … IN DATABASE … SET) applies, and so does the database's", async () => {
    await admin(`alter database ${db} set statement_timeout = 800`);
    try {
      expect(await session(appUrl(url))).toEqual({ setting: '800ms', slowCancelled: true });
      const app = decodeURIComponent(new URL(appUrl(url)).username);
      await admin(`alter role ${app} in database ${db} set statement_timeout = 900`);
      try {
        expect(await storeStatementTimeout(appUrl(url), 'keel-test')).toEqual({ ms: 900, source: 'database user' });
        expect(await session(appUrl(url))).toEqual({ setting: '900ms', slowCancelled: true });
      } finally {
        await admin(`alter role ${app} in database ${db} reset statement_timeout`);
      }
    } finally {
      await admin(`alter database ${db} reset statement_timeout`);
    }
  });

  it("a role's setting made (or removed) while the store runs applies to the store's new connections", async () => {
    // A running store's pool opens connections as it needs them (and again after a connection is lost): each must
    // run under the user's setting as it is then, not as it was when the store opened.
    const own = withLogin(url, login, password);
    const store = await PostgresJobStore.connect(own, { poolSize: 1, migrate: false });
    const fresh = async () => {
      // The store's connection ends (as a network cut or a server restart ends it); its next call opens another.
      await admin(`select pg_terminate_backend(pid) from pg_stat_activity where usename = '${login}'`);
      for (let i = 0; i < 50; i++) {
        const ok = await store.getJob('1').then(
          () => true,
          () => false,
        );
        if (ok) break;
      }
      const setting = (await store.pool.query<{ v: string }>(`select current_setting('statement_timeout') as v`))
        .rows[0]!.v;
      const slow = await store.pool.query('select pg_sleep(1.5)').then(
        () => null,
        (err: unknown) => err as Error,
      );
      if (slow && !/statement timeout/.test(slow.message)) throw slow;
      // The client's own bound of the connection's calls: 5 s past the session's timeout, none without one.
      const client = await store.pool.connect();
      const bound = (client as unknown as { connectionParameters: { query_timeout?: number } }).connectionParameters
        .query_timeout;
      client.release();
      return { setting, slowCancelled: slow !== null, bound };
    };
    try {
      expect(await fresh()).toEqual({ setting: '1min', slowCancelled: false, bound: 65_000 }); // none set: Keel's
      await admin(`alter role ${login} set statement_timeout = 700`);
      expect(await fresh()).toEqual({ setting: '700ms', slowCancelled: true, bound: 5_700 }); // set since: the user's
      await admin(`alter role ${login} set statement_timeout = 0`);
      expect(await fresh()).toEqual({ setting: '0', slowCancelled: false, bound: 0 }); // none, as the user asked
      await admin(`alter role ${login} reset statement_timeout`);
      expect(await fresh()).toEqual({ setting: '1min', slowCancelled: false, bound: 65_000 }); // removed: Keel's
    } finally {
      await admin(`alter role ${login} reset statement_timeout`);
      await store.close();
    }
  });

  it("the URL's options=-c statement_timeout=… applies, a longer one too, and 0 (none) is none", async () => {
    const short = withOptions(appUrl(url), '-c statement_timeout=600');
    expect(await storeStatementTimeout(short, 'keel-test')).toEqual({ ms: 600, source: 'client' });
    expect(await session(short)).toEqual({ setting: '600ms', slowCancelled: true });
    const long = withOptions(appUrl(url), '-c statement_timeout=120s');
    expect(await session(long)).toEqual({ setting: '2min', slowCancelled: false });
    const none = withOptions(appUrl(url), '-c statement_timeout=0');
    expect(await storeStatementTimeout(none, 'keel-test')).toEqual({ ms: 0, source: 'client' });
    expect(await session(none)).toEqual({ setting: '0', slowCancelled: false });
  });
});
