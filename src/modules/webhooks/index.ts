export {
  artifactData,
  emitWebhookEvent,
  environmentData,
  environmentStateDeliveries,
  snapshotData,
  webhookDeliveries,
} from './events';
export { nudgeWebhooks, webhookJob, webhookPruneJob } from './service';
