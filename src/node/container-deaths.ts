// When a node's containers end, from one stream of the engine's container events.
//
// A node waits on every container it holds for as long as it runs (an environment's, each warm
// one). Podman 4's Docker-compatible `POST /containers/{id}/wait` polls the container's state
// without a pause while it waits: 1.3 cores of the service for one waiting container, measured
// here (docs/benchmarks.md, "The engine's waits"), which every other process on the machine then
// lacks. The events stream costs nothing while nothing happens, and one serves every wait.
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';

/** What a death watch needs of the engine. */
export interface DeathSource {
  /** The engine's stream of events (`GET /events`, one JSON object per line), once it is open. */
  events(): Promise<Readable>;
  /** A container's full id, whether it runs and how it ended; null when there is none. */
  look(name: string): Promise<{ id: string; running: boolean; exitCode: number } | null>;
}

interface Waiter {
  resolve(code: number): void;
  reject(error: Error): void;
}

/** How many recent deaths are kept (for a wait whose look raced its container's death). */
const RECENT = 1024;

export class ContainerDeaths {
  private stream: Promise<Readable> | undefined;
  /** Pending waits by container id. */
  private readonly waiting = new Map<string, Set<Waiter>>();
  /** Deaths seen lately by container id: the exit code and when, in events seen. */
  private readonly recent = new Map<string, { code: number; seen: number }>();
  private seen = 0;

  constructor(
    private readonly source: DeathSource,
    private readonly failure: (why: string) => Error,
  ) {}

  /**
   * Resolves with the exit code once container `name` is not running (at once when it is not);
   * rejects when there is no such container, or when the engine's stream ends before it did (the
   * engine went away: the caller looks again, as after any lost watch).
   */
  async wait(name: string): Promise<number> {
    // The stream is open before the look, so a death after the look is on it.
    await this.open();
    const from = this.seen;
    const state = await this.source.look(name);
    if (!state) throw this.failure(`no such container: ${name}`);
    const died = this.recent.get(state.id);
    if (died && died.seen > from) return died.code;
    if (!state.running) return state.exitCode;
    return new Promise<number>((resolve, reject) => {
      const waiters = this.waiting.get(state.id) ?? new Set<Waiter>();
      this.waiting.set(state.id, waiters);
      waiters.add({ resolve, reject });
    });
  }

  private open(): Promise<Readable> {
    if (this.stream) return this.stream;
    const opening = this.source.events().then((stream) => {
      const lines = createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY });
      lines.on('line', (line) => this.event(line));
      let ended = false;
      const end = (why: string) => {
        if (ended) return;
        ended = true;
        if (this.stream === opening) this.stream = undefined;
        lines.close();
        stream.destroy();
        const error = this.failure(why);
        for (const waiters of this.waiting.values()) for (const w of waiters) w.reject(error);
        this.waiting.clear();
      };
      // readline passes its input's errors on: handled here, once, through the stream's own.
      lines.on('error', () => undefined);
      stream.on('error', (error) => end(`the engine's event stream failed: ${error.message}`));
      stream.once('close', () => end("the engine's event stream ended"));
      stream.once('end', () => end("the engine's event stream ended"));
      return stream;
    });
    this.stream = opening;
    opening.catch(() => {
      if (this.stream === opening) this.stream = undefined;
    });
    return opening;
  }

  private event(line: string): void {
    let event: { Type?: string; Action?: string; id?: string; Actor?: { ID?: string; Attributes?: Record<string, string> } };
    try {
      event = JSON.parse(line);
    } catch {
      return;
    }
    if (event.Type !== 'container' || event.Action !== 'die') return;
    const id = event.Actor?.ID ?? event.id;
    if (!id) return;
    const attributes = event.Actor?.Attributes ?? {};
    const stated = Number(attributes.exitCode ?? attributes.containerExitCode);
    const code = Number.isInteger(stated) ? stated : -1;
    this.seen++;
    this.recent.delete(id);
    this.recent.set(id, { code, seen: this.seen });
    if (this.recent.size > RECENT) this.recent.delete(this.recent.keys().next().value!);
    const waiters = this.waiting.get(id);
    if (!waiters) return;
    this.waiting.delete(id);
    for (const w of waiters) w.resolve(code);
  }
}
