export { commandEnvironment, execRecord, runCommand, startCommand } from './exec';
export { claimJob, environmentJob, eventPruneJob } from './job';
export { activityRecorder, authorizeRelay, recordOutSynced, recordRelayed } from './relay';
export { environmentEnds } from './service';
export { recordUsage } from './usage';
