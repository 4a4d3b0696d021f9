export {
  actsForEveryOrg,
  BUILTIN_NAME,
  builtinEngine,
  builtinIdentity,
  dropBuiltinToken,
  ensureBuiltinNode,
  mintBuiltinToken,
} from './builtin-node';
export { describeNeed, fits, headroom, NOTHING, needOf, type Room, roomsOf, warmAllocation } from './placement';
export { type NodeProvider, startBound } from './provider';
export { nodeJob, nodeProvider } from './remote-nodes';
export {
  nodeEngine,
  nodeEnvironmentEnded,
  nodeHeartbeat,
  nodeHello,
  nodeImagesHeld,
  nodeLeaving,
  nodeOpenArchive,
  nodeRecordRestored,
  nodeRestorePlan,
  nodeSaveShare,
} from './service';
export { NODE_TAKES_WORK } from './takes-work';
export { NO_WARM, nodeWarmFailed, nodeWarmHeld, nodeWarmReady, type WarmFailure, warmJob } from './warm-job';
