// The container engine a node drives: the Docker Engine API, spoken by dockerode, so Docker and
// Podman's Docker-compatible service both serve (docs/environments.md, "Engines").
//
// Every call that is not a stream is bounded (CALL_MS): an engine that hangs fails the one
// operation, with the engine named, instead of holding a lease or a command forever.
import { existsSync } from 'node:fs';
import { type Duplex, PassThrough, type Readable } from 'node:stream';
import type Dockerode from 'dockerode';
import { beforeDeadline } from '../kernel/deadline';
import { ContainerDeaths } from './container-deaths';

/** The most one engine call (not a stream) may take. Pulls are streams and are not bounded here. */
export const CALL_MS = 20_000;
/** How often a command's stream is checked against its exec's state (see exec()). */
const WATCH_MS = 5_000;

export interface ContainerUsage {
  /** CPU time used since it started, nanoseconds (null when the engine does not say). */
  cpuNs: number | null;
  memory: number | null;
  pids: number | null;
  /** Bytes of its writable layer. */
  writable: number;
}

export interface ContainerState {
  /** The container's full id. */
  id: string;
  running: boolean;
  /** Its first process's pid as the engine's machine numbers it (0 when not running). */
  pid: number;
  exitCode: number;
  oomKilled: boolean;
  labels: Record<string, string>;
  /** The container's addresses and the subnets of its networks (the egress guard blocks them). */
  subnets: string[];
  gateways: string[];
}

export interface ListedContainer {
  id: string;
  /** Its name now (a claimed warm container's differs from what its labels say: runtime.ts). */
  name: string;
  labels: Record<string, string>;
  running: boolean;
  /** It ran and ended (exited, stopped, dead), as opposed to one created but not started yet. */
  ended: boolean;
  /** It is on a network (egress), not on `none`. */
  networked: boolean;
}

export interface ExecOptions {
  cmd: string[];
  workdir?: string;
  privileged?: boolean;
  /** Who it runs as (a name, uid, `name:group`); absent: the container's user. */
  user?: string;
}

export interface RunningExec {
  /** The command's standard input; ending or destroying it is how envd learns the caller went away. */
  stdin: Duplex;
  stdout: PassThrough;
  stderr: PassThrough;
  /** Resolves when the engine's stream ends: the command's exit code (as the engine reports it). */
  exited: Promise<number>;
  /** Stops reading the engine's stream (the command blocks once the pipes between are full), and reads on. */
  pause(): void;
  resume(): void;
}

export interface ImageConfig {
  entrypoint: string[];
  cmd: string[];
  user: string;
}

export class EngineError extends Error {}

/** `unix:///path` or `tcp://host:port` (or a bare socket path) to dockerode's options. */
function connection(url: string): Dockerode.DockerOptions {
  if (url.startsWith('unix://')) return { socketPath: url.slice('unix://'.length) };
  if (url.startsWith('/')) return { socketPath: url };
  const m = /^tcp:\/\/([^:/]+|\[[^\]]+\]):(\d+)\/?$/.exec(url);
  if (m) return { host: m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]), protocol: 'http' };
  throw new EngineError(`not an engine address: ${url} (expected unix:///path/to/socket or tcp://host:port)`);
}

const within = <T>(what: string, work: Promise<T>): Promise<T> =>
  beforeDeadline(work, CALL_MS, () => new EngineError(`the engine did not answer ${what} within ${CALL_MS / 1000} s`));

/** A 404 from the engine, or Podman's 500 that says the same. */
export function isMissing(error: unknown): boolean {
  const e = error as { statusCode?: number; message?: string };
  return e?.statusCode === 404 || (e?.statusCode === 500 && /no such (container|image|exec)/i.test(e.message ?? ''));
}

/** The engine's own words for a failed call, without dockerode's "(HTTP code …)" preamble. */
export function engineMessage(error: unknown): string {
  const e = error as { json?: { message?: string }; message?: string };
  return (e?.json?.message ?? e?.message ?? String(error)).replace(/^\(HTTP code \d+\) [^-]*- /, '').trim();
}

/** Told of every engine call (but `wait`, which lasts as long as the container): `berth node`'s metrics. */
export type EngineObserver = (operation: string, seconds: number, outcome: 'ok' | 'error') => void;

