// The node runtime (docs/environments.md, "Nodes"), run by `berth node`: on a build machine, and as
// the built-in node beside the server (src/app/builtin-supervisor.ts). For each environment it holds the share
// folders under `dir` (src/dataplane/layout.ts) and, when the environment has an image and the node
// an engine, one container, created from the image with the template's limits:
//
// - named `berth-<environment id>`, labelled berth.environment / berth.template / berth.organization
//   and berth.owner (which node made it: a node only ever touches its own containers);
// - the engine's default capabilities minus DROPPED_CAPABILITIES, no-new-privileges, memory with
//   swap equal to memory, a CPU quota, a pids limit;
// - nothing of the host mounted but its share folders (at their envPath) and, read-only, the folder
//   holding berth-envd alone (at /.berth: a mount point, so nothing inside can replace it);
// - berth-envd as PID 1: the image's own command starts only after the node's go, which comes
//   once the egress guard is in place.
//
// Commands and service tunnels run through berth-envd inside the container (`serve`, over one line
// per container held open by src/node/envd-channel.ts, and the node's standing `dialer` in its
// network namespace, src/node/netns-dial.ts, or `dial`), never on the node: the node cannot be made
// to dial its own or another host's addresses.
import { existsSync } from 'node:fs';
import { lstat, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import type Dockerode from 'dockerode';
import { chownTree, removeTree } from '../dataplane/beneath';
import { environmentRoot, shareDir } from '../dataplane/layout';
import { formatSize, parseSize } from '../kernel/sizes';
import { BERTH_STEP } from '../protocol/environment-log';
import type { Command, SessionOptions } from './command';
import { DiskCount } from './disk-count';
import { type Engine, engineMessage, isMissing, type RunningExec } from './engine';
import { EnvdChannel } from './envd-channel';
import { goReady } from './first-process';
import { HostAddresses, LINK_LOCAL, ownPrefixes } from './host-addresses';
import {
  boundedLog,
  CREATE_PHASES,
  LIFECYCLE_PHASES,
  type LifecycleCommand,
  type LogPiece,
  type LogSink,
  runLifecycle,
  START_PHASES,
} from './lifecycle';
import { dialInNamespace, stopDialer, stopDialers } from './netns-dial';

/**
 * The folder mounted read-only at /.berth in every container: berth-envd alone, as `envd`
 * (scripts/build-envd.mjs builds it); BERTH_ENVD_DIR overrides. A mount point, /.berth cannot be
 * renamed, replaced or unmounted from inside: the node always runs its own berth-envd.
 */
export const ENVD_DIR = process.env.BERTH_ENVD_DIR ?? fileURLToPath(new URL('../../dist/envd', import.meta.url));
export const ENVD_BINARY = join(ENVD_DIR, 'envd');
/** Where ENVD_DIR is mounted, and berth-envd is, inside every container. */
const ENVD_PLACE = '/.berth';
export const ENVD_PATH = `${ENVD_PLACE}/envd`;
/** berth-envd init's exit when the image's /.berth is not a folder (a link would move the mount away). */
const ENVD_MISPLACED = 120;

export const DROPPED_CAPABILITIES = ['SYS_ADMIN', 'NET_ADMIN', 'SYS_MODULE', 'SYS_RAWIO', 'SYS_PTRACE', 'NET_RAW', 'SYS_TIME', 'MKNOD'];
/** The pids limit of a template that sets none: a fork storm stops here, not at the node's limit. */
export const DEFAULT_PIDS = 4096;
/**
 * Open files and processes per container. Engines ask for more than these machines allow by default
 * (Podman asks for 1048576 open files and fails to start the container); pids bound processes.
 */
const ULIMITS = [
  { Name: 'nofile', Soft: 1024, Hard: 8192 },
  { Name: 'nproc', Soft: 16384, Hard: 16384 },
];

export type RuntimeKind = 'container' | 'files';

/** One sample of an environment's usage (src/modules/environments/usage.ts); null: not measured. */
export interface NodeUsage {
  cpu: number | null;
  memory: number | null;
  pids: number | null;
  disk: number;
}

/** Environments sampled at once. */
const SAMPLED_AT_ONCE = 8;
/** Lines to berth-envd an exec opens at most before it gives up (docs/environments.md, "Commands"). */
const LINE_TRIES = 3;
/** How long a tunnel through the engine cut short has to end inside its environment before its stream is closed regardless. */
const DIAL_WIND_DOWN_MS = 5_000;
/** In the node's folder: a note per claimed warm container not yet renamed (NodeRuntime.claimNote). */
const CLAIMS_DIR = 'claims';
const ENVIRONMENT_FOLDER = /^env_[A-Za-z0-9]{1,64}$/;
/** The output of a warm container's create phases kept until a lease claims it, at most. */
export const WARM_LOG_MAX = 256 * 1024;
/** A user that is root: shares stay the node's (root's) for it. */
const ROOT_USER = /^(|root|0)(:.*)?$/;
/** The label naming who commands run as (a line opened after a restart runs as it too). */
const USER_LABEL = 'berth.user';

export interface EnvironmentSpec {
  id: string;
  /** Its hostname inside the container. */
  name: string;
  orgId: string;
  template: string;
  shares: { name: string; envPath: string }[];
  image: string | null;
  resources: { cpus?: number; memory?: string; pids?: number; disk?: string };
  network: 'none' | 'egress';
  workdir: string;
  env: Record<string, string>;
  /** Who its commands, sessions and lifecycle commands run as; absent: the container's user. */
  user?: string;
  /** The user of the container's own command (its `User`); absent: the image's. */
  containerUser?: string;
  /** Run inside as `user` in `workdir` (src/node/lifecycle.ts): the create phases when its container is made, postStart when it starts. */
  lifecycle: LifecycleCommand[];
}

/** A warm container of a template, kept by one slot (src/modules/nodes/warm-job.ts). */
export interface WarmSpec extends Omit<EnvironmentSpec, 'id'> {
  slot: string;
  pool: string;
  /** warmSpecHash of the template: a lease claims it only with the same. */
  hash: string;
}

/** A slot's warm container, as the node found it (reconcile). */
export interface FoundWarm {
  slot: string;
  hash: string;
  running: boolean;
}

export interface RuntimeOptions {
  /** null: no engine, environments hold files only. */
  engine: Engine | null;
  /** Where environment roots live. */
  dir: string;
  /** Which node this is, on every container it makes (label berth.owner). */
  owner: string;
  log: (line: string) => void;
}

export class NoRuntimeError extends Error {}

export const containerName = (id: string) => `berth-${id}`;
/** One per slot; claimed, it takes its environment's name (containerName). */
export const warmContainerName = (slot: string) => `berth-warm-${slot}`;
const WARM_SLOT = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const WARM_NAME = /^berth-warm-(.+)$/;
const CLAIMED_NAME = /^berth-(env_[A-Za-z0-9]{1,64})$/;

export class NodeRuntime {
  /** Containers this node is removing itself: their end is no failure. */
  private readonly removing = new Set<string>();
  private readonly watched = new Set<string>();
  /** Environments whose container this node made or found, until it removes it: one missing from the engine went behind its back. */
  private readonly withContainer = new Set<string>();
  /**
   * Each container's line to berth-envd `serve`, which every command goes through
   * (src/node/envd-channel.ts), by the container's name.
   */
  private readonly lines = new Map<string, Promise<EnvdChannel>>();
  /** Who the commands of each container this process made or looked at run as (its template's `user`), by the container's name. */
  private readonly users = new Map<string, string | undefined>();
  /** The output of each warm container's create phases, by slot, until a claim hands it to its environment's log. */
  private readonly warmLogs = new Map<string, LogPiece[]>();
  /** The node's own addresses, watched once it holds an egress container: each it gains is blocked in all of them. */
  private readonly addresses = new HostAddresses(
    (prefixes) => this.blockEverywhere(prefixes),
    (line) => this.options.log(line),
  );

  /** A container ended on its own (its main process died, or was killed for memory). */
  onEnded: (id: string, reason: string) => void = () => undefined;
  /** A warm container's command ended on its own (it was neither removed nor claimed): its slot. */
  onWarmEnded: (slot: string) => void = () => undefined;
  /** The warm containers watched, by slot: which watch (a slot made again is watched anew). */
  private readonly warmWatches = new Map<string, symbol>();
  /** The spec hash of each warm container this process made and still watches, by slot: a claim need not ask the engine. */
  private readonly warmMade = new Map<string, string>();
  /**
   * Claimed warm containers whose rename to their environment's name is under way, by environment:
   * what reaches the container by that name waits for it (named). A note in CLAIMS_DIR says the same
   * to a restarted node (finishClaims).
   */
  private readonly renames = new Map<string, Promise<void>>();
  /** Slots whose warm container a claim is taking, until it has the environment's name: reconcile keeps them. */
  private readonly claiming = new Set<string>();
  /** A sample of an environment's usage, for each environment whose folder this node holds. */
  onUsage: (id: string, usage: NodeUsage) => void = () => undefined;
  /** The engine holds this image, found or pulled ahead (prepull). */
  onImageHeld: (ref: string) => void = () => undefined;
  private sampler: NodeJS.Timeout | undefined;
  private sampling = false;
  /** The CPU time of each container at its last sample: cores are the difference over time. */
  private readonly cpuSeen = new Map<string, { ns: number; at: number }>();
  /** Each environment's disk count, carried from one sample to the next (src/node/disk-count.ts). */
  private readonly diskCounts = new Map<string, DiskCount>();
  /** Environments whose last sample failed (logged once until one succeeds again). */
  private readonly sampleFailed = new Set<string>();
  /** Images queued or being pulled ahead of leases (prepull), and the queue's tail: one pull at a time. */
  private readonly prepulls = new Set<string>();
  private prepullTail: Promise<void> = Promise.resolve();

  constructor(readonly options: RuntimeOptions) {}

  get engine(): Engine | null {
    return this.options.engine;
  }

  /**
   * Pulls, in the background and one at a time, each of `images` the engine lacks: its pool's
   * templates' images, so no lease waits for a pull (a lease that needs one being pulled waits for
   * that same pull: Engine.pullImage). An image already queued is not queued again.
   */
  prepull(images: string[]): void {
    const engine = this.options.engine;
    if (!engine) return;
    for (const ref of images) {
      if (this.prepulls.has(ref)) continue;
      this.prepulls.add(ref);
      this.prepullTail = this.prepullTail.then(async () => {
        try {
          if (await engine.hasImage(ref)) return this.onImageHeld(ref);
          this.options.log(`pulling ${ref}`);
          const started = Date.now();
          await engine.pullImage(ref);
          this.options.log(`pulled ${ref} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
          this.onImageHeld(ref);
        } catch (error) {
          this.options.log(`cannot pull ${ref}: ${engineMessage(error)}`);
        } finally {
          this.prepulls.delete(ref);
        }
      });
    }
  }

  root(id: string): string {
    return environmentRoot(this.options.dir, id);
  }

  /**
   * Makes the share folders, lets `restore` fill them, then starts the container when there is an
   * image and an engine. Safe to call again for the same environment (a retry after a crash).
   */
  async prepare(spec: EnvironmentSpec, restore: (root: string) => Promise<void>, log: LogSink = () => undefined): Promise<RuntimeKind> {
    const root = this.root(spec.id);
    await mkdir(root, { recursive: true });
    for (const share of spec.shares) await mkdir(shareDir(root, share.envPath), { recursive: true });
    await restore(root);
    const engine = this.options.engine;
    if (!spec.image || !engine) {
      if (spec.lifecycle.length > 0) {
        log({
          step: BERTH_STEP,
          text: 'its lifecycle commands did not run: it holds files only (no image, or no container engine)\n',
          at: new Date(),
        });
      }
      return 'files';
    }
    if (!existsSync(ENVD_BINARY)) {
      throw new Error(`berth-envd is not built at ${ENVD_BINARY} (it needs a C compiler: apt-get install gcc, then npm install)`);
    }
    const name = containerName(spec.id);
    // A line to a container of an earlier try is not this one's.
    this.endLine(name);
    await engine.remove(name);
    this.users.set(name, spec.user);
    let image: Awaited<ReturnType<Engine['image']>>;
    try {
      image = await engine.image(spec.image);
    } catch (error) {
      throw new Error(`cannot pull image ${spec.image}: ${engineMessage(error)}`);
    }
    try {
      await engine.create(this.containerSpec(spec, root, [...image.entrypoint, ...image.cmd]));
      await engine.start(name);
      if (!ROOT_USER.test(spec.user ?? spec.containerUser ?? image.user)) await this.giveShares(engine, name, spec, root);
      if (spec.network === 'egress') await this.guard(engine, name);
      await goReady(engine, name);
      await engine.signal(name, 'SIGUSR1');
    } catch (error) {
      const why = await startFailure(engine, name, error);
      await engine.remove(name).catch(() => undefined);
      throw new Error(`cannot start a container of ${spec.image}: ${why}`);
    }
    this.watch(spec.id, spec.resources.memory);
    // The line for its commands, opened now: the first command does not wait for it.
    this.channel(spec.id).catch(() => undefined);
    await runLifecycle(spec.lifecycle, LIFECYCLE_PHASES, this.spawner(spec.id, spec.workdir), log);
    return 'container';
  }

  /** Starts lifecycle commands in the environment's container, as its other commands (exec). */
  private spawner(id: string, workdir: string) {
    return (argv: string[], output: (stream: 'stdout' | 'stderr', data: Buffer) => void) => this.exec(id, argv, workdir, output);
  }

  /** A warm container's folder: its share folders, renamed to the environment's root when it is claimed. */
  warmRoot(slot: string): string {
    if (!WARM_SLOT.test(slot)) throw new Error(`not a slot: ${JSON.stringify(slot)}`);
    return join(this.options.dir, `warm-${slot}`);
  }

  /**
   * Makes the slot's warm container (docs/environments.md, "Warm templates"): share folders, the
   * container, its shares given to the image's user, the egress guard, then the go, so the image's
   * command is running before any lease. Whatever the slot held before is removed first: safe to
   * call again.
   */
  async warm(spec: WarmSpec): Promise<void> {
    await this.startWarm(spec);
    // Its create phases, before any lease: a claim runs only postStartCommand. Their output waits
    // here for the lease that claims it; one that fails fails the warm container.
    const kept: LogPiece[] = [];
    const name = warmContainerName(spec.slot);
    try {
      await runLifecycle(
        spec.lifecycle,
        CREATE_PHASES,
        (argv, output) => this.spawnOn(() => this.lineTo(name), name, argv, spec.workdir, output),
        boundedLog((piece) => kept.push(piece), WARM_LOG_MAX),
      );
    } catch (error) {
      await this.dropWarm(spec.slot).catch(() => undefined);
      throw error;
    }
    // Dropped meanwhile (its container is gone): nothing to keep.
    if (this.warmMade.get(spec.slot) === spec.hash) this.warmLogs.set(spec.slot, kept);
  }

  /** The warm container, started and given the go, its line open. */
  private async startWarm(spec: WarmSpec): Promise<void> {
    const engine = this.requireEngine();
    if (!spec.image) throw new Error(`template ${spec.template} has no image`);
    if (!existsSync(ENVD_BINARY)) throw new Error(`berth-envd is not built at ${ENVD_BINARY}`);
    await this.dropWarm(spec.slot);
    const root = this.warmRoot(spec.slot);
    for (const share of spec.shares) await mkdir(shareDir(root, share.envPath), { recursive: true });
    await mkdir(root, { recursive: true });
    let image: Awaited<ReturnType<Engine['image']>>;
    try {
      image = await engine.image(spec.image);
    } catch (error) {
      throw new Error(`cannot pull image ${spec.image}: ${engineMessage(error)}`);
    }
    const name = warmContainerName(spec.slot);
    this.users.set(name, spec.user);
    const labels = {
      'berth.warm': spec.slot,
      'berth.template': spec.template,
      'berth.pool': spec.pool,
      'berth.organization': spec.orgId,
      'berth.owner': this.options.owner,
      'berth.spec': spec.hash,
    };
    try {
      await engine.create(this.containerSpec(spec, root, [...image.entrypoint, ...image.cmd], { name, labels }));
      await engine.start(name);
      if (!ROOT_USER.test(spec.user ?? spec.containerUser ?? image.user)) await this.giveShares(engine, name, spec, root);
      if (spec.network === 'egress') await this.guard(engine, name);
      await goReady(engine, name);
      await engine.signal(name, 'SIGUSR1');
      this.watchWarm(engine, spec.slot);
      this.warmMade.set(spec.slot, spec.hash);
      // Its line, opened now: it goes with the container to the lease that claims it, whose first
      // command then does not wait for an engine exec. A line that does not open is opened again
      // at the first command.
      await this.lineTo(name).catch(() => undefined);
    } catch (error) {
      const why = await startFailure(engine, name, error);
      await this.dropWarm(spec.slot).catch(() => undefined);
      throw new Error(`cannot start a container of ${spec.image}: ${why}`);
    }
  }

  /** Reports the end of the slot's warm container, unless it was removed or claimed meanwhile. */
  private watchWarm(engine: Engine, slot: string): void {
    const watch = Symbol(slot);
    this.warmWatches.set(slot, watch);
    const mine = () => this.warmWatches.get(slot) === watch;
    engine
      .wait(warmContainerName(slot))
      .then(() => {
        if (!mine()) return;
        this.warmWatches.delete(slot);
        this.warmMade.delete(slot);
        this.onWarmEnded(slot);
      })
      .catch(() => {
        if (!mine()) return;
        this.warmWatches.delete(slot);
        this.warmMade.delete(slot);
      });
  }

  /** Removes the slot's warm container and folder, if it has them. */
  async dropWarm(slot: string): Promise<void> {
    this.warmWatches.delete(slot);
    this.warmMade.delete(slot);
    this.warmLogs.delete(slot);
    const name = warmContainerName(slot);
    this.users.delete(name);
    this.removing.add(name);
    this.endLine(name);
    try {
      await this.options.engine?.remove(name);
    } finally {
      this.removing.delete(name);
    }
    await removeTree(this.warmRoot(slot));
  }

  /**
   * Makes the slot's warm container the environment's: its folder becomes the environment's root
   * (a bind mount follows the folder, not its path) and the container takes the environment's name
   * (labels cannot change: `berth.warm` stays); `restore` fills the shares, and what it wrote goes
   * to the share folders' owner (the image's user, given them when it was made). A warm container
   * that is gone, ended or of another spec is replaced by a cold prepare, which the log says.
   */
  async claimWarm(
    slot: string,
    hash: string,
    spec: EnvironmentSpec,
    restore: (root: string) => Promise<void>,
    log: LogSink = () => undefined,
  ): Promise<RuntimeKind> {
    const engine = this.options.engine;
    const root = this.root(spec.id);
    const cold = async (why: string) => {
      this.options.log(`no warm container for ${spec.id} on ${slot} (${why}): starting one cold`);
      await this.dropWarm(slot).catch(() => undefined);
      await this.stop(spec.id);
      await removeTree(root);
      return this.prepare(spec, restore, log);
    };
    if (!engine || !spec.image) return cold('no engine or image');
    // Kept by reconcile until the container has the environment's name.
    this.claiming.add(slot);
    try {
      return await this.takeWarm(engine, slot, hash, spec, restore, cold, log);
    } finally {
      const renamed = this.renames.get(spec.id);
      if (renamed) void renamed.finally(() => this.claiming.delete(slot));
      else this.claiming.delete(slot);
    }
  }

  private async takeWarm(
    engine: Engine,
    slot: string,
    hash: string,
    spec: EnvironmentSpec,
    restore: (root: string) => Promise<void>,
    cold: (why: string) => Promise<RuntimeKind>,
    log: LogSink,
  ): Promise<RuntimeKind> {
    const root = this.root(spec.id);
    const name = warmContainerName(slot);
    // What its create phases printed when it was made (none kept: made before this process started).
    const kept = this.warmLogs.get(slot);
    this.warmLogs.delete(slot);
    // One this process made and watches is running and of the hash it was made with; another
    // (found after a restart) is asked about.
    const made = this.warmWatches.has(slot) ? this.warmMade.get(slot) : undefined;
    // Claimed: its end is the environment's from now on.
    this.warmWatches.delete(slot);
    this.warmMade.delete(slot);
    if (made === undefined) {
      const state = await engine.inspect(name).catch(() => null);
      if (!state?.running) return cold(state ? 'it ended' : 'it is gone');
      if (state.labels['berth.spec'] !== hash || state.labels['berth.owner'] !== this.options.owner) return cold('it is of another spec');
    } else if (made !== hash) {
      return cold('it is of another spec');
    }
    try {
      await rename(this.warmRoot(slot), root);
    } catch (error) {
      return cold(`its folder: ${(error as Error).message}`);
    }
    // The container takes the environment's name in the background: the engine is often busy
    // (the last lease's removal, the next warm container), and the lease need not wait for it.
    // Until it has, what reaches the container by name waits (named); a restart finishes it.
    await mkdir(join(this.options.dir, CLAIMS_DIR), { recursive: true });
    await writeFile(this.claimNote(slot), spec.id);
    const id = spec.id;
    this.withContainer.add(id);
    this.renames.set(
      id,
      engine
        .rename(name, containerName(id))
        .then(
          async () => {
            await rm(this.claimNote(slot), { force: true });
            this.watch(id, spec.resources.memory);
          },
          (error) => {
            this.options.log(`the container of ${id} could not take its name: ${engineMessage(error)}`);
            this.onEnded(id, `its container could not take the environment's name: ${engineMessage(error)}`);
          },
        )
        .finally(() => this.renames.delete(id)),
    );
    // The line holds the container, not its name: it is the environment's now.
    const line = this.lines.get(name);
    this.lines.delete(name);
    if (line) this.lines.set(containerName(id), line);
    this.users.delete(name);
    this.users.set(containerName(id), spec.user);
    for (const share of spec.shares) await mkdir(shareDir(root, share.envPath), { recursive: true });
    await restore(root);
    for (const share of spec.shares) {
      const dir = shareDir(root, share.envPath);
      const owner = await lstat(dir);
      if (owner.uid !== process.getuid?.() || owner.gid !== process.getgid?.()) await chownTree(dir, owner.uid, owner.gid);
    }
    this.channel(id).catch(() => undefined);
    if (kept) for (const piece of kept) log(piece);
    else if (spec.lifecycle.some((c) => c.phase !== 'postStartCommand')) {
      log({
        step: BERTH_STEP,
        text: 'its create commands ran when its warm container was made, before this node last started: their output was not kept\n',
        at: new Date(),
      });
    }
    await runLifecycle(spec.lifecycle, START_PHASES, this.spawner(id, spec.workdir), log);
    return 'container';
  }

  /** Where a claim of `slot` notes which environment its container goes to, until it is renamed. */
  private claimNote(slot: string): string {
    if (!WARM_SLOT.test(slot)) throw new Error(`not a slot: ${JSON.stringify(slot)}`);
    return join(this.options.dir, CLAIMS_DIR, slot);
  }

  /** The name of the environment's container, once a claim's rename of it has finished. */
  private async named(id: string): Promise<string> {
    await this.renames.get(id);
    return containerName(id);
  }

  /**
   * After a restart: the renames of claimed warm containers that were under way are finished (a
   * container still under its warm name takes its environment's); notes of containers gone go.
   */
  private async finishClaims(engine: Engine): Promise<void> {
    const dir = join(this.options.dir, CLAIMS_DIR);
    for (const slot of await readdir(dir).catch(() => [] as string[])) {
      const note = join(dir, slot);
      const id = WARM_SLOT.test(slot) ? await readFile(note, 'utf8').catch(() => '') : '';
      if (CLAIMED_NAME.test(containerName(id))) {
        try {
          await engine.rename(warmContainerName(slot), containerName(id));
          this.options.log(`the claimed warm container of slot ${slot} took the name of ${id}`);
        } catch (error) {
          if (!isMissing(error)) throw error;
        }
      }
      await rm(note, { force: true });
    }
  }

  /** What the engine makes an environment's container from; a warm one (`as`) has its own name and labels. */
  private containerSpec(
    spec: EnvironmentSpec | WarmSpec,
    root: string,
    command: string[],
    as?: { name: string; labels: Record<string, string> },
  ): Dockerode.ContainerCreateOptions {
    const memory = spec.resources.memory ? parseSize(spec.resources.memory) : undefined;
    return {
      name: as?.name ?? containerName((spec as EnvironmentSpec).id),
      Image: spec.image!,
      Hostname: spec.name,
      Labels: {
        ...(as?.labels ?? {
          'berth.environment': (spec as EnvironmentSpec).id,
          'berth.template': spec.template,
          'berth.organization': spec.orgId,
          'berth.owner': this.options.owner,
        }),
        ...(spec.user ? { [USER_LABEL]: spec.user } : {}),
      },
      ...(spec.containerUser ? { User: spec.containerUser } : {}),
      Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
      WorkingDir: spec.workdir,
      Entrypoint: [ENVD_PATH, 'init'],
      Cmd: command,
      HostConfig: {
        Binds: [`${ENVD_DIR}:${ENVD_PLACE}:ro`, ...spec.shares.map((share) => `${shareDir(root, share.envPath)}:${share.envPath}`)],
        NetworkMode: spec.network === 'egress' ? 'bridge' : 'none',
        ...(memory ? { Memory: memory, MemorySwap: memory } : {}),
        ...(spec.resources.cpus ? { NanoCpus: Math.round(spec.resources.cpus * 1e9) } : {}),
        PidsLimit: spec.resources.pids ?? DEFAULT_PIDS,
        CapDrop: DROPPED_CAPABILITIES,
        SecurityOpt: ['no-new-privileges'],
        Ulimits: ULIMITS,
      },
    };
  }

  /**
   * Share folders belong to the user commands run as (the template's `user`, else the container's),
   * as does what the restore put there: asked of berth-envd (the user may be a name only the image's
   * /etc/passwd knows) before anything of the image runs.
   */
  private async giveShares(engine: Engine, name: string, spec: Pick<EnvironmentSpec, 'shares' | 'user'>, root: string): Promise<void> {
    const { code, stdout, stderr } = await collect(await engine.exec(name, { cmd: [ENVD_PATH, 'id'], user: spec.user }));
    const m = /^(\d+):(\d+)$/.exec(stdout.trim());
    if (code !== 0 || !m) throw new Error(`cannot tell the image's user (${code}): ${stderr.trim()}`);
    for (const share of spec.shares) await chownTree(shareDir(root, share.envPath), Number(m[1]), Number(m[2]));
  }

  /**
   * The egress guard: prohibit rules in the container's own network namespace, for the node's
   * addresses, the engine network's subnets (other environments, the gateway) and link-local
   * addresses. Added by a privileged exec before the image's command starts; the environment
   * lacks NET_ADMIN and cannot remove them. Addresses the node gains later are added to every
   * running egress container as they come (blockEverywhere).
   */
  private async guard(engine: Engine, name: string): Promise<void> {
    const state = await engine.inspect(name);
    // Watched before the node's addresses are read: one gained after this read is handed to
    // blockEverywhere, which finds this container (it runs already) and blocks it here too.
    this.addresses.start();
    const subnets = (state?.subnets ?? []).map(networkOf);
    const prefixes = [...new Set([...ownPrefixes(), ...subnets, ...(state?.gateways ?? []).map((g) => `${g}/32`), ...LINK_LOCAL])];
    await this.block(engine, name, prefixes);
  }

  private async block(engine: Engine, container: string, prefixes: string[]): Promise<void> {
    const { code, stderr } = await collect(await engine.exec(container, { cmd: [ENVD_PATH, 'guard', ...prefixes], privileged: true }));
    if (code !== 0) throw new Error(`the egress guard failed (${code}): ${stderr.trim()}`);
  }

  /**
   * Blocks addresses the node gained in every running egress container of this node, warm ones
   * included (a rule already there is kept as it is). False when one could not be told: the
   * addresses are handed again at the next look (src/node/host-addresses.ts).
   */
  private async blockEverywhere(prefixes: string[]): Promise<boolean> {
    const engine = this.options.engine;
    if (!engine) return true;
    let containers: Awaited<ReturnType<Engine['list']>>;
    try {
      containers = (await engine.list({ 'berth.owner': this.options.owner })).filter((c) => c.running && c.networked);
    } catch (error) {
      this.options.log(`cannot block the host's new addresses ${prefixes.join(' ')}: ${engineMessage(error)}`);
      return false;
    }
    let applied = true;
    for (let i = 0; i < containers.length; i += SAMPLED_AT_ONCE) {
      await Promise.all(
        containers.slice(i, i + SAMPLED_AT_ONCE).map(async (c) => {
          try {
            await this.block(engine, c.id, prefixes);
          } catch (error) {
            // One that ended meanwhile needs no rule.
            if (isMissing(error) || !(await engine.inspect(c.id).catch(() => null))?.running) return;
            applied = false;
            this.options.log(`cannot block the host's new addresses in ${c.name}: ${engineMessage(error)}`);
          }
        }),
      );
    }
    if (containers.length)
      this.options.log(`blocked the host's addresses ${prefixes.join(' ')} in ${containers.length} egress container(s)`);
    return applied;
  }

  /** Watches the container: an end this node did not cause is reported with its reason. */
  watch(id: string, memory?: string): void {
    const engine = this.options.engine;
    if (!engine || this.watched.has(id)) return;
    this.watched.add(id);
    this.withContainer.add(id);
    const name = containerName(id);
    engine
      .wait(name)
      .then(async (code) => {
        this.watched.delete(id);
        if (this.removing.has(name)) return;
        const state = await engine.inspect(name).catch(() => null);
        this.onEnded(id, endReason(state?.oomKilled ?? false, code, memory));
      })
      .catch((error) => {
        this.watched.delete(id);
        // The reconciliation finds what a lost watch would have seen.
        if (!this.removing.has(name)) this.options.log(`lost the watch on ${name}: ${engineMessage(error)}`);
      });
  }

  /** Samples every environment this node holds each `intervalMs` (replacing an earlier schedule). */
  startSampling(intervalMs: number): void {
    clearInterval(this.sampler);
    this.sampler = setInterval(() => void this.sampleAll(), intervalMs);
    this.sampler.unref();
  }

  /** Stops what the runtime runs on its own (samples, the watch on the node's addresses): the process may end. */
  close(): void {
    clearInterval(this.sampler);
    this.sampler = undefined;
    this.addresses.stop();
    stopDialers();
  }

  /** One round: the environments are the folders under `dir`; a round still running skips the next. */
  private async sampleAll(): Promise<void> {
    if (this.sampling) return;
    this.sampling = true;
    try {
      const ids = (await readdir(this.options.dir).catch(() => [] as string[])).filter((name) => ENVIRONMENT_FOLDER.test(name));
      const present = new Set(ids);
      for (const id of this.cpuSeen.keys()) if (!present.has(id)) this.cpuSeen.delete(id);
      for (const [id, count] of this.diskCounts) {
        if (present.has(id)) continue;
        count.close();
        this.diskCounts.delete(id);
      }
      for (const id of this.sampleFailed) if (!present.has(id)) this.sampleFailed.delete(id);
      for (let i = 0; i < ids.length; i += SAMPLED_AT_ONCE) {
        await Promise.all(ids.slice(i, i + SAMPLED_AT_ONCE).map((id) => this.sampleOne(id)));
      }
    } finally {
      this.sampling = false;
    }
  }

  private async sampleOne(id: string): Promise<void> {
    try {
      const usage = await this.sample(id);
      this.sampleFailed.delete(id);
      this.onUsage(id, usage);
    } catch (error) {
      if (this.sampleFailed.has(id)) return;
      this.sampleFailed.add(id);
      this.options.log(`cannot sample the usage of ${id}: ${engineMessage(error)}`);
    }
  }

  /**
   * The environment's usage now: its folder's bytes plus, when it runs as a container, the
   * container's writable layer, CPU (cores since the previous sample; null on the first),
   * memory and processes.
   */
  async sample(id: string): Promise<NodeUsage> {
    let count = this.diskCounts.get(id);
    if (!count) {
      count = new DiskCount(this.root(id));
      this.diskCounts.set(id, count);
    }
    const files = await count.step();
    const engine = this.options.engine;
    const container = engine ? await engine.usage(await this.named(id)) : null;
    if (!container) return { cpu: null, memory: null, pids: null, disk: files };
    const now = performance.now();
    const before = this.cpuSeen.get(id);
    let cpu: number | null = null;
    if (container.cpuNs !== null) {
      if (before && now > before.at && container.cpuNs >= before.ns) cpu = (container.cpuNs - before.ns) / 1e6 / (now - before.at);
      this.cpuSeen.set(id, { ns: container.cpuNs, at: now });
    }
    return { cpu, memory: container.memory, pids: container.pids, disk: files + container.writable };
  }

  /** Removes the container (its processes end at once), keeping the share folders. */
  async stop(id: string): Promise<void> {
    const engine = this.options.engine;
    if (!engine) return;
    const name = await this.named(id);
    this.withContainer.delete(id);
    this.users.delete(name);
    this.removing.add(name);
    this.endLine(name);
    stopDialer(name);
    try {
      await engine.remove(name);
    } finally {
      this.removing.delete(name);
    }
  }

  /** Removes the container and the environment's folders. */
  async discard(id: string): Promise<void> {
    await this.stop(id);
    await removeTree(this.root(id));
  }

  /**
   * Runs argv in the environment's container (in `workdir`, as the image's user), handing its
   * output to `output` as it comes, at most EXEC_WINDOW bytes beyond what grant() allowed: past
   * that berth-envd stops reading its output, so the command (and only it) blocks on its next
   * write. kill() ends the command's whole session. With `session`, the command takes input
   * (and, with `tty`, has a terminal of its own); without, its input is empty.
   */
  exec(
    id: string,
    argv: string[],
    workdir: string,
    output: (stream: 'stdout' | 'stderr', data: Buffer) => void,
    session?: SessionOptions,
  ): Promise<Command> {
    return this.spawnOn(() => this.channel(id), containerName(id), argv, workdir, output, session);
  }

  /** Starts argv over the line `line` opens (to the container `name`); see exec. */
  private async spawnOn(
    line: () => Promise<EnvdChannel>,
    name: string,
    argv: string[],
    workdir: string,
    output: (stream: 'stdout' | 'stderr', data: Buffer) => void,
    session?: SessionOptions,
  ): Promise<Command> {
    // A line that ended since it was opened (its serve was killed), or one the engine failed to
    // open: another, a few times. Nothing of the command went down such a line, so trying again
    // never runs it twice.
    for (let attempt = 1; ; attempt++) {
      let channel: EnvdChannel;
      try {
        channel = await line();
      } catch (error) {
        if (attempt === LINE_TRIES || isMissing(error)) throw error;
        this.options.log(`could not open the command line to ${name} (trying again): ${engineMessage(error)}`);
        continue;
      }
      if (!channel.closed) return channel.spawn(argv, workdir, output, session);
      if (attempt === LINE_TRIES) throw new Error('the line to the environment ended as it opened');
    }
  }

  /** The environment's line to berth-envd `serve`, opened at its first use and again after it ended. */
  private channel(id: string): Promise<EnvdChannel> {
    const held = this.lines.get(containerName(id));
    return held ?? this.named(id).then((name) => this.lineTo(name));
  }

  /** The line to berth-envd `serve` in the container now named `name` (an environment's or a warm one's). */
  private lineTo(name: string): Promise<EnvdChannel> {
    const engine = this.requireEngine();
    const open = this.lines.get(name);
    if (open) return open;
    // Forgotten when it ends, under whatever name its container has by then (a claim renames it):
    // the name it was held under, if it still was.
    const forget = (): string | undefined => {
      for (const [held, line] of this.lines) {
        if (line !== opening) continue;
        this.lines.delete(held);
        return held;
      }
      return undefined;
    };
    // As the template's user: every command and session goes down this line.
    const opening: Promise<EnvdChannel> = this.userOf(engine, name)
      .then((user) => engine.exec(name, { cmd: [ENVD_PATH, 'serve'], user }))
      .then(
        (line) =>
          new EnvdChannel(line, (why) => {
            // One the node ended itself (stop) is no longer held.
            const held = forget();
            if (held !== undefined && !this.removing.has(held)) this.options.log(`the command line to ${held} ended: ${why}`);
          }),
      );
    opening.catch(() => forget());
    this.lines.set(name, opening);
    return opening;
  }

  /** Who the commands of the container named `name` run as: as it was made, or as its label says (one made before this process started). */
  private async userOf(engine: Engine, name: string): Promise<string | undefined> {
    if (this.users.has(name)) return this.users.get(name);
    const state = await engine.inspect(name);
    const user = state?.labels[USER_LABEL] || undefined;
    if (state) this.users.set(name, user);
    return user;
  }

  /** Ends the line to the container named `name`, if one is held. */
  private endLine(name: string): void {
    const line = this.lines.get(name);
    this.lines.delete(name);
    line?.then(
      (channel) => channel.end(),
      () => undefined,
    );
  }

  /**
   * A byte stream to `port` on the environment's own loopback, dialled from inside its network:
   * where the node can enter the container, its standing dialler's socket itself (netns-dial.ts;
   * destroyed, the dialler's end sees it at once and ends the service's connection), else
   * berth-envd `dial` through the engine.
   */
  async dial(id: string, port: number): Promise<Duplex> {
    const engine = this.requireEngine();
    const name = await this.named(id);
    const entered = await dialInNamespace(engine, name, ENVD_BINARY, port);
    if (entered) return entered;
    const run = await engine.exec(name, { cmd: [ENVD_PATH, 'dial', String(port)] });
    let problem = '';
    run.stderr.on('data', (d: Buffer) => (problem += d.toString()));
    const stream = new Duplex({
      write(chunk, _encoding, done) {
        if (run.stdin.write(chunk)) done();
        else run.stdin.once('drain', () => done());
      },
      final(done) {
        run.stdin.end();
        done();
      },
      read() {
        run.resume();
      },
      destroy(error, done) {
        // Cut short (the relay's other end went away), or ended. Closing the engine's stream at
        // once can leave the command's input open (Podman keeps it when the stream is reset), and
        // the service's connection with it: the input is ended instead, as by a half-close, so the
        // service sees its end, and what it still sends is read and dropped until the command ends,
        // for DIAL_WIND_DOWN_MS at most.
        run.stdin.end();
        run.resume();
        const cut = setTimeout(() => run.stdin.destroy(), DIAL_WIND_DOWN_MS);
        cut.unref();
        run.exited.finally(() => clearTimeout(cut)).catch(() => undefined);
        done(error);
      },
    });
    // The engine's stream is paused, not run.stdout (whose feeder does not wait for it): a reader
    // that stops stops the service inside, instead of the node holding what it sends.
    run.stdout.on('data', (chunk: Buffer) => {
      if (!stream.destroyed && !stream.push(chunk)) run.pause();
    });
    run.stdout.on('end', () => stream.push(null));
    run.exited.then(
      (code) => {
        if (code !== 0) stream.destroy(new Error(problem.trim().replace(/^berth-envd: /, '') || `the tunnel ended with ${code}`));
      },
      (error: Error) => stream.destroy(error),
    );
    return stream;
  }

  private requireEngine(): Engine {
    if (!this.options.engine) throw new NoRuntimeError('this node has no container engine');
    return this.options.engine;
  }

  /**
   * After a restart: every container of this node whose environment is not in `live` is removed,
   * with its folder; of the live ones, those whose container ended are answered with why, the
   * running ones watched again (adopted). One created but not started yet belongs to a prepare in
   * flight and is left alone. `lookup` answers which of the ids are live, each with its memory limit
   * (named when it ran out); it is asked after the containers are listed, so a container a prepare
   * makes meanwhile belongs to an environment it already counts as live. Warm containers and
   * folders (a claimed one goes by its environment's name) are kept only for the slots `wanted`
   * answers (none without it); a folder without a container is found with hash '' and not running.
   */
  async reconcile(
    lookup: (ids: string[]) => Promise<Map<string, string | undefined>>,
    wanted: (found: FoundWarm[]) => Promise<Set<string>> = async () => new Set(),
  ): Promise<{ ended: Map<string, string>; present: Set<string> }> {
    const ended = new Map<string, string>();
    const present = new Set<string>();
    const engine = this.options.engine;
    // A claimed warm container goes by its environment's name before it is looked for by it.
    await Promise.all(this.renames.values());
    if (engine) await this.finishClaims(engine);
    const folders = (await readdir(this.options.dir).catch(() => [] as string[])).filter((n) => n.startsWith('warm-'));
    // Taken before the listing: a container made after it is not missing from it.
    const expected = [...this.withContainer];
    const containers = engine ? await engine.list({ 'berth.owner': this.options.owner }) : [];
    // Egress containers of an earlier run of this node: guarded again for what the node gained meanwhile.
    if (containers.some((c) => c.running && c.networked)) this.addresses.start();
    const warm = new Map<string, FoundWarm>();
    for (const folder of folders) warm.set(folder.slice('warm-'.length), { slot: folder.slice('warm-'.length), hash: '', running: false });
    for (const c of containers) {
      const slot = WARM_NAME.exec(c.name)?.[1];
      if (slot) warm.set(slot, { slot, hash: c.labels['berth.spec'] ?? '', running: c.running });
    }
    const keep = await wanted([...warm.values()]);
    for (const slot of this.claiming) keep.add(slot);
    for (const { slot } of warm.values()) {
      if (keep.has(slot) || !WARM_SLOT.test(slot)) continue;
      await this.dropWarm(slot);
      this.options.log(`removed the warm container of slot ${slot}: no longer wanted`);
    }
    if (!engine) return { ended, present };
    const envs = containers.filter((c) => !WARM_NAME.test(c.name));
    const idOf = (c: (typeof envs)[number]) => c.labels['berth.environment'] ?? CLAIMED_NAME.exec(c.name)?.[1] ?? '';
    const live = await lookup([...new Set([...envs.map(idOf), ...expected])]);
    for (const container of envs) {
      const id = idOf(container);
      if (!live.has(id)) {
        this.removing.add(container.id);
        stopDialer(container.name);
        await engine.remove(container.id).finally(() => this.removing.delete(container.id));
        if (/^env_[A-Za-z0-9]+$/.test(id)) await removeTree(this.root(id));
        this.options.log(`removed the container of ${id || 'an unknown environment'}: it is not live`);
        continue;
      }
      present.add(id);
      if (container.ended) {
        const state = await engine.inspect(container.id);
        ended.set(id, endReason(state?.oomKilled ?? false, state?.exitCode ?? 0, live.get(id)));
      } else if (container.running) {
        this.watch(id, live.get(id));
      }
    }
    // Removed behind the node's back (`podman rm -f`, a reset engine, the container engine's storage
    // wiped while it was down): the environment cannot go on.
    for (const id of expected) {
      if (present.has(id) || !live.has(id) || !this.withContainer.has(id)) continue;
      this.withContainer.delete(id);
      ended.set(id, 'its container is gone: it was removed outside Berth');
    }
    return { ended, present };
  }
}

/** Runs one berth-envd step to its end: its exit code and output. */
async function collect(run: RunningExec): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  run.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  run.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  run.stdin.end();
  return { code: await run.exited, stdout, stderr };
}

/** Why a container did not start: the engine's words, or berth-envd's refusal of the image's /.berth. */
async function startFailure(engine: Engine, name: string, error: unknown): Promise<string> {
  const state = await engine.inspect(name).catch(() => null);
  if (state && !state.running && state.exitCode === ENVD_MISPLACED) {
    return `the image's ${ENVD_PLACE} is not a folder (a link or a file), and berth-envd is mounted there in every container`;
  }
  return engineMessage(error);
}

/** Why a container ended, as the environment's `error` says it. */
export function endReason(oomKilled: boolean, code: number, memory?: string): string {
  if (oomKilled) return `out of memory${memory ? ` (limit ${formatSize(parseSize(memory))})` : ''}`;
  return `its container ended: the image's command exited with code ${code}`;
}

/** `10.88.0.5/16` → `10.88.0.0/16`. */
function networkOf(cidr: string): string {
  const [address, bits] = cidr.split('/') as [string, string];
  if (address.includes(':')) return cidr;
  const n = address.split('.').reduce((acc, part) => (acc << 8) + Number(part), 0) >>> 0;
  const mask = Number(bits) === 0 ? 0 : (0xffffffff << (32 - Number(bits))) >>> 0;
  const net = (n & mask) >>> 0;
  return `${[24, 16, 8, 0].map((s) => (net >>> s) & 255).join('.')}/${bits}`;
}
