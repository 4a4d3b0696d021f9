// The node's lifecycle runner (src/node/lifecycle.ts) on its own, with commands that are
// stand-ins: phases in order, a phase's commands side by side, each one's output under its own
// step, the failure naming the command; output as whole lines, UTF-8 split anywhere, NUL replaced;
// the log bounded and cut on a character.
import { describe, expect, it } from 'vitest';
import type { Command } from '../src/node/command';
import { boundedLog, LifecycleError, LineWriter, type LogPiece, runLifecycle, type Spawn } from '../src/node/lifecycle';
import { cutNote, cutToBytes, ENV_LOG_PIECE } from '../src/protocol/environment-log';

type Output = (stream: 'stdout' | 'stderr', data: Buffer) => void;

/** A command that prints `out` (pieces) and exits with `code` once `go` resolves. */
function command(out: string[], code: number, go: Promise<void> = Promise.resolve()) {
  return async (output: Output): Promise<Command> => {
    const exited = go.then(() => {
      for (const piece of out) output('stdout', Buffer.from(piece));
      return code;
    });
    return {
      exited,
      kill: () => undefined,
      grant: () => undefined,
      input: () => undefined,
      endInput: () => undefined,
      resize: () => undefined,
    };
  };
}

const text = (pieces: LogPiece[]) => pieces.map((p) => `[${p.step}]${p.text}`).join('');

describe('runLifecycle', () => {
  it('runs the phases in order, a phase side by side, each command under its own step', async () => {
    const started: string[] = [];
    let releaseA!: () => void;
    const aMayEnd = new Promise<void>((resolve) => (releaseA = resolve));
    const programs: Record<string, ReturnType<typeof command>> = {
      create: command(['made\n'], 0),
      // `a` ends only once `b` ended: run one after the other, it never would.
      a: command(['a 1\n', 'a 2\n'], 0, aMayEnd),
      b: command(['b\n'], 0),
      start: command(['started\n'], 0),
    };
    const spawn: Spawn = async (argv, output) => {
      started.push(argv[0]!);
      const run = await programs[argv[0]!]!(output);
      if (argv[0] === 'b') void run.exited.then(() => releaseA());
      return run;
    };
    const log: LogPiece[] = [];
    await runLifecycle(
      [
        { phase: 'postStartCommand', argv: ['start'] },
        { phase: 'postCreateCommand', name: 'a', argv: ['a'] },
        { phase: 'postCreateCommand', name: 'b', argv: ['b'] },
        { phase: 'onCreateCommand', argv: ['create'] },
      ],
      ['onCreateCommand', 'updateContentCommand', 'postCreateCommand', 'postStartCommand'],
      spawn,
      (piece) => log.push(piece),
    );
    expect(started).toEqual(['create', 'a', 'b', 'start']);
    // b ended first: its output first, whole; then a's, whole.
    expect(text(log)).toBe(
      '[onCreateCommand][onCreateCommand]made\n[postCreateCommand (b)][postCreateCommand (b)]b\n[postCreateCommand (a)][postCreateCommand (a)]a 1\na 2\n[postStartCommand][postStartCommand]started\n',
    );
  });

  it('fails a phase naming the first command that exited non-zero, once the others ended, and runs no later phase', async () => {
    const ran: string[] = [];
    const spawn: Spawn = async (argv, output) => {
      ran.push(argv[0]!);
      return command([`${argv[0]}\n`], argv[0] === 'deps' ? 3 : 0)(output);
    };
    const log: LogPiece[] = [];
    const run = runLifecycle(
      [
        { phase: 'postCreateCommand', name: 'fine', argv: ['fine'] },
        { phase: 'postCreateCommand', name: 'deps', argv: ['deps'] },
        { phase: 'postStartCommand', argv: ['never'] },
      ],
      ['postCreateCommand', 'postStartCommand'],
      spawn,
      (piece) => log.push(piece),
    );
    await expect(run).rejects.toThrow(new LifecycleError('postCreateCommand (deps) exited 3'));
    expect(ran).toEqual(['fine', 'deps']);
    expect(log.at(-1)).toMatchObject({ step: 'berth', text: 'postCreateCommand (deps) exited 3\n' });
    expect(text(log)).toContain('[postCreateCommand (fine)]fine\n');
  });

  it("says a command that could not start is the node's failure, not a lifecycle one", async () => {
    const spawn: Spawn = async () => {
      throw new Error('the line to the environment ended as it opened');
    };
    const run = runLifecycle([{ phase: 'onCreateCommand', argv: ['x'] }], ['onCreateCommand'], spawn, () => undefined);
    await expect(run).rejects.toThrow('cannot run onCreateCommand: the line to the environment ended as it opened');
    await expect(run).rejects.not.toBeInstanceOf(LifecycleError);
  });
});

describe('LineWriter', () => {
  it('hands on whole lines, UTF-8 split across chunks, NUL replaced; the rest at the end', () => {
    const log: LogPiece[] = [];
    const writer = new LineWriter('s', (p) => log.push(p));
    const bytes = Buffer.from('héllo\nwor\0ld');
    writer.write('stdout', bytes.subarray(0, 2));
    writer.write('stdout', bytes.subarray(2));
    writer.write('stderr', Buffer.from('err'));
    writer.end();
    expect(log.map((p) => p.text).join('')).toBe('héllo\nwor\uFFFDlderr');
  });

  it('cuts a line longer than a piece into pieces', () => {
    const log: LogPiece[] = [];
    const writer = new LineWriter('s', (p) => log.push(p));
    writer.write('stdout', Buffer.alloc(ENV_LOG_PIECE * 2 + 10, 'x'));
    writer.end();
    expect(log.map((p) => p.text.length)).toEqual([ENV_LOG_PIECE, ENV_LOG_PIECE, 10]);
  });
});

describe('boundedLog', () => {
  it('passes at most maxBytes, then says once where it was cut', () => {
    const log: LogPiece[] = [];
    const sink = boundedLog((p) => log.push(p), 10);
    const at = new Date();
    for (const t of ['12345', '678é90', 'more', 'and more']) sink({ step: 's', text: t, at });
    expect(log.map((p) => p.text)).toEqual(['12345', '678é', cutNote(10)]);
    expect(log.at(-1)!.step).toBe('berth');
  });

  it('cuts on a character, never inside one', () => {
    expect(cutToBytes('héllo', 2)).toBe('h');
    expect(cutToBytes('héllo', 3)).toBe('hé');
    expect(cutToBytes('abc', 0)).toBe('');
    expect(cutToBytes('abc', 10)).toBe('abc');
  });
});