export class Engine {
  observe: EngineObserver | undefined;
  /** Pulls under way, by reference (bounded by the references asked for: templates' images). */
  private readonly pulls = new Map<string, Promise<void>>();
  /** Every wait, on one stream of the engine's events (not the engine's own wait: container-deaths.ts says why). */
  private readonly deaths = new ContainerDeaths(
    {
      events: () => this.docker.getEvents({ filters: JSON.stringify({ type: ['container'] }) }) as Promise<Readable>,
      look: (name) => this.inspect(name),
    },
    (why) => new EngineError(why),
  );

  private constructor(
    readonly url: string,
    private readonly docker: Dockerode,
  ) {}

  /** Whether it is reached through a socket file of this machine (so its containers are likely this machine's processes). */
  get local(): boolean {
    return connection(this.url).socketPath !== undefined;
  }

  private async timed<T>(operation: string, work: () => Promise<T>): Promise<T> {
    if (!this.observe) return work();
    const started = process.hrtime.bigint();
    const seconds = () => Number(process.hrtime.bigint() - started) / 1e9;
    try {
      const result = await work();
      this.observe(operation, seconds(), 'ok');
      return result;
    } catch (error) {
      this.observe(operation, seconds(), 'error');
      throw error;
    }
  }

  /** Connects to the engine at `url` and checks that it answers. */
  static async open(url: string): Promise<Engine> {
    const { default: Docker } = await import('dockerode');
    const engine = new Engine(url, new Docker(connection(url)));
    try {
      await within('a ping', engine.docker.ping());
    } catch (error) {
      throw new EngineError(`no container engine answers at ${url}: ${engineMessage(error)}`);
    }
    return engine;
  }

  /**
   * Whether the engine answers a ping within `ms`: null when it does, else why not (the node is
   * degraded meanwhile: docs/agents.md, "Health").
   */
  async trouble(ms: number): Promise<string | null> {
    try {
      await beforeDeadline(this.docker.ping(), ms, () => new EngineError(`it did not answer a ping within ${ms / 1000} s`));
      return null;
    } catch (error) {
      return `the container engine ${this.url} does not answer: ${engineMessage(error)}`;
    }
  }

  /** The CPUs and memory (bytes) the engine runs containers on (a Podman machine's, not the host's). */
  async capacity(): Promise<{ cpus: number; memory: number }> {
    return this.timed('info', async () => {
      const info = (await within('an info', this.docker.info())) as { NCPU?: number; MemTotal?: number };
      return { cpus: Number(info.NCPU), memory: Number(info.MemTotal) };
    });
  }

  /** The image's command and user, pulling it first when the engine lacks it. */
  async image(ref: string): Promise<ImageConfig> {
    return this.timed('image', async () => {
      let info = await this.inspectImage(ref);
      if (!info) {
        await this.pullImage(ref);
        info = await this.inspectImage(ref);
        if (!info) throw new EngineError(`image ${ref} is missing right after its pull`);
      }
      const config = info.Config;
      return { entrypoint: toList(config.Entrypoint), cmd: toList(config.Cmd), user: config.User ?? '' };
    });
  }

  /** Whether the engine has the image (no pull). */
  async hasImage(ref: string): Promise<boolean> {
    return (await this.inspectImage(ref)) !== null;
  }

  private async inspectImage(ref: string): Promise<Dockerode.ImageInspectInfo | null> {
    try {
      return await within(`for image ${ref}`, this.docker.getImage(ref).inspect());
    } catch (error) {
      if (isMissing(error)) return null;
      throw error;
    }
  }

  /**
   * Pulls the image. A pull of the same reference already under way (the node's prepull, another
   * lease) is waited for rather than started again.
   */
  pullImage(ref: string): Promise<void> {
    let pulling = this.pulls.get(ref);
    if (!pulling) {
      pulling = this.pullOnce(ref).finally(() => this.pulls.delete(ref));
      this.pulls.set(ref, pulling);
    }
    return pulling;
  }

  private async pullOnce(ref: string): Promise<void> {
    const stream = await this.docker.pull(ref);
    await new Promise<void>((resolve, reject) => {
      this.docker.modem.followProgress(stream, (error: Error | null, events: { error?: string }[]) => {
        const failed = error?.message ?? events.find((e) => e.error)?.error;
        if (failed) reject(new EngineError(failed));
        else resolve();
      });
    });
  }

