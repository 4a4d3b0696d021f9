// OCI image references as templates name them (`image`), by Docker's reference grammar
// (github.com/distribution/reference):
//
//   reference  := name [ ":" tag ] [ "@" digest ]
//   name       := [ domain "/" ] path-component { "/" path-component }
//   domain     := host [ ":" port ]        the first component, when it holds "." or ":" or is "localhost"
//   path-comp. := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
//   tag        := [\w][\w.-]{0,127}
//   digest     := "sha256:" 64 lowercase hex digits
//
// and normalised as Docker does: no domain is `docker.io`, a single component on docker.io is under
// `library/`, no tag and no digest is `:latest` — `node:20` is `docker.io/library/node:20`.
import { ValidationError } from './errors';
import { show } from './show';

export const MAX_IMAGE_LENGTH = 255;
export const DEFAULT_REGISTRY = 'docker.io';

export interface ImageRef {
  /** Registry host[:port], e.g. `docker.io`, `localhost:5000`. */
  domain: string;
  /** Repository path in the registry, e.g. `library/node`. */
  path: string;
  tag?: string;
  /** `sha256:<64 hex>` */
  digest?: string;
  /** The normalised reference: `docker.io/library/node:20`. */
  reference: string;
}

const LABEL = '[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?';
const DOMAIN = new RegExp(`^(?:${LABEL}(?:\\.${LABEL})*|\\[[a-fA-F0-9:]+\\])(?::[0-9]+)?$`);
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^sha256:[a-f0-9]{64}$/;
const HEX64 = /^[a-f0-9]{64}$/;
const EXAMPLE = 'such as "docker.io/library/node:20" or "node:20"';

/** Parses and normalises an image reference; a ValidationError names `field` (`image: "Node" …`). */
export function parseImageRef(text: string, field = 'image'): ImageRef {
  const problem = (message: string) => new ValidationError(`${field}: ${message}`, field);
  if (typeof text !== 'string') throw problem(`must be an image reference ${EXAMPLE}`);
  if (text === '') throw problem(`must not be empty (an image reference ${EXAMPLE})`);
  if (text.length > MAX_IMAGE_LENGTH) throw problem(`is longer than ${MAX_IMAGE_LENGTH} characters`);
  const shown = show(text);
  const notReference = () => problem(`${shown} is not an image reference ${EXAMPLE}`);

  let rest = text;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw problem(`${shown} has a digest that is not "sha256:" and 64 lowercase hex digits`);
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) {
      throw problem(`${shown} has an invalid tag (up to 128 letters, digits, "_", "." and "-", not starting with "." or "-")`);
    }
  }
  if (rest === '') throw notReference();

  const components = rest.split('/');
  let domain = DEFAULT_REGISTRY;
  const first = components[0]!;
  if (components.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    if (!DOMAIN.test(first)) throw notReference();
    domain = first === 'index.docker.io' ? DEFAULT_REGISTRY : first;
    components.shift();
  }
  for (const component of components) {
    if (PATH_COMPONENT.test(component)) continue;
    if (PATH_COMPONENT.test(component.toLowerCase())) throw problem(`${shown} must be lowercase in its repository name`);
    throw notReference();
  }
  if (domain === DEFAULT_REGISTRY && components.length === 1) {
    if (HEX64.test(components[0]!)) throw problem(`${shown} is a 64-digit hexadecimal string, which cannot name a repository`);
    components.unshift('library');
  }
  const path = components.join('/');
  const name = `${domain}/${path}`;
  if (name.length > MAX_IMAGE_LENGTH) throw problem(`${shown} names a repository longer than ${MAX_IMAGE_LENGTH} characters`);
  if (tag === undefined && digest === undefined) tag = 'latest';
  const ref: ImageRef = { domain, path, reference: `${name}${tag !== undefined ? `:${tag}` : ''}${digest ? `@${digest}` : ''}` };
  if (tag !== undefined) ref.tag = tag;
  if (digest !== undefined) ref.digest = digest;
  return ref;
}

/** The normalised form of an image reference (`node:20` → `docker.io/library/node:20`). */
export function normalizeImage(text: string, field = 'image'): string {
  return parseImageRef(text, field).reference;
}
