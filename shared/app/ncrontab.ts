// NCRONTAB for the composition root and dev/: the one parser, in the domain layer (shared/jobs/ncrontab.ts) so that
// defineSchedule, the settings and the transfer config read schedules exactly as the timers fire them.
export * from '../jobs/ncrontab.js';
