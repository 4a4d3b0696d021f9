// berth-envd `serve` (src/node/envd/berth-envd.c) driven by the node's side of the line
// (src/node/envd-channel.ts), run here as a local process: the protocol, its flow control and what
// its end does to the commands it started. Through a container and the public interfaces:
// test/containers.test.ts and test/sessions.test.ts.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Command } from '../src/node/command';
import type { Engine } from '../src/node/engine';
import { EnvdChannel, LINE_BACKLOG_MAX, SERVE_INPUT_WINDOW, type ServeLine } from '../src/node/envd-channel';
import { ENVD_BINARY, NodeRuntime } from '../src/node/runtime';
import { EXEC_WINDOW } from '../src/protocol/dataplane';

interface Served {
  channel: EnvdChannel;
  process: ChildProcess;
  closed: Promise<string>;
}

/** How long vi.waitFor waits on something a loaded machine may take its time over. */
const WAIT = { timeout: 20_000, interval: 20 };
const started: ChildProcess[] = [];

/** A local `serve` (or `program`) as the line an engine exec gives the node. */
function serveLine(program = ENVD_BINARY, args = ['serve']): { line: ServeLine; process: ChildProcess } {
  const child = spawn(program, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  started.push(child);
  // 'close': after its stderr (why it ended) was read.
  const exited = new Promise<number>((resolve) => child.once('close', (code) => resolve(code ?? 137)));
  return { line: { stdin: child.stdin!, stdout: child.stdout!, stderr: child.stderr!, exited }, process: child };
}

function serve(): Served {
  const { line, process: child } = serveLine();
  let closed!: (why: string) => void;
  const done = new Promise<string>((resolve) => (closed = resolve));
  return { channel: new EnvdChannel(line, closed), process: child, closed: done };
}

afterEach(() => {
  for (const child of started.splice(0)) child.kill('SIGKILL');
});

interface Output {
  stdout: string;
  stderr: string;
  bytes: number;
}

function run(channel: EnvdChannel, argv: string[], options: { workdir?: string; pipe?: boolean; grant?: boolean } = {}) {
  const out: Output = { stdout: '', stderr: '', bytes: 0 };
  let command!: Command;
  const output = (stream: 'stdout' | 'stderr', data: Buffer) => {
    out[stream] += data.toString();
    out.bytes += data.length;
    if (options.grant !== false) command.grant(data.length);
  };
  command = channel.spawn(argv, options.workdir ?? '', output, options.pipe ? {} : undefined);
  return { command, out };
}

/** Whether the process is gone (or only a zombie waiting for its parent). */
function gone(pid: number): boolean {
  const stat = `/proc/${pid}/stat`;
  if (!existsSync(stat)) return true;
  try {
    return /^\d+ \(.*\) Z/.test(readFileSync(stat, 'utf8'));
  } catch {
    return true;
  }
}

describe.skipIf(!existsSync(ENVD_BINARY))('berth-envd serve', () => {
  it('runs commands in their workdir with their streams and exit codes, a missing program as a shell would', async () => {
    const { channel } = serve();
    const a = run(channel, ['sh', '-c', 'pwd; echo oops >&2; exit 3'], { workdir: '/tmp' });
    const b = run(channel, ['no-such-program']);
    const c = run(channel, ['sh', '-c', 'pwd'], { workdir: '/no/such/dir' });
    expect(await a.command.exited).toBe(3);
    expect(a.out).toMatchObject({ stdout: '/tmp\n', stderr: 'oops\n' });
    expect(await b.command.exited).toBe(127);
    expect(b.out.stderr).toBe('berth: no-such-program: command not found\n');
    expect(await c.command.exited).toBe(126);
    expect(c.out.stderr).toMatch(/^berth: cannot enter \/no\/such\/dir: /);
  });

  it('holds a command whose caller takes nothing at its window while others on the line run to their end', async () => {
    const { channel } = serve();
    const flood = run(channel, ['sh', '-c', 'while :; do echo flooding flooding flooding; done'], { grant: false });
    await vi.waitFor(() => expect(flood.out.bytes).toBeGreaterThan(0), WAIT);
    for (let i = 0; i < 5; i++) {
      const echo = run(channel, ['echo', `hi ${i}`]);
      expect(await echo.command.exited).toBe(0);
      expect(echo.out.stdout).toBe(`hi ${i}\n`);
    }
    // What came of the flood is at most its window, however long it ran.
    expect(flood.out.bytes).toBeLessThanOrEqual(EXEC_WINDOW);
    flood.command.kill();
    expect(await flood.command.exited).toBe(137);
  });

  it('passes input many times its window, each piece acknowledged once the command took it', async () => {
    const { channel } = serve();
    const counted = run(channel, ['wc', '-c'], { pipe: true });
    const piece = Buffer.alloc(100_000, 'x');
    let written = 0;
    const pieces = Math.ceil((8 * SERVE_INPUT_WINDOW) / piece.length);
    for (let i = 0; i < pieces; i++) counted.command.input(piece, () => written++);
    counted.command.endInput();
    expect(await counted.command.exited).toBe(0);
    expect(counted.out.stdout.trim()).toBe(String(pieces * piece.length));
    expect(written).toBe(pieces);
  });

  it("kills a command's whole session, and a command killed at once", async () => {
    const { channel } = serve();
    const tree = run(channel, ['sh', '-c', 'sleep 300 & echo $!; exec sleep 301']);
    await vi.waitFor(() => expect(tree.out.stdout).toMatch(/^\d+\n$/), WAIT);
    tree.command.kill();
    expect(await tree.command.exited).toBe(137);
    await vi.waitFor(() => expect(gone(Number(tree.out.stdout))).toBe(true), WAIT);
    const quick = run(channel, ['sleep', '302']);
    quick.command.kill();
    expect(await quick.command.exited).toBe(137);
    expect(await run(channel, ['true']).command.exited).toBe(0);
  });

  it('ends every command it started, whole sessions, when the line ends', async () => {
    const { channel, process, closed } = serve();
    const tree = run(channel, ['sh', '-c', 'sleep 300 & echo $! $$; wait']);
    await vi.waitFor(() => expect(tree.out.stdout).toMatch(/^\d+ \d+\n$/), WAIT);
    const pids = tree.out.stdout.trim().split(' ').map(Number);
    channel.end();
    expect(await tree.command.exited).toBe(137);
    expect(await closed).toBe('ended by the node');
    await once(process, 'exit');
    await vi.waitFor(() => expect(pids.map(gone)).toEqual([true, true]), WAIT);
  });

  it('ends every command it started when what it sends can no longer be delivered', async () => {
    const { channel, process } = serve();
    const tree = run(channel, ['sh', '-c', 'sleep 300 & echo $!; read x; echo more; wait'], { pipe: true });
    await vi.waitFor(() => expect(tree.out.stdout).toMatch(/^\d+\n$/), WAIT);
    const pid = Number(tree.out.stdout);
    // The node stops reading the line while its input stays open; the command's next output is undeliverable.
    process.stdout!.destroy();
    tree.command.input(Buffer.from('go\n'), () => undefined);
    await once(process, 'exit');
    await vi.waitFor(() => expect(gone(pid)).toBe(true), WAIT);
  });

  it('ends, with every command on it, at a frame out of protocol', async () => {
    const { channel, process, closed } = serve();
    const tree = run(channel, ['sh', '-c', 'echo $$; exec sleep 300']);
    await vi.waitFor(() => expect(tree.out.stdout).toMatch(/^\d+\n$/), WAIT);
    // A frame of no known type; then, to another serve, one longer than any it takes.
    const bad = Buffer.from([0x7a, 0, 0, 0, 4, 0, 0, 0, 1]);
    process.stdin!.write(bad);
    expect(await tree.command.exited).toBe(137);
    expect(await closed).toMatch(/unknown type/);
    await vi.waitFor(() => expect(gone(Number(tree.out.stdout))).toBe(true), WAIT);
    expect(() => channel.spawn(['true'], '', () => undefined)).toThrow(/closed/);

    const second = serve();
    second.process.stdin!.write(Buffer.from([0x73, 0xff, 0xff, 0xff, 0xff]));
    expect(await second.closed).toMatch(/too long/);
  });

  it('ends a line berth-envd stopped taking frames from, instead of holding ever more of them', async () => {
    const { channel, process, closed } = serve();
    const waiting = run(channel, ['sh', '-c', 'echo $$; exec sleep 300']);
    await vi.waitFor(() => expect(waiting.out.stdout).toMatch(/^\d+\n$/), WAIT);
    // Stopped as a process of the environment could stop it.
    process.kill('SIGSTOP');
    const long = 'x'.repeat(256 * 1024);
    for (let sent = 0; !channel.closed; sent += long.length) {
      expect(sent).toBeLessThanOrEqual(2 * LINE_BACKLOG_MAX);
      run(channel, ['echo', long]);
    }
    expect(await closed).toBe('berth-envd stopped taking frames');
    expect(await waiting.command.exited).toBe(137);
  });
});

// NodeRuntime.exec over lines an engine fails to open or that end as they open: the command goes
// down a new line, never two, and a missing container is not tried again.
describe.skipIf(!existsSync(ENVD_BINARY))('a node runtime opening its lines', () => {
  /** A runtime whose engine answers each exec of `serve` with the next of `lines` (then real serves). */
  function runtimeWith(lines: (() => never | 'ended')[]) {
    const opened: string[] = [];
    const logged: string[] = [];
    const engine = {
      async exec(name: string, options: { cmd: string[] }) {
        opened.push(`${name} ${options.cmd.join(' ')}`);
        if (lines.shift()?.() === 'ended') return { ...serveLine('true', []).line, exited: Promise.resolve(0) };
        return serveLine().line;
      },
      // A container made before the runtime started, with no user of its own (berth.user).
      async inspect() {
        return { labels: {} };
      },
    } as unknown as Engine;
    const runtime = new NodeRuntime({ engine, dir: '/nonexistent', owner: 'test', log: (line) => logged.push(line) });
    const exec = async (argv: string[]) => {
      let stdout = '';
      const command = await runtime.exec('env_abc', argv, '', (stream, data) => {
        if (stream === 'stdout') stdout += data.toString();
      });
      return { exitCode: await command.exited, stdout };
    };
    return { exec, opened, logged };
  }
  const hiccup = () => {
    throw Object.assign(new Error('(HTTP code 500) server error - OCI runtime exec failed: read init-p: connection reset'), {
      statusCode: 500,
    });
  };

  it('runs a command on a new line when the engine could not open one', async () => {
    const { exec, opened, logged } = runtimeWith([hiccup]);
    expect(await exec(['echo', 'once'])).toEqual({ exitCode: 0, stdout: 'once\n' });
    expect(opened).toEqual(['berth-env_abc /.berth/envd serve', 'berth-env_abc /.berth/envd serve']);
    expect(logged).toEqual([
      'could not open the command line to berth-env_abc (trying again): OCI runtime exec failed: read init-p: connection reset',
    ]);
  });

  it('runs a command on a new line when the one opened ended at once', async () => {
    const { exec, opened } = runtimeWith([() => 'ended']);
    expect(await exec(['echo', 'once'])).toEqual({ exitCode: 0, stdout: 'once\n' });
    expect(opened).toHaveLength(2);
  });

  it('gives up after three lines, and at once for a container that is gone', async () => {
    const failing = runtimeWith([hiccup, hiccup, hiccup, hiccup]);
    await expect(failing.exec(['true'])).rejects.toThrow(/OCI runtime exec failed/);
    expect(failing.opened).toHaveLength(3);
    const gone = () => {
      throw Object.assign(new Error('no such container'), { statusCode: 404 });
    };
    const missing = runtimeWith([gone, gone]);
    await expect(missing.exec(['true'])).rejects.toThrow('no such container');
    expect(missing.opened).toHaveLength(1);
  });
});

function once(child: ChildProcess, event: 'exit'): Promise<void> {
  return new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once(event, () => resolve())));
}
