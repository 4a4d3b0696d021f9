// A node's template image builds (docs/environments.md, "Templates through the API"): the server
// sends `build`; the node fetches the build context, builds it through its engine's build API and
// reports the outcome with the build's output. One build at a time (a build is heavy, and two of
// the same image would race for its tag); a build already queued or under way is not queued again.
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { parseSize } from '../kernel/sizes';
import { type Engine, engineMessage } from '../node/engine';
import type { ToNode } from '../protocol/node-channel';

/** The most of a build's output a node keeps to report (its end); the server keeps as much. */
const MAX_OUTPUT = 256 * 1024;
/** A build that has not ended by then is given up (its log says so). */
const BUILD_TIMEOUT_MS = 30 * 60 * 1000;

type Build = ToNode<'build'>['build'];
type Call = (method: string, path: string, init?: { body?: string; type?: string }) => Promise<Response>;

export class NodeBuilds {
  private readonly queued = new Set<string>();
  private tail: Promise<void> = Promise.resolve();

  constructor(
    private readonly engine: () => Engine | null,
    private readonly call: Call,
    private readonly log: (line: string) => void,
  ) {}

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

  /** The build's error, or undefined when the image is there. */
  private async build(build: Build, out: (text: string) => void): Promise<string | undefined> {
    const engine = this.engine();
    if (!engine) return 'this node has no container engine';
    if (await engine.hasImage(build.image)) {
      out(`${build.image} is already built on this node\n`);
      return undefined;
    }
    const response = await this.call('GET', `/v1/template-builds/${build.id}/context`);
    if (!response.body) return 'the server sent no build context';
    const context = Readable.fromWeb(response.body as WebReadableStream);
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
