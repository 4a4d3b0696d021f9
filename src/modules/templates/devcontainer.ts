// devcontainer.json → a Berth template (docs/environments.md, "devcontainer.json"). A pure
// function: it reads the text (JSONC: comments and trailing commas allowed), maps what Berth
// honours onto the JSON template format of catalog.ts, lists what it ignores in `warnings`, and
// refuses the rest with a ValidationError whose field is the devcontainer key path
// (`devcontainer.image: must be a string`), which the REST edge answers 422 naming the field.
//
// What maps where:
//   image                                  → image (exactly one of image and build)
//   build.{dockerfile,context,args,target} → `build` of the result (also the legacy top-level
//     dockerFile and context); paths are relative to the devcontainer.json's folder and must stay
//     inside the upload; the image the build makes is the caller's to name (template.image unset)
//   containerEnv, remoteEnv                → env (remoteEnv wins; a remoteEnv null unsets)
//   containerUser, remoteUser              → containerUser, user (remoteUser ?? containerUser)
//   workspaceFolder                        → workdir; default `/workspaces/<template name>`: the
//     spec's default is /workspaces/<the repository's folder>, and a Berth template has no
//     repository folder, so its name stands in for it
//   forwardPorts (+ portsAttributes.label)  → services (a port → 127.0.0.1:PORT; "host:port" as is),
//     named from the label (made a valid name) or `port-PORT`
//   hostRequirements.{cpus,memory,storage} → resources.{cpus,memory,disk} ("4gb" → "4GiB")
//   onCreate/updateContent/postCreate/postStartCommand → lifecycle (string: /bin/sh -c; array: as
//     is; object: one named command per key)
//   customizations.berth.{pool,warm,network,idle,hard,shares,pids} → the template's own fields;
//     pool defaults to the caller's default pool, idle/hard to 30m/6h
// `features` must be empty (features are fetched from registries); `dockerComposeFile` is refused.
//
// Variables: `${containerWorkspaceFolder}`/`…Basename` read as the workdir, and
// `${localWorkspaceFolderBasename}` as the template name. Berth has no developer's machine, so
// `${localEnv:X}` reads as its default (`${localEnv:X:default}`) or empty, as the spec says of an
// unset variable, with a warning. `${containerEnv:X}` is the container's variable: a command in the
// string form (run by /bin/sh) reads it as `${X}`; a variable of env whose value uses it is left
// out with a warning (left as written, `"${containerEnv:PATH}:/x"` would break PATH); elsewhere it
// stays as written, with a warning, like `${localWorkspaceFolder}` and `${devcontainerId}`.
//
// The mapped template is checked with validateTemplateSpec here too, so that its errors name the
// devcontainer key they came from (`devcontainer.hostRequirements.memory: "2tb" … exceeds …`).
import path from 'node:path';
import { type ParseError, parseTree, printParseErrorCode, type Node as TreeNode } from 'jsonc-parser';
import { ValidationError } from '../../kernel/errors';
import { show } from '../../kernel/show';
import { MIB } from '../../kernel/sizes';
import { LIFECYCLE_PHASES, type LifecycleCommand, validateHostPort, validateTemplateSpec } from './catalog';

/** The longest devcontainer.json Berth reads. */
export const MAX_DEVCONTAINER_BYTES = MIB;
/** The deepest nesting of objects and arrays it reads (the parser recurses). */
const MAX_DEPTH = 64;
/** At most this many warnings are listed; the rest are counted in one last line. */
const MAX_WARNINGS = 32;
const FILE = 'devcontainer.json';
const ROOT = 'devcontainer';

export interface Devcontainer {
  /** A template input in the JSON template format, to pass to validateTemplateSpec (catalog.ts) as is. */
  template: Record<string, unknown>;
  /** Set when it has `build`: paths are relative to the build context's root (posix, normalised, inside it). */
  build?: {
    /** The context folder's path inside the upload: '' for its root. */
    context: string;
    /** The Dockerfile's path inside the context. */
    dockerfile: string;
    args: Record<string, string>;
    target?: string;
  };
  /** One line per key Berth does not honour (or variable it does not substitute). */
  warnings: string[];
}

