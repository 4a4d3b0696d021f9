// A node's declared capacity as operators write it (docs/agents.md, "Capacity"):
// `cpus=8,memory=16GiB`, or either part alone, for `berth node --capacity` and the server's
// BUILTIN_CAPACITY (its built-in node's).
import { parseSize } from '../kernel/sizes';
import { MAX_NODE_CPUS, MAX_NODE_MEMORY } from './dataplane';

/** CPUs and memory (bytes): what a node offers, or what an environment is allowed. */
export interface Capacity {
  cpus: number;
  memory: number;
}

/** The parts of `text` it names; throws an Error saying what is wrong. */
export function parseCapacity(text: string): Partial<Capacity> {
  const declared: Partial<Capacity> = {};
  for (const part of text.split(',')) {
    const [key, value = ''] = part.split('=', 2).map((s) => s.trim());
    if (key === 'cpus' && declared.cpus === undefined) {
      const n = Number(value);
      if (!/^\d+$/.test(value) || n < 1 || n > MAX_NODE_CPUS) throw new Error(`cpus: must be an integer from 1 to ${MAX_NODE_CPUS}`);
      declared.cpus = n;
    } else if (key === 'memory' && declared.memory === undefined) {
      const bytes = parseSize(value, 'memory');
      if (bytes < 1 || bytes > MAX_NODE_MEMORY) throw new Error('memory: must be from 1B to 1024TiB');
      declared.memory = bytes;
    } else {
      throw new Error(`${JSON.stringify(part)}: expected cpus=N and/or memory=SIZE, each once, such as cpus=8,memory=16GiB`);
    }
  }
  return declared;
}
