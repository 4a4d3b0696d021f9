export {
  type ArtifactLink,
  type ArtifactRecord,
  artifactSweeper,
  asIntegrityError,
  getArtifact,
  openArtifact,
  resolveLink,
  storeArtifact,
  sweepArtifacts,
  type UploadParams,
} from './service';
