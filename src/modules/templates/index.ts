export { BUILT_IMAGE_PREFIX, builtOn, nodeBuildContext, nodeBuildDone, resumeNodeBuilds } from './builds';
export { type Catalog, loadCatalog, MAX_HARD_MS, type PoolSpec, type TemplateSpec, templateFromJson, warmSpecHash } from './catalog';
export {
  applyCatalog,
  authorizeTemplateChange,
  deleteTemplate,
  findTemplate,
  getTemplate,
  poolImages,
  poolOf,
  putTemplate,
  type TemplateView,
  templateLog,
} from './service';
export { templateInputOfTar } from './upload';
