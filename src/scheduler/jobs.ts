import { artifactSweeper } from '../services/artifacts';
import { shredJob } from '../services/shredding';
import type { BackgroundJob } from './background';
import { environmentJob, eventPruneJob, workspaceSweeper } from './hot-pool';
import { nodeJob, nodeProvider } from './remote-nodes';

/** Every periodic job of a Berth instance. */
export const backgroundJobs: BackgroundJob[] = [
  environmentJob(nodeProvider),
  nodeJob,
  eventPruneJob,
  workspaceSweeper,
  artifactSweeper,
  shredJob,
];
