// The background jobs' names, in one table: a module nudges another's job (a template change nudges
// the warm job, a new lease the claims job) without importing that module.

/** Prepares, times out and releases environments (src/modules/environments/job.ts). */
export const ENVIRONMENT_JOB = 'environments';
/** Claims queued leases apart from ENVIRONMENT_JOB's releases and preparations. */
export const CLAIM_JOB = 'environment-claims';
/** Readies the leases that took a warm container when they were created. */
export const WARM_CLAIM_JOB = 'environment-warm-claims';
/** Keeps templates' warm containers (src/modules/nodes/warm-job.ts). */
export const WARM_JOB = 'warm-containers';
/** Liveness and draining of nodes (src/modules/nodes/remote-nodes.ts). */
export const NODE_JOB = 'nodes';
export const SHRED_JOB = 'project-shredder';
export const AUDIT_PRUNE_JOB = 'audit-retention';
export const WEBHOOK_JOB = 'webhooks';
export const SWEEPER_JOB = 'artifact-sweeper';