export interface DevcontainerOptions {
  /** The template's name (validated by validateTemplateSpec); also the default workspace folder's. */
  name: string;
  /** The pool names that exist. */
  pools: string[];
  /** The pool used when `customizations.berth.pool` names none. */
  defaultPool: string;
  /** The folder of the upload devcontainer.json was in ('' for its root, '.devcontainer'). */
  folder?: string;
  /**
   * Whether the upload has a file at this path (relative to its root, posix, normalised): when
   * given, a `build.dockerfile` that is not there is refused.
   */
  contextFiles?: (path: string) => boolean;
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

/** Keys with no meaning for Berth that are ignored without a warning. */
const SILENT = new Set(['name', '$schema']);
const BERTH_KEYS = ['pool', 'warm', 'network', 'idle', 'hard', 'shares', 'pids'] as const;
const SIZE_UNITS: Record<string, string> = { '': 'B', kb: 'KiB', mb: 'MiB', gb: 'GiB', tb: 'TiB' };

const fail = (field: string, problem: string) => new ValidationError(`${field}: ${problem}`, field);

/** A key as a field path shows it: long keys cut. */
const seg = (key: string) => (key.length > 100 ? `${key.slice(0, 100)}…` : key);
/** A key as a warning shows it: bare when it is a plain name, else quoted. */
const named = (key: string) => (/^[\w$][\w$:-]{0,63}$/.test(key) ? key : show(key));
/** What the template's fields that sum several devcontainer keys are called in an error. */
const SUMS: Record<string, string> = { env: 'containerEnv and remoteEnv together', lifecycle: 'the lifecycle commands together' };

/** Reads devcontainer.json's text; throws a ValidationError naming the devcontainer key at fault. */
export function parseDevcontainer(text: string, opts: DevcontainerOptions): Devcontainer {
  return new Mapper(readJsonc(text), opts).map();
}

// ---- JSONC

function readJsonc(text: string): JsonObject {
  if (Buffer.byteLength(text) > MAX_DEVCONTAINER_BYTES) throw fail(FILE, 'is larger than 1 MiB');
  const body = text.startsWith('\uFEFF') ? text.slice(1) : text;
  checkDepth(body);
  const errors: ParseError[] = [];
  const tree = parseTree(body, errors, { allowTrailingComma: true, disallowComments: false, allowEmptyContent: false });
  const first = errors[0];
  if (first) throw located(body, first.offset, words(printParseErrorCode(first.error)));
  if (tree?.type !== 'object') throw fail(FILE, 'must be a JSON object');
  return jsonOf(tree) as JsonObject;
}

/** The parser recurses once per level: a deeper text is refused before it runs. */
function checkDepth(text: string): void {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      // A string: to its closing quote (or the end; the parser tells what is wrong then).
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === '\\') i++;
    } else if (c === '/' && text[i + 1] === '/') {
      const end = text.indexOf('\n', i);
      i = end < 0 ? text.length : end;
    } else if (c === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      i = end < 0 ? text.length : end + 1;
    } else if (c === '{' || c === '[') {
      if (++depth > MAX_DEPTH) throw located(text, i, `nested deeper than ${MAX_DEPTH} levels`);
    } else if (c === '}' || c === ']') {
      depth = Math.max(0, depth - 1);
    }
  }
}

/** `devcontainer.json:3:5: property name expected` (line and column from 1). */
function located(text: string, offset: number, problem: string): ValidationError {
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  const column = offset - before.lastIndexOf('\n');
  return new ValidationError(`${FILE}:${line}:${column}: ${problem}`, FILE);
}

/** `PropertyNameExpected` → `property name expected`. */
const words = (code: string) => code.replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase();

