// Where an environment's files live on a node (the built-in hot pool uses the same layout under
// DATA_DIR/workspaces): the environment root is DIR/<environment id>/, and each template share's
// envPath is placed under it with the leading `/` stripped (`/workspace/src` -> DIR/<id>/workspace/src).
import path from 'node:path';

/** DIR/<environment id>. */
export function environmentRoot(dir: string, id: string): string {
  return path.join(dir, id);
}

/** The share's folder under an environment root: `envPath` with its leading `/` stripped. */
export function shareDir(root: string, envPath: string): string {
  return path.join(root, envPath.replace(/^\/+/, ''));
}
