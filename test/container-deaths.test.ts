// A node's waits on its containers, served by one stream of the engine's events
// (src/node/container-deaths.ts): a death on the stream ends the waits on that container and no
// other; a container not running is answered at once; a death between the stream's opening and
// the look is not lost; the stream's end fails every wait (the node looks again) and the next wait
// opens a new one; what is not a death is ignored. The engine here is a stand-in: the container
// suites run the same code against Podman.
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ContainerDeaths } from '../src/node/container-deaths';

interface Look {
  id: string;
  running: boolean;
  exitCode: number;
}

function engine(containers: Record<string, Look>) {
  const streams: PassThrough[] = [];
  let beforeLook: (() => Promise<void>) | undefined;
  const deaths = new ContainerDeaths(
    {
      events: async () => {
        const stream = new PassThrough();
        streams.push(stream);
        return stream;
      },
      look: async (name) => {
        await beforeLook?.();
        return containers[name] ?? null;
      },
    },
    (why) => new Error(why),
  );
  const latest = () => streams[streams.length - 1]!;
  const die = (id: string, code: number, stream = latest()) =>
    stream.write(`${JSON.stringify({ Type: 'container', Action: 'die', Actor: { ID: id, Attributes: { exitCode: String(code) } } })}\n`);
  return { deaths, streams, latest, die, onLook: (fn: () => Promise<void>) => (beforeLook = fn) };
}

/** Whether `promise` settled by the time everything already queued ran. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  promise.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

describe('container deaths', () => {
  it("ends the waits on a container when its death comes, and no other container's", async () => {
    const e = engine({ a: { id: 'id-a', running: true, exitCode: 0 }, b: { id: 'id-b', running: true, exitCode: 0 } });
    const first = e.deaths.wait('a');
    const second = e.deaths.wait('a');
    const other = e.deaths.wait('b');
    await settled(first);
    // Not a death: a start, an exec's end, another type's die; a line that is not JSON.
    e.latest().write(`${JSON.stringify({ Type: 'container', Action: 'start', Actor: { ID: 'id-a' } })}\n`);
    e.latest().write(`${JSON.stringify({ Type: 'container', Action: 'exec_died', Actor: { ID: 'id-a' } })}\n`);
    e.latest().write(`${JSON.stringify({ Type: 'network', Action: 'die', Actor: { ID: 'id-a' } })}\n`);
    e.latest().write('not json\n');
    expect(await settled(first)).toBe(false);
    e.die('id-a', 137);
    await expect(first).resolves.toBe(137);
    await expect(second).resolves.toBe(137);
    expect(await settled(other)).toBe(false);
    // One stream served all of them.
    expect(e.streams).toHaveLength(1);
  });

  it('answers at once for a container that is not running, and fails for one that does not exist', async () => {
    const e = engine({ ended: { id: 'id-e', running: false, exitCode: 3 } });
    await expect(e.deaths.wait('ended')).resolves.toBe(3);
    await expect(e.deaths.wait('missing')).rejects.toThrow('no such container: missing');
  });

  it('keeps a death that came between the stream opening and the look', async () => {
    const e = engine({ racing: { id: 'id-r', running: true, exitCode: 0 } });
    await settled(e.deaths.wait('warm-up'));
    // The look still sees it running (it read the state before), but its death is already on the stream.
    e.onLook(async () => {
      e.die('id-r', 2);
      await new Promise((resolve) => setImmediate(resolve));
    });
    await expect(e.deaths.wait('racing')).resolves.toBe(2);
  });

  it('does not take an earlier death of the same container for a later one', async () => {
    const e = engine({ again: { id: 'id-g', running: true, exitCode: 0 } });
    const before = e.deaths.wait('again');
    await settled(before);
    e.die('id-g', 1);
    await expect(before).resolves.toBe(1);
    // Started again: a new wait waits for its next death.
    const after = e.deaths.wait('again');
    expect(await settled(after)).toBe(false);
    e.die('id-g', 0);
    await expect(after).resolves.toBe(0);
  });

  it("fails every wait when the engine's stream ends, and the next wait opens a new one", async () => {
    const e = engine({ a: { id: 'id-a', running: true, exitCode: 0 } });
    const lost = e.deaths.wait('a');
    await settled(lost);
    e.latest().destroy(new Error('socket hang up'));
    await expect(lost).rejects.toThrow("the engine's event stream failed: socket hang up");
    const next = e.deaths.wait('a');
    await settled(next);
    expect(e.streams).toHaveLength(2);
    e.die('id-a', 5);
    await expect(next).resolves.toBe(5);
  });
});