/** The tree's value; objects are built with own properties only (a `__proto__` key stays a key). */
function jsonOf(node: TreeNode): Json {
  switch (node.type) {
    case 'object':
      return Object.fromEntries((node.children ?? []).map((p) => [p.children![0]!.value as string, jsonOf(p.children![1]!)]));
    case 'array':
      return (node.children ?? []).map(jsonOf);
    default:
      return node.value as Json;
  }
}

// ---- the mapping

const isObject = (value: Json | undefined): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

class Mapper {
  private readonly warnings: string[] = [];
  private extraWarnings = 0;
  /** Template field path → the devcontainer field it came from, to name errors of validateTemplateSpec. */
  private readonly origins = new Map<string, string>();
  private readonly template: Record<string, unknown> = {};
  private workdir = '';

  constructor(
    private readonly doc: JsonObject,
    private readonly opts: DevcontainerOptions,
  ) {}

  map(): Devcontainer {
    const doc = this.doc;
    const handled = new Set<string>([
      ...SILENT,
      'image',
      'build',
      'dockerFile',
      'context',
      'containerEnv',
      'remoteEnv',
      'containerUser',
      'remoteUser',
      'workspaceFolder',
      'forwardPorts',
      'portsAttributes',
      'hostRequirements',
      ...LIFECYCLE_PHASES,
      'customizations',
      'features',
      'dockerComposeFile',
      'initializeCommand',
    ]);
    if (doc.dockerComposeFile !== undefined) {
      throw fail(`${ROOT}.dockerComposeFile`, 'Docker Compose is not supported; use image or build');
    }
    this.features();
    this.setWorkdir();
    const build = this.imageOrBuild();
    this.env();
    this.users();
    this.ports();
    this.hostRequirements();
    this.lifecycle();
    this.customizations();
    if (doc.initializeCommand !== undefined) {
      this.warn("initializeCommand runs on the developer's machine, which Berth does not have; ignored");
    }
    for (const key of Object.keys(doc)) if (!handled.has(key)) this.warn(`${named(key)} is not supported; ignored`);
    this.check();
    const warnings = [...this.warnings];
    if (this.extraWarnings > 0) warnings.push(`… and ${this.extraWarnings} more warnings`);
    return build ? { template: this.template, build, warnings } : { template: this.template, warnings };
  }

  private warn(line: string): void {
    if (this.warnings.length < MAX_WARNINGS) this.warnings.push(line);
    else this.extraWarnings++;
  }

  private set(field: string, value: unknown, origin: string): void {
    this.template[field] = value;
    this.origins.set(field, origin);
  }

  // -- checks of the value at a devcontainer field

  private string(value: Json | undefined, field: string): string {
    if (typeof value !== 'string') throw fail(field, 'must be a string');
    return value;
  }

  private object(value: Json | undefined, field: string): JsonObject {
    if (!isObject(value)) throw fail(field, 'must be an object');
    return value;
  }

  /** Warns of each key of `object` not in `known`, named `<prefix>.<key>`. */
  private unknownKeys(object: JsonObject, known: readonly string[], prefix: string): void {
    for (const key of Object.keys(object)) if (!known.includes(key)) this.warn(`${prefix}.${named(key)} is not supported; ignored`);
  }