  /**
   * Builds an image from `context` (a tar) through the engine's build API, tagged `tag`, asking
   * for no network (a build's RUN steps run on the node, outside any environment's egress guard;
   * whether the engine honours it is NodeBuilds' netcheck) and no newer base than it holds. Each
   * line of the build's output goes to `output`; rejects with the build's error.
   */
  async build(
    context: NodeJS.ReadableStream,
    options: { tag: string; dockerfile: string; args: Record<string, string>; target?: string; memory?: number; nocache?: boolean },
    output: (line: string) => void,
  ): Promise<void> {
    const stream = await this.docker.buildImage(context, {
      t: options.tag,
      dockerfile: options.dockerfile,
      buildargs: options.args,
      ...(options.target ? { target: options.target } : {}),
      ...(options.memory ? { memory: options.memory } : {}),
      ...(options.nocache ? { nocache: true } : {}),
      networkmode: 'none',
      pull: false,
      rm: true,
      forcerm: true,
    } as Dockerode.ImageBuildOptions);
    await new Promise<void>((resolve, reject) => {
      this.docker.modem.followProgress(
        stream,
        (error: Error | null, events: { error?: string }[]) => {
          const failed = error?.message ?? events.find((e) => e.error)?.error;
          if (failed) reject(new EngineError(failed.trim()));
          else resolve();
        },
        (event: { stream?: string; error?: string; status?: string }) => {
          const text = event.stream ?? event.status ?? event.error;
          if (text) output(text);
        },
      );
    });
  }

  /** The tags of the engine's images under `prefix` (e.g. `localhost/berth-build/`). */
  async imagesUnder(prefix: string): Promise<string[]> {
    return this.timed('images', async () => {
      const images = await within('an image list', this.docker.listImages());
      return images.flatMap((i) => i.RepoTags ?? []).filter((tag) => tag.startsWith(prefix));
    });
  }

  /** Removes the image's tag (and the image once untagged); one a container uses stays (false). */
  async removeImage(ref: string): Promise<boolean> {
    return this.timed('image-remove', async () => {
      try {
        await within(`removing image ${ref}`, this.docker.getImage(ref).remove());
        return true;
      } catch (error) {
        if (isMissing(error)) return true;
        return false;
      }
    });
  }

  async create(spec: Dockerode.ContainerCreateOptions): Promise<string> {
    return this.timed('create', async () => {
      const container = await within('a create', this.docker.createContainer(spec));
      return container.id;
    });
  }

  async start(id: string): Promise<void> {
    return this.timed('start', async () => {
      await within('a start', this.docker.getContainer(id).start());
    });
  }

