export { attachSession, commandEnvironment, execRecord, runCommand, startCommand } from './exec';
export { claimJob, environmentJob, eventPruneJob, warmClaimJob } from './job';
export { appendEnvironmentLog, readEnvironmentLog } from './log';
export {
  authorizePreview,
  PREVIEW_COOKIE,
  PREVIEW_LINK_PATH,
  type PreviewHost,
  type PreviewTarget,
  parsePreviewHost,
} from './previews';
export { activityRecorder, authorizeRelay, recordOutSynced, recordRelayed } from './relay';
export { environmentEnds } from './service';
export { endSessionsNotRunning, recordSessionAttached, recordSessionEnd, sessionActivity } from './sessions';
export { recordUsage } from './usage';
