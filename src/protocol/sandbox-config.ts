// The sandbox configuration (docs/sandboxes.md, "Sandbox configuration"): what the server hands a
// sandbox agent at the join and on its `sandboxConfig` subscription. The server builds values of
// these types; the agent parses what it receives with SandboxConfig and runs nothing it refuses.
// The bounds are the server's own when it wires an environment, so a config it built always passes.
import { z } from 'zod';
import { LIVE_STATES } from '../kernel/environment-states';
import { validateRelativePath } from '../kernel/sync-rules';
import { AGENT_FOLDER, inAgentFolder } from './agent-folder';
import { IncludePatterns } from './sync-rules';

/** Loopback ports handed out to imports: 10000-29999. */
export const PORT_MIN = 10_000;
export const PORT_MAX = 29_999;
/** The most extra files one environment request may add. */
export const MAX_EXTRA_FILES = 100;

/**
 * A path relative to a folder, never `..` out of it; `onSandbox`: relative to the agent's folder,
 * where .berth (the agent's credential) is out of reach too.
 */
const relativePath = (opts: { allowRoot?: boolean; onSandbox?: boolean } = {}) =>
  z.string().check((ctx) => {
    let normal: string;
    try {
      normal = validateRelativePath(ctx.value, 'path', opts);
    } catch (error) {
      ctx.issues.push({ code: 'custom', input: ctx.value, message: (error as Error).message.replace(/^path: /, '') });
      return;
    }
    if (opts.onSandbox && inAgentFolder(normal)) {
      ctx.issues.push({ code: 'custom', input: ctx.value, message: `must not reach ${AGENT_FOLDER}/` });
    }
  });

/** `host:port`, an IPv6 host in brackets. */
const address = z.string().regex(/^(?:\[[^\]]+\]|[^:[\]]+):\d{1,5}$/, 'must be host:port');

export const ConfigImport = z.object({
  service: z.string().min(1),
  /** Where the agent listens: a loopback port the server picked (PORT_MIN-PORT_MAX). */
  listen: z.string().check((ctx) => {
    const m = /^127\.0\.0\.1:(\d{5})$/.exec(ctx.value);
    const port = m ? Number(m[1]) : 0;
    if (port < PORT_MIN || port > PORT_MAX) {
      ctx.issues.push({ code: 'custom', input: ctx.value, message: `must be 127.0.0.1:<port> with a port in ${PORT_MIN}-${PORT_MAX}` });
    }
  }),
  /** The service's address inside the environment (the template's). */
  target: address,
});
export type ConfigImport = z.infer<typeof ConfigImport>;

/** A share's sync rules: SyncRules of src/kernel/sync-rules.ts, with the default ignores spelled out. */
export const ConfigSync = z.object({
  include: IncludePatterns,
  noIgnore: z.boolean(),
  defaultIgnores: z.array(z.string()),
  /** Extra files: destination in the share to source relative to the agent's folder. */
  files: z
    .record(relativePath(), relativePath({ onSandbox: true }))
    .refine((files) => Object.keys(files).length <= MAX_EXTRA_FILES, `at most ${MAX_EXTRA_FILES} extra files`),
});
export type ConfigSync = z.infer<typeof ConfigSync>;

export const ConfigShare = z.object({
  name: z.string().min(1),
  direction: z.enum(['in', 'out']),
  envPath: z.string().startsWith('/'),
  /** The share's folder, relative to the agent's folder (`.` is the folder itself). */
  localPath: relativePath({ allowRoot: true, onSandbox: true }),
  /** Destinations of extra files, relative to the share folder (the keys of `sync.files`). */
  files: z.array(relativePath()).max(MAX_EXTRA_FILES),
  /** What the agent sends (in) or receives (out) from the share folder. */
  sync: ConfigSync,
});
export type ConfigShare = z.infer<typeof ConfigShare>;

export const ConfigEnvironment = z.object({
  id: z.string().min(1),
  name: z.string().min(1),
  /** Only live environments are listed; an ended one leaves the config. */
  state: z.enum(LIVE_STATES),
  template: z.string().min(1),
  project: z.string().min(1),
  /** Once the environment has one. */
  node: z.string().min(1).optional(),
  imports: z.array(ConfigImport),
  shares: z.array(ConfigShare),
});
export type ConfigEnvironment = z.infer<typeof ConfigEnvironment>;

export const KeyringEntry = z.object({
  project: z.string().min(1),
  version: z.number().int().positive(),
  /** base64 of the 32-byte data key. */
  key: z.string().regex(/^[A-Za-z0-9+/]{43}=$/, 'must be the base64 of 32 bytes'),
});
export type KeyringEntry = z.infer<typeof KeyringEntry>;

export const SandboxConfig = z.object({
  sandbox: z.object({ id: z.string().min(1), name: z.string().min(1), org: z.string().min(1), removed: z.iso.datetime().optional() }),
  /** Grows on every change; an agent applies a config only when it is newer than its own. */
  version: z.number().int().nonnegative(),
  environments: z.array(ConfigEnvironment),
  /** Only in the config the sandbox's own agent reads. */
  keyring: z.array(KeyringEntry).optional(),
});
export type SandboxConfig = z.infer<typeof SandboxConfig>;

/** The answer of POST /v1/sandboxes/join. */
export const JoinAnswer = z.object({
  sandbox: z.object({ id: z.string().min(1), name: z.string().min(1), org: z.string().min(1) }),
  config: SandboxConfig,
  /** The sandbox's own credential (`bsc_…`), shown this once. */
  credential: z.string().min(1),
});
export type JoinAnswer = z.infer<typeof JoinAnswer>;

/** What a refused config says: each issue as `path: message`, for the agent's log. */
export function configProblems(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join('.') || '(config)'}: ${i.message}`).join('; ');
}
