// Where a sandbox agent may read and write: inside its folder, never in its own .berth, whatever
// links on the way say. The server refuses wiring that names such paths; this is the agent's own
// check, for links planted in the folder (a share folder that is a link to ~/.ssh).
import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { inAgentFolder } from '../protocol/agent-folder';

/** The real path of `p`: its longest existing prefix resolved through links, the rest appended. */
async function realPathOf(p: string): Promise<string> {
  const rest: string[] = [];
  for (let at = p; ; ) {
    try {
      return path.join(await realpath(at), ...rest.reverse());
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      const parent = path.dirname(at);
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || parent === at) throw error;
      rest.push(path.basename(at));
      at = parent;
    }
  }
}

/**
 * The absolute path of `rel` (relative to the agent's folder `dir`), resolved through links;
 * throws when it lands outside `dir` or inside its .berth folder.
 */
export async function confine(dir: string, rel: string): Promise<string> {
  const home = await realpath(dir);
  const real = await realPathOf(path.resolve(home, rel));
  const inside = path.relative(home, real);
  if (inside === '..' || inside.startsWith(`..${path.sep}`) || path.isAbsolute(inside)) {
    throw new Error(`${rel} leads outside the sandbox folder (to ${real}); refused`);
  }
  if (inAgentFolder(inside.split(path.sep).join('/'))) throw new Error(`${rel} leads into the agent's own folder; refused`);
  return real;
}
