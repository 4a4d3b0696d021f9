// A process's CPU time as Linux counts it, for the benchmarks that report another process's cost.
import { readFile } from 'node:fs/promises';

/** Linux's USER_HZ: /proc/<pid>/stat counts CPU time in these. */
const TICKS_PER_SECOND = 100;

/** CPU seconds (user + system, every thread) process `pid` has used so far, from /proc/<pid>/stat. */
export async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which is in parentheses and may hold both): utime is the 14th
  // field, stime the 15th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
}
