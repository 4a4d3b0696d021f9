export { artifactData, emitEnvironmentState, emitWebhookEvent, environmentData, snapshotData } from './events';
export { nudgeWebhooks, webhookJob, webhookPruneJob } from './service';
