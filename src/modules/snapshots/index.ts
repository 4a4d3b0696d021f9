export {
  openSnapshotShare,
  planRestore,
  purgeSnapshot,
  type RestorePlan,
  recordRestored,
  savedShares,
  saveSnapshotShare,
  snapshotVersionPrefix,
} from './service';
