/**
 * AES-256-GCM for the packer's chunks, in place, on sealing threads (src/platform/crypto/seal-worker.ts).
 *
 * A chunk lives in a *slot*: a buffer in memory shared with those threads, laid out as the sealed
 * chunk is (`nonce | data | tag`, src/platform/crypto/seal.ts). Sealing turns the plain bytes in `data`
 * into the ciphertext and fills in the nonce and the tag; opening does the reverse and checks the
 * tag. Nothing is copied between threads and nothing is allocated per chunk on the main thread:
 * before this, WebCrypto's copy of every input and its fresh output buffer lived across I/O, were
 * promoted, and kept the main thread's collector marking a heap of ~50 MB over and over (2-3 ms of
 * CPU per MB moved; docs/benchmarks.md).
 *
 * Slots are pooled and reused: whoever takes one gives it back once nothing (the store, a socket)
 * still reads it. The threads start on first use, up to one per core, and do not keep the process
 * alive while idle.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { NONCE_BYTES, SEAL_OVERHEAD, SealError } from './seal';

/** What a sealing thread is asked to do (posted to it). */
export interface SealJob {
  id: number;
  op: 'seal' | 'open';
  key: Uint8Array;
  aad: Uint8Array;
  memory: SharedArrayBuffer;
  /** Where the slot starts in `memory`. */
  offset: number;
  /** Plain bytes of the chunk (the slot holds `nonce | data | tag` around them). */
  length: number;
}

/** Hashing on a sealing thread (SlotHash): adds a slot's plain bytes, or ends with the digest. */
export type HashJob =
  | { id: number; op: 'hash'; stream: number; memory: SharedArrayBuffer; offset: number; length: number }
  | { id: number; op: 'digest'; stream: number };

/** A sealing thread's answer: `failed` is 'authentication' when a chunk did not open. */
export interface SealJobDone {
  id: number;
  failed?: string;
  /** Hex SHA-256, for a digest job. */
  digest?: string;
}

// ---------------------------------------------------------------------------------------------
// Slots

/** Free slots kept per size; more are left to the collector. */
const FREE_SLOTS_KEPT = 8;
const freeSlots = new Map<number, Buffer[]>();

/** A slot for chunks of up to `capacity` plain bytes (its length is capacity + SEAL_OVERHEAD). */
export function takeSlot(capacity: number): Buffer {
  const size = capacity + SEAL_OVERHEAD;
  return freeSlots.get(size)?.pop() ?? Buffer.from(new SharedArrayBuffer(size));
}

/** Gives a slot back; the caller must not touch it (or any view of it) again. */
export function releaseSlot(slot: Buffer): void {
  const free = freeSlots.get(slot.length) ?? [];
  freeSlots.set(slot.length, free);
  if (free.length < FREE_SLOTS_KEPT) free.push(slot);
}

/** The plain bytes of a slot holding `length` of them. */
export function slotData(slot: Buffer, length: number): Buffer {
  return slot.subarray(NONCE_BYTES, NONCE_BYTES + length);
}

/** The sealed chunk (`nonce | ciphertext | tag`) of a slot holding `length` plain bytes. */
export function slotSealed(slot: Buffer, length: number): Buffer {
  return slot.subarray(0, length + SEAL_OVERHEAD);
}

// ---------------------------------------------------------------------------------------------
// Threads

const MAX_THREADS = Math.max(1, Math.min(4, availableParallelism()));

interface Pending {
  resolve: (done: SealJobDone) => void;
  reject: (err: Error) => void;
  op: SealJob['op'] | HashJob['op'];
}

class SealThread {
  readonly worker: Worker;
  readonly pending = new Map<number, Pending>();
  /** Running SlotHashes pinned to this thread. */
  hashing = 0;
  /** Why the thread is no more, once it is not. */
  private gone: Error | undefined;

  constructor(onGone: (thread: SealThread) => void) {
    this.worker = startWorker();
    this.worker.unref();
    this.worker.on('message', (done: SealJobDone) => {
      const job = this.pending.get(done.id);
      if (!job) return;
      this.pending.delete(done.id);
      if (this.pending.size === 0) this.worker.unref();
      if (done.failed === undefined) job.resolve(done);
      else if (job.op === 'open' && done.failed === 'authentication') {
        job.reject(new SealError('sealed data failed authentication (wrong key, tampered, or out of place)'));
      } else job.reject(new Error(`sealing thread: ${done.failed}`));
    });
    const fail = (err: Error) => {
      this.gone ??= err;
      onGone(this);
      for (const job of this.pending.values()) job.reject(err);
      this.pending.clear();
    };
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => fail(new Error(`sealing thread exited with code ${code}`)));
  }

  post(job: SealJob | HashJob, pending: Pending): void {
    // A SlotHash stays with its thread: if that thread has died, so has the hash.
    if (this.gone) {
      pending.reject(this.gone);
      return;
    }
    if (this.pending.size === 0) this.worker.ref(); // a job in flight keeps the process alive
    this.pending.set(job.id, pending);
    this.worker.postMessage(job);
  }
}

