// Where an environment's files live on the machine that serves it, the same on a remote node
// (`berth node --dir DIR`) and on the built-in node (DATA_DIR/workspaces): the environment's
// root is `<dir>/<environment id>/`, and each template share's `envPath` is placed under it with
// the leading `/` stripped (`/workspace/src` → `<dir>/<id>/workspace/src`).
import path from 'node:path';

/** An environment id as the server makes them (`env_` and base62): never a path of its own. */
const ENVIRONMENT_ID = /^env_[A-Za-z0-9]{1,64}$/;

/** The environment's root folder under `dir`. */
export function environmentRoot(dir: string, id: string): string {
  if (!ENVIRONMENT_ID.test(id)) throw new Error(`not an environment id: ${JSON.stringify(id)}`);
  return path.join(dir, id);
}

/** Where a share with this `envPath` (absolute, normalized, no `..`: src/modules/templates/catalog.ts checks) lives under `root`. */
export function shareDir(root: string, envPath: string): string {
  const rel = path.posix.normalize(envPath).replace(/^\/+/, '');
  if (rel === '' || rel === '.' || rel === '..' || rel.startsWith('../')) throw new Error(`not a share path: ${JSON.stringify(envPath)}`);
  return path.join(root, ...rel.split('/'));
}
