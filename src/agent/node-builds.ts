// A node's template image builds (docs/environments.md, "Templates through the API"): the server
// sends `build`; the node fetches the build context, builds it through its engine's build API and
// reports the outcome with the build's output. One build at a time (a build is heavy, and two of
// the same image would race for its tag); a build already queued or under way is not queued again.
import { readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import type { Answer } from '../cli/http';
import { parseSize } from '../kernel/sizes';
import { type Engine, engineMessage } from '../node/engine';
import { ENVD_BINARY } from '../node/runtime';
import type { ToNode } from '../protocol/node-channel';

/** The most of a build's output a node keeps to report (its end); the server keeps as much. */
const MAX_OUTPUT = 256 * 1024;
/** A build that has not ended by then is given up (its log says so). */
const BUILD_TIMEOUT_MS = 30 * 60 * 1000;

type Build = ToNode<'build'>['build'];
type Call = (method: string, path: string, init?: { body?: string; type?: string }) => Promise<Answer>;

/** The image a node builds to learn whether its engine isolates build steps from its network. */
const BUILT_PREFIX = 'localhost/berth-build/';
const PROBE_IMAGE = `${BUILT_PREFIX}netcheck:probe`;

export class NodeBuilds {
  private readonly queued = new Set<string>();
  private tail: Promise<void> = Promise.resolve();
  /** Whether the engine's builds run RUN steps with no network but loopback, asked once. */
  private isolation: Promise<string | null> | undefined;

  constructor(
    private readonly engine: () => Engine | null,
    private readonly call: Call,
    private readonly log: (line: string) => void,
  ) {}

  /**
   * Removes the built images (BUILT_IMAGE_PREFIX) not in `keep`, after the builds queued now: a
   * template changed or deleted leaves none behind. One a container still uses stays until the
   * next time (and the probe's image is kept).
   */
  prune(keep: string[]): void {
    const kept = new Set([...keep, PROBE_IMAGE]);
    this.tail = this.tail.then(async () => {
      const engine = this.engine();
      if (!engine) return;
      try {
        for (const tag of await engine.imagesUnder(BUILT_PREFIX)) {
          if (!kept.has(tag) && (await engine.removeImage(tag))) this.log(`removed ${tag}: no template builds it any more`);
        }
      } catch (error) {
        this.log(`could not list the built images: ${engineMessage(error)}`);
      }
    });
  }

  /** Queues the build unless it is queued already. */
  take(build: Build): void {
    if (this.queued.has(build.id)) return;
    this.queued.add(build.id);
    this.tail = this.tail.then(() => this.run(build).finally(() => this.queued.delete(build.id)));
  }

  private async run(build: Build): Promise<void> {
    let output = '';
    const out = (text: string) => {
      output += text;
      if (output.length > 2 * MAX_OUTPUT) output = output.slice(-MAX_OUTPUT);
    };
    let error: string | undefined;
    try {
      error = await this.build(build, out);
    } catch (failure) {
      error = engineMessage(failure);
    }
    if (error) out(`\nerror: ${error}\n`);
    try {
      await this.call('POST', `/v1/template-builds/${build.id}`, {
        type: 'application/json',
        body: JSON.stringify({ log: output.slice(-MAX_OUTPUT), ...(error ? { error } : {}) }),
      });
      this.log(`build ${build.id} of ${build.image}: ${error ? `failed: ${error}` : 'done'}`);
    } catch (failure) {
      // The server hears of it again: the build is sent anew at the node's next hello.
      this.log(`could not report build ${build.id}: ${engineMessage(failure)}`);
    }
  }

  /**
   * Null when the engine runs a build's RUN steps with no network but loopback, else why not: a
   * build of berth-envd's `netcheck` (Podman 4's build API ignores `networkmode`, running build
   * steps on the host's network, where a tenant's command must never run).
   */
  private isolated(engine: Engine): Promise<string | null> {
    this.isolation ??= (async () => {
      const pack = tar.pack();
      pack.entry({ name: 'Dockerfile' }, 'FROM scratch\nCOPY envd /envd\nRUN ["/envd", "netcheck"]\n');
      pack.entry({ name: 'envd', mode: 0o755 }, await readFile(ENVD_BINARY));
      pack.finalize();
      const said: string[] = [];
      try {
        await engine.build(Readable.from(pack), { tag: PROBE_IMAGE, dockerfile: 'Dockerfile', args: {}, nocache: true }, (line) =>
          said.push(line),
        );
        return null;
      } catch (error) {
        const links = said
          .join('')
          .match(/^(?!STEP|COMMIT|-->)\S+$/gm)
          ?.join(', ');
        this.log(
          `this engine's builds are not isolated from the node's network (${engineMessage(error)}): Dockerfiles with RUN steps are refused`,
        );
        return `this node's engine runs build steps on the node's network${links ? ` (links ${links})` : ''}, where a template's commands must never run: only Dockerfiles without RUN steps are built here (Podman's build API before 5 ignores networkmode; Docker's honours it)`;
      }
    })();
    return this.isolation;
  }

  /** The build's error, or undefined when the image is there. */
  private async build(build: Build, out: (text: string) => void): Promise<string | undefined> {
    const engine = this.engine();
    if (!engine) return 'this node has no container engine';
    if (await engine.hasImage(build.image)) {
      out(`${build.image} is already built on this node\n`);
      return undefined;
    }
    if (build.runs) {
      const problem = await this.isolated(engine);
      if (problem) return problem;
    }
    const response = await this.call('GET', `/v1/template-builds/${build.id}/context`);
    const context = response.body;
    out(`building ${build.image} (${build.dockerfile}${build.target ? `, target ${build.target}` : ''})\n`);
    const timeout = new Promise<string>((resolve) => {
      const timer = setTimeout(() => resolve(`the build did not end within ${BUILD_TIMEOUT_MS / 60_000} minutes`), BUILD_TIMEOUT_MS);
      timer.unref();
    });
    const built = engine
      .build(
        context,
        {
          tag: build.image,
          dockerfile: build.dockerfile,
          args: build.args,
          ...(build.target ? { target: build.target } : {}),
          ...(build.memory ? { memory: parseSize(build.memory) } : {}),
        },
        out,
      )
      .then(() => undefined);
    return Promise.race([built, timeout]);
  }
}
