import type { BackgroundJob } from '../kernel/background';
import { AUDIT_PRUNE_JOB } from '../kernel/job-names';
import { artifactSweeper } from '../modules/artifacts';
import { pruneAuditEvents } from '../modules/audit';
import { pruneAuthFailures } from '../modules/credentials';
import { claimJob, environmentJob, eventPruneJob, warmClaimJob } from '../modules/environments';
import { nodeJob, nodeProvider, warmJob } from '../modules/nodes';
import { shredJob } from '../modules/projects';
import { webhookJob, webhookPruneJob } from '../modules/webhooks';

/** Every periodic job of a Berth instance. */
export const backgroundJobs: BackgroundJob[] = [
  environmentJob(nodeProvider),
  claimJob,
  warmClaimJob(nodeProvider),
  nodeJob,
  eventPruneJob,
  warmJob,
  artifactSweeper,
  shredJob,
  webhookJob,
  webhookPruneJob,
  { name: 'auth-failures', intervalMs: 5 * 60_000, run: pruneAuthFailures },
  { name: AUDIT_PRUNE_JOB, intervalMs: 60 * 60_000, run: pruneAuditEvents },
];