  /**
   * `value` with the variables Berth knows substituted. `${containerEnv:X}` is the container's
   * variable: a shell command (`shell`) reads it as `${X}`; an env value (`env`) that uses it is
   * left out (null); elsewhere it stays as written.
   */
  private substitute(value: string, field: string, mode: 'env' | 'shell' | 'plain' = 'plain'): string | null {
    const key = field.slice(ROOT.length + 1);
    let dropped: string | undefined;
    const out = value.replace(/\$\{([^{}]*)\}/g, (whole, inner: string) => {
      if (inner === 'containerWorkspaceFolder') return this.workdir;
      if (inner === 'containerWorkspaceFolderBasename') return path.posix.basename(this.workdir);
      if (inner === 'localWorkspaceFolderBasename') return this.opts.name;
      const local = /^(?:localEnv|env):([^:]*)(?::(.*))?$/s.exec(inner);
      if (local) {
        const fallback = local[2] ?? '';
        this.warn(`${key} uses ${show(whole)}: Berth has no developer's machine; it reads as ${show(fallback)}`);
        return fallback;
      }
      const container = /^containerEnv:([A-Za-z_][A-Za-z0-9_]*)(?::(.*))?$/s.exec(inner);
      if (container && mode === 'shell') return container[2] === undefined ? `\${${container[1]}}` : `\${${container[1]}:-${container[2]}}`;
      if (container && mode === 'env') {
        dropped ??= whole;
        return whole;
      }
      if (inner.startsWith('containerEnv:') || inner === 'localWorkspaceFolder' || inner === 'devcontainerId') {
        this.warn(`${key} uses ${show(whole)}, which Berth does not substitute; left as written`);
      }
      // Anything else is the command's own (a shell's `${HOME}`), as the spec leaves it.
      return whole;
    });
    if (dropped !== undefined) {
      this.warn(`${key} uses ${show(dropped)}, which Berth does not resolve; the variable is left out`);
      return null;
    }
    return out;
  }

  // -- each key

  private features(): void {
    const { features } = this.doc;
    if (features === undefined) return;
    const field = `${ROOT}.features`;
    if (Object.keys(this.object(features, field)).length > 0) {
      throw fail(field, 'features are fetched from registries; Berth does not install them');
    }
  }

  private setWorkdir(): void {
    const { workspaceFolder } = this.doc;
    const field = `${ROOT}.workspaceFolder`;
    this.workdir = `/workspaces/${this.opts.name}`;
    if (workspaceFolder !== undefined) this.workdir = this.substitute(this.string(workspaceFolder, field), field) ?? this.workdir;
    this.set('workdir', this.workdir, field);
  }

