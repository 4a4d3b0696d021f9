import { artifactSweeper } from '../services/artifacts';
import { AUDIT_PRUNE_JOB, pruneAuditEvents } from '../services/audit';
import { pruneAuthFailures } from '../services/auth';
import { shredJob } from '../services/shredding';
import { webhookJob, webhookPruneJob } from '../services/webhooks';
import type { BackgroundJob } from './background';
import { builtinNodeJob } from './builtin-node';
import { claimJob, environmentJob, eventPruneJob } from './environment-job';
import { nodeJob, nodeProvider } from './remote-nodes';
import { warmJob } from './warm-job';

/** Every periodic job of a Berth instance. */
export const backgroundJobs: BackgroundJob[] = [
  environmentJob(nodeProvider),
  claimJob(nodeProvider),
  nodeJob,
  eventPruneJob,
  builtinNodeJob,
  warmJob,
  artifactSweeper,
  shredJob,
  webhookJob,
  webhookPruneJob,
  { name: 'auth-failures', intervalMs: 5 * 60_000, run: pruneAuthFailures },
  { name: AUDIT_PRUNE_JOB, intervalMs: 60 * 60_000, run: pruneAuditEvents },
];
