// This machine's own addresses, watched for the egress guard (docs/environments.md, "Containers"):
// an egress environment reaches none of them, those the host gains while it runs included. `ip -o
// monitor address` says at once when they change (where `ip` is installed); a look every LOOK_MS
// catches whatever it missed or when it is not there.
import { type ChildProcess, spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import { networkInterfaces } from 'node:os';

const LOOK_MS = 5_000;

/** Link-local addresses: blocked as a whole in every egress environment (they include cloud metadata). */
export const LINK_LOCAL = ['169.254.0.0/16', 'fe80::/10'];

/** This machine's addresses but loopback and link-local, as prefixes: `192.0.2.2/32`, `fd00::2/128`. */
export function ownPrefixes(): string[] {
  return Object.values(networkInterfaces())
    .flat()
    .filter((a): a is NonNullable<typeof a> => Boolean(a) && !a!.internal)
    .filter((a) => !(a.family === 'IPv4' ? a.address.startsWith('169.254.') : /^fe[89ab]/i.test(a.address)))
    .map((a) => (a.family === 'IPv4' ? `${a.address}/32` : `${a.address}/128`));
}

/**
 * Hands every address the host gains to `added`, which answers whether it was applied everywhere
 * (when not, it is handed again at the next look). The first look hands all of them: what a node
 * adopts after a restart may have missed addresses gained meanwhile. `added` is called in the same
 * turn as the look that found them: a container it does not list was made after that look, and
 * reads the addresses itself (runtime.ts, guard).
 */
export class HostAddresses {
  private seen = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private monitor: ChildProcess | undefined;
  private stopped = false;

  constructor(
    private readonly added: (prefixes: string[]) => Promise<boolean>,
    private readonly log: (line: string) => void,
  ) {}

  /** Starts watching; nothing while watching, or once stopped. */
  start(): void {
    if (this.stopped || this.timer) return;
    this.timer = setInterval(() => this.look(), LOOK_MS);
    this.timer.unref();
    this.watch();
    this.look();
  }

  /** Stops for good: the timer and the monitor end, and start() does nothing. */
  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
    this.monitor?.kill();
    this.monitor = undefined;
  }

  private look(): void {
    const now = new Set(ownPrefixes());
    const fresh = [...now].filter((prefix) => !this.seen.has(prefix));
    this.seen = now;
    if (!fresh.length) return;
    this.added(fresh)
      .catch(() => false)
      .then((applied) => {
        if (!applied) for (const prefix of fresh) this.seen.delete(prefix);
      });
  }

  private watch(): void {
    const monitor = spawn('ip', ['-o', 'monitor', 'address'], { stdio: ['ignore', 'pipe', 'ignore'] });
    this.monitor = monitor;
    monitor.stdout.on('data', () => this.look());
    monitor.once('error', (error) => {
      if (this.monitor !== monitor) return;
      this.monitor = undefined;
      this.log(`cannot watch the host's addresses with ip (${error.message}): looking every ${LOOK_MS / 1000} s`);
    });
    monitor.once('exit', (code, signal) => {
      if (this.monitor !== monitor) return;
      this.monitor = undefined;
      this.log(`ip monitor ended (${signal ?? code}): looking at the host's addresses every ${LOOK_MS / 1000} s`);
    });
    // Neither keeps the process alive: the runtime's close() ends them, and so does the process.
    monitor.unref();
    (monitor.stdout as unknown as Socket).unref();
  }
}
