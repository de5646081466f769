import { ncrontab } from '/work/wt-localhost/shared/app/ncrontab.ts';
const p = (e: string, tz = 'UTC', from = '2026-12-01T00:00:00Z', n = 3) => { try { console.log(e, tz, ncrontab(e, tz).nextN(n, new Date(from)).map(d=>d.toISOString())); } catch (err) { console.log(e, 'ERR', (err as Error).message); } };
p('0 0 9 1 * 1'); p('*/15 * * * * *'); p('0 30 2 * * *', 'America/New_York', '2026-03-07T00:00:00Z'); p('0 30 1 * * *', 'America/New_York', '2026-10-31T00:00:00Z');
p('0 0 0 29 2 1', 'UTC', '2026-01-01T00:00:00Z', 2); p('0 0 0 30 2 *'); p('0 0 0 * * 7'); p('0 0 0 L * *'); p('0 0 0 * * 5#2'); p('0 0 0 15W * *'); p('0 0 0 ? * *'); p('0 0 0 * * MON-fri'); p('0 0 0 * * W'); p('0 0 0 * JAN,Jul *'); p('0 0 0 * * 5-2'); p('5/20 * * * * *'); p('* * * * *'); p('0  0 0 * * *');
console.log(ncrontab('0 0 * * * *','UTC').previousN(3, new Date('2026-12-01T05:00:00Z')).map(d=>d.toISOString()));
console.log(ncrontab('0 0 9 1 * 1','UTC').previousN(2, new Date('2027-03-01T09:00:00.001Z')).map(d=>d.toISOString()));
console.log(ncrontab('0 0 9 * * *').nextN(2, new Date('2026-12-01T00:00:00Z')).map(d=>d.toString()));
const t0=Date.now(); for (let i=0;i<1000;i++) ncrontab('* * * * * *','Europe/Paris').nextN(10); console.log('ms', Date.now()-t0);
