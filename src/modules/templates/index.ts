export { type Catalog, loadCatalog, MAX_HARD_MS, type PoolSpec, type TemplateSpec, templateFromJson, warmSpecHash } from './catalog';
export { applyCatalog, findTemplate, poolImages, poolOf } from './service';