  private imageOrBuild(): Devcontainer['build'] {
    const { image, build, dockerFile, context } = this.doc;
    const hasBuild = build !== undefined || dockerFile !== undefined;
    if (image !== undefined && hasBuild) throw fail(`${ROOT}.image`, 'give either image or build, not both');
    if (image !== undefined) {
      this.set('image', this.string(image, `${ROOT}.image`), `${ROOT}.image`);
      if (context !== undefined) this.warn('context is used only with dockerFile; ignored');
      return undefined;
    }
    if (!hasBuild) throw fail(`${ROOT}.image`, 'is required (or build.dockerfile)');
    const spec = build === undefined ? {} : this.object(build, `${ROOT}.build`);
    this.unknownKeys(spec, ['dockerfile', 'context', 'args', 'target'], 'build');

    const dockerfileField = spec.dockerfile !== undefined || dockerFile === undefined ? `${ROOT}.build.dockerfile` : `${ROOT}.dockerFile`;
    const dockerfileText = spec.dockerfile ?? dockerFile;
    if (dockerfileText === undefined) throw fail(dockerfileField, 'is required');
    const contextField = spec.context !== undefined || context === undefined ? `${ROOT}.build.context` : `${ROOT}.context`;
    const contextText = spec.context ?? context ?? '.';

    const contextPath = this.uploadPath(this.string(contextText, contextField), contextField);
    const dockerfileValue = this.string(dockerfileText, dockerfileField);
    const dockerfilePath = this.uploadPath(dockerfileValue, dockerfileField);
    if (dockerfilePath === '') throw fail(dockerfileField, `${show(dockerfileValue)} names a folder, not a Dockerfile`);
    if (this.opts.contextFiles && !this.opts.contextFiles(dockerfilePath)) {
      throw fail(dockerfileField, `${show(dockerfilePath)} is not in the upload`);
    }
    let inContext = dockerfilePath;
    if (contextPath !== '') {
      if (!dockerfilePath.startsWith(`${contextPath}/`)) {
        throw fail(dockerfileField, `${show(dockerfilePath)} lies outside the build context ${show(contextPath)}`);
      }
      inContext = dockerfilePath.slice(contextPath.length + 1);
    }

    const args: Record<string, string> = {};
    if (spec.args !== undefined) {
      for (const [key, value] of Object.entries(this.object(spec.args, `${ROOT}.build.args`))) {
        const field = `${ROOT}.build.args.${seg(key)}`;
        if (key === '' || key.includes('\0')) throw fail(field, 'is not a build argument name');
        args[key] = this.substitute(this.string(value, field), field) ?? '';
      }
    }
    const out: NonNullable<Devcontainer['build']> = { context: contextPath, dockerfile: inContext, args };
    if (spec.target !== undefined) {
      const target = this.string(spec.target, `${ROOT}.build.target`);
      if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(target))
        throw fail(`${ROOT}.build.target`, `${show(target)} is not a build stage name`);
      out.target = target;
    }
    return out;
  }

  /** A path relative to devcontainer.json's folder, as a normalised path inside the upload ('' its root). */
  private uploadPath(value: string, field: string): string {
    if (/[\p{Cc}\\]/u.test(value)) throw fail(field, `${show(value)} must not contain control characters or "\\"`);
    if (value.startsWith('/')) throw fail(field, `${show(value)} must be relative to the folder of devcontainer.json`);
    const joined = path.posix.normalize(path.posix.join(this.opts.folder || '.', value));
    if (joined === '..' || joined.startsWith('../')) throw fail(field, `${show(value)} leads out of the upload`);
    return joined === '.' ? '' : joined.replace(/\/$/, '');
  }

  private env(): void {
    const env: Record<string, string> = {};
    const from = new Map<string, string>();
    for (const key of ['containerEnv', 'remoteEnv'] as const) {
      const value = this.doc[key];
      if (value === undefined) continue;
      for (const [name, text] of Object.entries(this.object(value, `${ROOT}.${key}`))) {
        const field = `${ROOT}.${key}.${seg(name)}`;
        if (text === null && key === 'remoteEnv') {
          // remoteEnv's null unsets a variable for the remote processes.
          delete env[name];
          continue;
        }
        const substituted = this.substitute(this.string(text, field), field, 'env');
        if (substituted === null) continue;
        env[name] = substituted;
        from.set(name, field);
      }
    }
    if (Object.keys(env).length === 0) return;
    this.template.env = env;
    for (const name of Object.keys(env)) this.origins.set(`env.${name}`, from.get(name)!);
  }

  private users(): void {
    const { containerUser, remoteUser } = this.doc;
    if (containerUser !== undefined) {
      this.set('containerUser', this.string(containerUser, `${ROOT}.containerUser`), `${ROOT}.containerUser`);
    }
    if (remoteUser !== undefined) this.set('user', this.string(remoteUser, `${ROOT}.remoteUser`), `${ROOT}.remoteUser`);
    else if (containerUser !== undefined) this.set('user', containerUser, `${ROOT}.containerUser`);
  }

  private ports(): void {
    const { forwardPorts, portsAttributes } = this.doc;
    const attributes = portsAttributes === undefined ? {} : this.object(portsAttributes, `${ROOT}.portsAttributes`);
    const labels = new Map<string, string>();
    for (const [key, value] of Object.entries(attributes)) {
      const field = `${ROOT}.portsAttributes.${seg(key)}`;
      const attrs = this.object(value, field);
      if (attrs.label !== undefined) labels.set(key, this.string(attrs.label, `${field}.label`));
      this.unknownKeys(attrs, ['label'], `portsAttributes.${named(key)}`);
    }
    const used = new Set<string>();
    if (forwardPorts !== undefined) {
      if (!Array.isArray(forwardPorts)) throw fail(`${ROOT}.forwardPorts`, 'must be an array of ports and "host:port" strings');
      const services: { service: string; target: string }[] = [];
      const names = new Set<string>();
      forwardPorts.forEach((port, j) => {
        const field = `${ROOT}.forwardPorts[${j}]`;
        let target: string;
        let portText: string;
        if (typeof port === 'number') {
          if (!Number.isInteger(port) || port < 1 || port > 65535) throw fail(field, `${port} is not a port (1-65535)`);
          portText = String(port);
          target = `127.0.0.1:${port}`;
        } else if (typeof port === 'string') {
          target = validateHostPort(port, field);
          portText = target.slice(target.lastIndexOf(':') + 1);
        } else {
          throw fail(field, 'must be a port number or a "host:port" string');
        }
        if (services.some((s) => s.target === target)) return;
        const key = typeof port === 'string' && labels.has(port) ? port : portText;
        const label = labels.get(key);
        if (label !== undefined) used.add(key);
        const name = uniqueName(label === undefined ? '' : slug(label), portText, names);
        const i = services.length;
        services.push({ service: name, target });
        this.origins.set(`services[${i}].target`, field);
        this.origins.set(`services[${i}].service`, label === undefined ? field : `${ROOT}.portsAttributes.${seg(key)}.label`);
      });
      if (services.length > 0) this.template.services = services;
    }
    for (const key of labels.keys()) {
      if (!used.has(key)) this.warn(`portsAttributes.${named(key)} names no port of forwardPorts; ignored`);
    }
  }

  private hostRequirements(): void {
    const { hostRequirements } = this.doc;
    if (hostRequirements === undefined) return;
    const prefix = `${ROOT}.hostRequirements`;
    const req = this.object(hostRequirements, prefix);
    const resources: Record<string, unknown> = {};
    if (req.cpus !== undefined) {
      if (typeof req.cpus !== 'number') throw fail(`${prefix}.cpus`, 'must be a number');
      resources.cpus = req.cpus;
      this.origins.set('resources.cpus', `${prefix}.cpus`);
    }
    for (const [key, to] of [
      ['memory', 'memory'],
      ['storage', 'disk'],
    ] as const) {
      if (req[key] === undefined) continue;
      const field = `${prefix}.${key}`;
      const text = this.string(req[key], field);
      const m = /^(\d+(?:\.\d+)?)([tgmk]b)?$/i.exec(text);
      if (!m) throw fail(field, `${show(text)} is not a size such as "4gb" or "512mb"`);
      resources[to] = `${m[1]}${SIZE_UNITS[(m[2] ?? '').toLowerCase()]}`;
      this.origins.set(`resources.${to}`, field);
    }
    if (req.gpu !== undefined && req.gpu !== false) this.warn('hostRequirements.gpu is not supported; ignored');
    this.unknownKeys(req, ['cpus', 'memory', 'storage', 'gpu'], 'hostRequirements');
    if (Object.keys(resources).length > 0) this.template.resources = resources;
  }

  private lifecycle(): void {
    const commands: LifecycleCommand[] = [];
    const add = (command: LifecycleCommand, field: string) => {
      this.origins.set(`lifecycle[${commands.length}]`, field);
      commands.push(command);
    };
    for (const phase of LIFECYCLE_PHASES) {
      const value = this.doc[phase];
      if (value === undefined || value === null) continue;
      const field = `${ROOT}.${phase}`;
      if (isObject(value)) {
        for (const [name, command] of Object.entries(value)) {
          const at = `${field}.${seg(name)}`;
          if (name === '') throw fail(field, 'a command of the object form needs a name (its key); "" is none');
          if (name.length > 100) throw fail(at, 'the name of a command is at most 100 characters');
          if (command === null) continue;
          const argv = this.argv(command, at);
          if (argv) add({ phase, name, argv }, at);
        }
        continue;
      }
      const argv = this.argv(value, field);
      if (argv) add({ phase, argv }, field);
    }
    if (commands.length > 0) this.template.lifecycle = commands;
  }

  /** A command's argv: a string runs under /bin/sh -c, an array as is; null when it is empty. */
  private argv(value: Json, field: string): string[] | null {
    if (typeof value === 'string') {
      if (value.trim() === '') return null;
      if (value.includes('\0')) throw fail(field, 'must not contain NUL characters');
      return ['/bin/sh', '-c', this.substitute(value, field, 'shell') ?? value];
    }
    if (Array.isArray(value)) {
      if (value.length === 0) return null;
      return value.map((item, k) => {
        const text = this.string(item, `${field}[${k}]`);
        if (text.includes('\0')) throw fail(`${field}[${k}]`, 'must not contain NUL characters');
        return this.substitute(text, `${field}[${k}]`) ?? text;
      });
    }
    throw fail(field, 'must be a string, an array of strings or an object of named commands');
  }

  private customizations(): void {
    const { customizations } = this.doc;
    let berth: JsonObject = {};
    if (customizations !== undefined) {
      const prefix = `${ROOT}.customizations`;
      for (const [tool, value] of Object.entries(this.object(customizations, prefix))) {
        if (tool === 'berth') berth = this.object(value, `${prefix}.berth`);
        else this.warn(`customizations.${named(tool)} is not supported; ignored`);
      }
    }
    const prefix = `${ROOT}.customizations.berth`;
    for (const key of Object.keys(berth)) {
      if (!(BERTH_KEYS as readonly string[]).includes(key)) {
        throw fail(`${prefix}.${seg(key)}`, `unknown setting (expected ${BERTH_KEYS.join(', ')})`);
      }
    }
    this.set('pool', berth.pool ?? this.opts.defaultPool, `${prefix}.pool`);
    this.set('idle', berth.idle ?? '30m', `${prefix}.idle`);
    this.set('hard', berth.hard ?? '6h', `${prefix}.hard`);
    for (const key of ['warm', 'network', 'shares'] as const) {
      if (berth[key] !== undefined) this.set(key, berth[key], `${prefix}.${key}`);
    }
    if (berth.pids !== undefined) {
      this.template.resources = { ...(this.template.resources as object | undefined), pids: berth.pids };
      this.origins.set('resources.pids', `${prefix}.pids`);
    }
  }

  /** Runs validateTemplateSpec on the result; its error is told again with the devcontainer field. */
  private check(): void {
    try {
      validateTemplateSpec(this.template, this.opts.name, this.opts.pools);
    } catch (err) {
      if (!(err instanceof ValidationError) || err.field === undefined || err.field === 'name') throw err;
      throw this.translate(err, err.field);
    }
  }

  private translate(err: ValidationError, field: string): ValidationError {
    const problem = err.message.startsWith(`${field}: `) ? err.message.slice(field.length + 2) : err.message;
    let best: string | undefined;
    for (const from of this.origins.keys()) {
      const covers = field === from || field.startsWith(`${from}.`) || field.startsWith(`${from}[`);
      if (covers && (best === undefined || from.length > best.length)) best = from;
    }
    if (best === undefined) return fail(ROOT, `${SUMS[field] ?? field}: ${problem}`);
    const origin = this.origins.get(best)!;
    // Within a command or a service, the devcontainer field is the whole command or port.
    const rest = /^(lifecycle|services)\[/.test(best) ? '' : field.slice(best.length);
    return fail(`${origin}${rest}`, problem);
  }
}

/** A label as a Berth name (src/kernel/labels.ts NAME_PATTERN): lower case, other characters as `-`. */
function slug(label: string): string {
  return label
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .replace(/^[^a-z0-9]+/, '')
    .slice(0, 63)
    .replace(/[-._]+$/, '');
}

/** `name` (or `port-PORT`), with `-PORT` and then a count added until no other service has it. */
function uniqueName(name: string, port: string, taken: Set<string>): string {
  const base = name || `port-${port}`;
  const tries = [base, `${base.slice(0, 62 - port.length)}-${port}`];
  let chosen = tries.find((t) => !taken.has(t));
  for (let n = 2; chosen === undefined; n++) {
    const candidate = `${base.slice(0, 62 - String(n).length)}-${n}`;
    if (!taken.has(candidate)) chosen = candidate;
  }
  taken.add(chosen);
  return chosen;
}