  /** Sends a signal; tried three times, as Podman sometimes refuses one to a container just started. */
  async signal(id: string, signal: string): Promise<void> {
    return this.timed('signal', async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await within('a kill', this.docker.getContainer(id).kill({ signal }));
        } catch (error) {
          if (attempt === 3 || isMissing(error)) throw error;
        }
      }
    });
  }

  /** Gives the container another name (the Docker API's rename, which Podman's serves too). */
  async rename(id: string, name: string): Promise<void> {
    return this.timed('rename', async () => {
      await within('a rename', this.docker.getContainer(id).rename({ name }));
    });
  }

  /** Removes the container, running or not; one that is already gone is no error. */
  async remove(id: string): Promise<void> {
    return this.timed('remove', async () => {
      try {
        await within('a remove', this.docker.getContainer(id).remove({ force: true, v: true }));
      } catch (error) {
        if (!isMissing(error)) throw error;
      }
    });
  }

  /** The container's state, or null when there is no such container. */
  async inspect(id: string): Promise<ContainerState | null> {
    return this.timed('inspect', async () => {
      let info: Dockerode.ContainerInspectInfo;
      try {
        info = await within('an inspect', this.docker.getContainer(id).inspect());
      } catch (error) {
        if (isMissing(error)) return null;
        throw error;
      }
      const networks = Object.values(info.NetworkSettings?.Networks ?? {});
      return {
        id: info.Id,
        running: info.State.Running,
        pid: info.State.Pid ?? 0,
        exitCode: info.State.ExitCode,
        oomKilled: info.State.OOMKilled,
        labels: info.Config?.Labels ?? {},
        subnets: networks.filter((n) => n.IPAddress).map((n) => `${n.IPAddress}/${n.IPPrefixLen}`),
        gateways: networks.map((n) => n.Gateway).filter((g): g is string => Boolean(g)),
      };
    });
  }

  /**
   * One-shot usage of a running container: CPU time used so far (ns), memory and processes now,
   * and the bytes of its writable layer (SizeRw). Null when there is no such container.
   */
  async usage(id: string): Promise<ContainerUsage | null> {
    return this.timed('usage', async () => {
      const container = this.docker.getContainer(id);
      try {
        const [stats, info] = await Promise.all([
          within('a stats', container.stats({ stream: false })),
          // `size` is passed on as ?size=1 (dockerode's types leave it out): Podman then fills SizeRw.
          within('an inspect', container.inspect({ size: true } as Dockerode.ContainerInspectOptions) as Promise<{ SizeRw?: number }>),
        ]);
        const count = (n: unknown) => (typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : null);
        return {
          cpuNs: count(stats.cpu_stats?.cpu_usage?.total_usage),
          memory: count(stats.memory_stats?.usage),
          pids: count(stats.pids_stats?.current),
          writable: count(info.SizeRw) ?? 0,
        };
      } catch (error) {
        if (isMissing(error)) return null;
        throw error;
      }
    });
  }

  /** Containers carrying every one of `labels`. */
  async list(labels: Record<string, string>): Promise<ListedContainer[]> {
    return this.timed('list', async () => {
      const filters = { label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) };
      const found = await within('a list', this.docker.listContainers({ all: true, filters }));
      return found.map((c) => ({
        id: c.Id,
        name: (c.Names?.[0] ?? '').replace(/^\//, ''),
        labels: c.Labels ?? {},
        running: c.State === 'running',
        ended: ['exited', 'stopped', 'dead'].includes(c.State),
        // Docker names `none` a network; Podman lists none.
        networked: Object.keys(c.NetworkSettings?.Networks ?? {}).some((n) => n !== 'none'),
      }));
    });
  }

  /**
   * Resolves with the exit code when the container ends (after a restart too: call it again);
   * rejects when there is no such container or the engine went away meanwhile.
   */
  wait(id: string): Promise<number> {
    return this.deaths.wait(id);
  }

  /** Starts a command in the container with its streams attached (stdin kept open). */
  async exec(id: string, options: ExecOptions): Promise<RunningExec> {
    return this.timed('exec', async () => {
      const exec = await within(
        'an exec',
        this.docker.getContainer(id).exec({
          Cmd: options.cmd,
          AttachStdin: true,
          AttachStdout: true,
          AttachStderr: true,
          Tty: false,
          WorkingDir: options.workdir,
          Privileged: options.privileged ?? false,
          ...(options.user ? { User: options.user } : {}),
        }),
      );
      const stream = (await within('an exec start', exec.start({ hijack: true, stdin: true }))) as unknown as Duplex;
      const stdout = new PassThrough();
      const stderr = new PassThrough();
      this.docker.modem.demuxStream(stream, stdout, stderr);
      // Podman now and then leaves an exec's stream open after the command ended: looked at every
      // WATCH_MS, such a stream is closed, so no caller waits for an end that never comes.
      const watchdog = setInterval(() => {
        exec.inspect().then(
          (info) => {
            if (!info.Running) stream.destroy();
          },
          () => undefined,
        );
      }, WATCH_MS);
      watchdog.unref();
      const exited = new Promise<number>((resolve, reject) => {
        let settled = false;
        const done = () => {
          if (settled) return;
          settled = true;
          clearInterval(watchdog);
          stdout.end();
          stderr.end();
          within('an exec inspect', exec.inspect()).then((info) => resolve(info.ExitCode ?? 255), reject);
        };
        stream.on('end', done);
        stream.on('close', done);
        // Every error, not only the first: a write after the engine closed the stream must not end the process.
        stream.on('error', done);
      });
      return { stdin: stream, stdout, stderr, exited, pause: () => stream.pause(), resume: () => stream.resume() };
    });
  }
}

function toList(value: string | string[] | null | undefined): string[] {
  if (!value) return [];
  return Array.isArray(value) ? value : [value];
}

/**
 * Which engine a node uses: `choice` (`--engine` or DOCKER_HOST) when given (`none`: no engine),
 * else the Docker socket, then Podman's, when they exist; null when there is none.
 */
export function engineAddress(choice: string | undefined): string | null {
  if (choice === 'none') return null;
  if (choice) return choice;
  for (const socket of ['/var/run/docker.sock', '/run/podman/podman.sock']) if (existsSync(socket)) return `unix://${socket}`;
  return null;
}