/**
 * The bundle (`npm start`) has the thread's code built next to it (scripts/build-server.mjs); the
 * sources (tests, the `berth` command) run it through tsx as they run themselves.
 */
function startWorker(): Worker {
  if (!import.meta.url.endsWith('.ts')) return new Worker(new URL('./seal-worker.js', import.meta.url));
  const tsx = import.meta.resolve('tsx/esm/api');
  const source = new URL('./seal-worker.ts', import.meta.url).href;
  return new Worker(`import(${JSON.stringify(tsx)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(source)}); })`, {
    eval: true,
  });
}

const threads: SealThread[] = [];
let nextId = 0;

function forget(gone: SealThread): void {
  const i = threads.indexOf(gone);
  if (i !== -1) threads.splice(i, 1);
}

/** Jobs waiting on a thread, and one more for each item it hashes (its chunks come steadily). */
const load = (t: SealThread) => t.pending.size + t.hashing;

/** The thread with the least load; a new one while every thread has some and there may be more. */
function leastBusy(): SealThread {
  let best = threads[0];
  for (const t of threads) if (!best || load(t) < load(best)) best = t;
  if (!best || (load(best) > 0 && threads.length < MAX_THREADS)) {
    best = new SealThread(forget);
    threads.push(best);
  }
  return best;
}

function submit(op: SealJob['op'], key: Buffer, aad: Buffer, slot: Buffer, length: number): Promise<void> {
  const job: SealJob = { id: nextId++, op, key, aad, memory: memoryOf(slot, length), offset: slot.byteOffset, length };
  return new Promise((resolve, reject) => leastBusy().post(job, { resolve: () => resolve(), reject, op }));
}

/** The shared memory of a slot that can hold `length` plain bytes. */
function memoryOf(slot: Buffer, length: number): SharedArrayBuffer {
  if (!(slot.buffer instanceof SharedArrayBuffer)) throw new TypeError('not a slot (takeSlot)');
  if (!Number.isSafeInteger(length) || length < 0 || length + SEAL_OVERHEAD > slot.length) {
    throw new RangeError(`a slot of ${slot.length} bytes cannot hold ${length} plain bytes`);
  }
  return slot.buffer;
}

/**
 * SHA-256 over the plain bytes of slots, in the order they are added, on one sealing thread (so
 * that the main thread, which receives the bytes, does not also hash them). A slot may be sealed
 * (which overwrites its plain bytes) once its update has resolved.
 */
export class SlotHash {
  private readonly thread = leastBusy();
  private readonly stream = nextId++;
  private digested: Promise<string> | undefined;

  constructor() {
    this.thread.hashing++;
  }

  update(slot: Buffer, length: number): Promise<void> {
    const memory = memoryOf(slot, length);
    const job: HashJob = { id: nextId++, op: 'hash', stream: this.stream, memory, offset: slot.byteOffset, length };
    return new Promise((resolve, reject) => this.thread.post(job, { resolve: () => resolve(), reject, op: job.op }));
  }

  /**
   * Hex digest of everything added; ends the hash (also the way to drop one that is not needed).
   * Later calls give the same promise.
   */
  digest(): Promise<string> {
    if (this.digested) return this.digested;
    this.thread.hashing--;
    const job: HashJob = { id: nextId++, op: 'digest', stream: this.stream };
    this.digested = new Promise((resolve, reject) =>
      this.thread.post(job, { resolve: (done) => resolve(done.digest!), reject, op: job.op }),
    );
    return this.digested;
  }
}

/**
 * Seals the `length` plain bytes in `slotData(slot, length)` in place under `key` (32 bytes) and
 * `aad`; once this resolves, `slotSealed(slot, length)` is the sealed chunk. The slot must not be
 * touched meanwhile.
 */
export function sealSlot(key: Buffer, aad: Buffer, slot: Buffer, length: number): Promise<void> {
  return submit('seal', key, aad, slot, length);
}

/**
 * Opens the sealed chunk in `slotSealed(slot, length)` in place; once this resolves,
 * `slotData(slot, length)` holds its authenticated plain bytes. Rejects with SealError when the
 * chunk does not authenticate (its slot then holds nothing usable).
 */
export function openSlot(key: Buffer, aad: Buffer, slot: Buffer, length: number): Promise<void> {
  return submit('open', key, aad, slot, length);
}
