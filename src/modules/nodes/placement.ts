// Placement by capacity (docs/agents.md, "Capacity and placement"): a node offers its capacity
// (its hello's: declared with `--capacity`, else its machine's less a reserve); what it has
// allocated is the CPU and memory limits of its live environments and of its warm containers
// (starting or ready). A lease or a warm container goes only where its limits fit what is free,
// so for every node allocated ≤ capacity. The claim (environments/claim.ts) and the warm job
// (warm-job.ts) both read a node's room under the node's advisory lock, taken in id order by both,
// so racing claims, warm jobs and instances never count the same room twice.

import { Prisma as P } from '../../generated/prisma/client';
import { LIVE_STATES } from '../../kernel/environment-states';
import { formatSize, parseSize } from '../../kernel/sizes';
import { lockSql, type Tx } from '../../platform/db';
import type { Capacity } from '../../protocol/capacity';

export const NOTHING: Capacity = { cpus: 0, memory: 0 };

/** A node's room: what it offers (null: it never said, and nothing is refused for it) and what is allocated. */
export interface Room {
  capacity: Capacity | null;
  used: Capacity;
}

/** What an environment or a warm container is allowed: its template's CPU and memory limits, 0 for one it lacks. */
export function needOf(resources: { cpus?: number | null; memory?: string | null } | null | undefined): Capacity {
  return { cpus: resources?.cpus ?? 0, memory: resources?.memory ? parseSize(resources.memory) : 0 };
}

/** What a slot's warm container is allocated: its limits while it is starting or ready, else NOTHING. */
export function warmAllocation(slot: { warmState: string | null; warmCpus: number | null; warmMemory: bigint | null }): Capacity {
  if (slot.warmState !== 'starting' && slot.warmState !== 'ready') return NOTHING;
  return { cpus: slot.warmCpus ?? 0, memory: Number(slot.warmMemory ?? 0) };
}

const plus = (a: Capacity, b: Capacity): Capacity => ({ cpus: a.cpus + b.cpus, memory: a.memory + b.memory });
// Hundredths of a CPU, as templates write them: 0.1 + 0.2 fits in 0.3.
const cents = (cpus: number) => Math.round(cpus * 100);

/**
 * Locks the nodes (in id order, as every caller does) and reads each one's room: its capacity,
 * and its live environments' and its warm containers' limits added up. Two statements: the locks,
 * then one read, whose snapshot (taken as it starts) follows the locks.
 */
export async function roomsOf(tx: Tx, nodeIds: Iterable<string>): Promise<Map<string, Room>> {
  const ids = [...new Set(nodeIds)].sort();
  const rooms = new Map<string, Room>();
  if (ids.length === 0) return rooms;
  const keys = ids.map((id) => `berth:node-room:${id}`);
  await tx.$executeRaw`SELECT ${lockSql(P.sql`k`)} FROM (SELECT k FROM unnest(${keys}::text[]) k ORDER BY k) sorted`;
  const rows = await tx.$queryRaw<RoomRow[]>`
    SELECT 'node' AS kind, id AS node, cpus, memory, NULL::jsonb AS resources, NULL AS "warmState"
      FROM "RemoteNode" WHERE id = ANY(${ids}::text[])
    UNION ALL
    SELECT 'environment', "nodeId", NULL, NULL, resources, NULL
      FROM "Environment" WHERE "nodeId" = ANY(${ids}::text[]) AND state = ANY(${[...LIVE_STATES]}::text[])
    UNION ALL
    SELECT 'warm', "remoteId", "warmCpus", "warmMemory", NULL, "warmState"
      FROM "Node" WHERE "remoteId" = ANY(${ids}::text[]) AND "environmentId" IS NULL AND "warmState" IN ('starting', 'ready')`;
  for (const n of rows) {
    if (n.kind !== 'node') continue;
    rooms.set(n.node, {
      capacity: n.cpus !== null && n.memory !== null ? { cpus: n.cpus, memory: Number(n.memory) } : null,
      used: NOTHING,
    });
  }
  for (const row of rows) {
    const room = rooms.get(row.node);
    if (!room || row.kind === 'node') continue;
    const used =
      row.kind === 'environment'
        ? needOf(row.resources as Parameters<typeof needOf>[0])
        : warmAllocation({ warmState: row.warmState, warmCpus: row.cpus, warmMemory: row.memory });
    room.used = plus(room.used, used);
  }
  return rooms;
}

/** One row of roomsOf's read: a node's capacity, a live environment's limits, or a warm container's. */
interface RoomRow {
  kind: 'node' | 'environment' | 'warm';
  node: string;
  cpus: number | null;
  memory: bigint | null;
  resources: unknown;
  warmState: string | null;
}

/** Whether `need` fits what `room` has free once `freed` (a warm container it replaces) is given back. */
export function fits(room: Room, need: Capacity, freed: Capacity = NOTHING): boolean {
  if (!room.capacity) return true;
  const cpus = cents(room.used.cpus) - cents(freed.cpus) + cents(need.cpus) <= cents(room.capacity.cpus);
  return cpus && room.used.memory - freed.memory + need.memory <= room.capacity.memory;
}

/** The share of its capacity a node keeps free after taking `need` (the scarcer of CPU and memory): placement prefers the most. */
export function headroom(room: Room, need: Capacity, freed: Capacity = NOTHING): number {
  if (!room.capacity) return 1;
  const left = (used: number, free: number, want: number, of: number) => (of - used + free - want) / of;
  return Math.min(
    left(room.used.cpus, freed.cpus, need.cpus, room.capacity.cpus),
    left(room.used.memory, freed.memory, need.memory, room.capacity.memory),
  );
}

/** Counts `need` as allocated on the room (a placement made in the same transaction). */
export function take(room: Room, need: Capacity, freed: Capacity = NOTHING): void {
  room.used = { cpus: room.used.cpus + need.cpus - freed.cpus, memory: room.used.memory + need.memory - freed.memory };
}

/** `1 CPU and 2GiB memory`, `0.5 CPUs`, `512MiB memory`: what a lease waits for. */
export function describeNeed(need: Capacity): string {
  const parts = [
    need.cpus > 0 ? `${need.cpus} CPU${need.cpus === 1 ? '' : 's'}` : '',
    need.memory > 0 ? `${formatSize(need.memory)} memory` : '',
  ].filter(Boolean);
  return parts.join(' and ');
}
