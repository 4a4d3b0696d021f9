// What a node offers to the environments placed on it (docs/agents.md, "Capacity"): what the
// operator declared (`berth node --capacity cpus=N,memory=SIZE`, which may exceed the machine:
// over-commit is the operator's call), else the machine's (its engine's, else the host's) less a
// memory reserve for the engine, the agent and the system.
import { GIB } from '../kernel/sizes';
import type { Capacity } from '../protocol/capacity';

/** The memory a node keeps for itself: a tenth of the machine's, at most 1 GiB. */
export function memoryReserve(memory: number): number {
  return Math.min(GIB, Math.floor(memory / 10));
}

/** The capacity a node says in its hello: each declared part, else the machine's (memory less the reserve). */
export function nodeCapacity(machine: Capacity, declared: Partial<Capacity> = {}): Capacity {
  return {
    cpus: declared.cpus ?? machine.cpus,
    memory: declared.memory ?? machine.memory - memoryReserve(machine.memory),
  };
}
