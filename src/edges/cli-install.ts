// Serves the `berth` command line to the machines that use this server (docs/cli.md, "Install"):
//   GET /cli/berth.mjs  the single-file CLI (dist/install/berth.mjs, scripts/build-cli-standalone.mjs)
//   GET /install.sh     a POSIX sh script that installs it as `berth`, with this server as its default
// Neither needs a credential, and neither holds one: the file is the same for everyone, the
// script differs only by the server's URL, which it takes from PUBLIC_URL when that is set (a Host
// header cannot steer it then) and otherwise from the request, checked character by character.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { packagePath } from '../platform/paths';
import { HOST_HEADER } from './console';
import { sendError } from './http/respond';

export const CLI_FILE = packagePath('dist', 'install', 'berth.mjs');
export const CLI_PATH = '/cli/berth.mjs';
export const INSTALL_PATH = '/install.sh';

/** The second line of the served file; install.sh replaces it with the server's URL (src/cli/default-url.ts). */
const URL_LINE = 'var BERTH_INSTALLED_URL;';

/**
 * What a URL put in the script may hold: RFC 3986's characters. Of them only `'` needs quoting
 * in sh (done below), and none ends the JavaScript string the installer writes it into.
 */
const SAFE_URL = /^https?:\/\/[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]+$/;

const NO_SNIFF = { 'x-content-type-options': 'nosniff' };

export interface CliInstallOptions {
  /** PUBLIC_URL as set (not the bound address the server fills in when it is not). */
  publicUrl?: string;
  /** TRUST_PROXY: with proxies in front, the nearest one's X-Forwarded-Proto and X-Forwarded-Host name the URL. */
  trustProxy: number;
  file?: string;
}

export interface CliInstallHandler {
  /** Answers GET/HEAD of /cli/berth.mjs and /install.sh; false for anything else. */
  handle(req: IncomingMessage, res: ServerResponse): Promise<boolean>;
}

/** `value` as one sh word. */
function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

/** The last entry of a header a proxy appends to: the one the nearest (trusted) proxy wrote. */
function lastEntry(header: string | string[] | undefined): string | undefined {
  const value = Array.isArray(header) ? header.at(-1) : header;
  return value?.split(',').at(-1)?.trim() || undefined;
}

/** PUBLIC_URL without credentials, query or trailing slash; or null when it cannot go in the script. */
function publicBase(publicUrl: string): string | null {
  const url = new URL(publicUrl);
  const base = `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
  return SAFE_URL.test(base) ? base : null;
}

/** The URL the client reached this server at, from its Host (or a trusted proxy's headers); null when they are not a host and port. */
function requestBase(req: IncomingMessage, trustProxy: number): string | null {
  const forwarded = trustProxy > 0;
  const proto = (forwarded && lastEntry(req.headers['x-forwarded-proto'])?.toLowerCase()) || 'http';
  const host = (forwarded && lastEntry(req.headers['x-forwarded-host'])) || req.headers.host;
  if ((proto !== 'http' && proto !== 'https') || !host || !HOST_HEADER.test(host)) return null;
  const base = `${proto}://${host.toLowerCase()}`;
  return SAFE_URL.test(base) ? base : null;
}

/** The install script for the server at `url`. */
export function installScript(url: string): string {
  return `#!/bin/sh
# Installs the berth command line of this Berth server (docs/cli.md, "Install"):
#   curl -fsSL <server>/install.sh | sh                   into ~/.local/bin
#   curl -fsSL <server>/install.sh | sh -s -- --dir DIR   into DIR
# One file, berth: the single-file CLI of <server>/cli/berth.mjs, for Node.js 20 or later, whose
# default server is this one (BERTH_URL, --server and \`berth login\` still win). It holds no
# credential. Everything runs from main, the last line: a cut download runs nothing.
set -eu

BERTH_SERVER=${shellQuote(url)}

fail() {
  printf 'berth install: %s\\n' "$*" >&2
  exit 1
}

download() {
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$2" "$1"
  else
    fail 'curl or wget is needed to download berth'
  fi
}

main() {
  dir=
  while [ "$#" -gt 0 ]; do
    case $1 in
      --dir)
        [ "$#" -ge 2 ] || fail '--dir needs a folder'
        dir=$2
        shift 2
        ;;
      --dir=*)
        dir=\${1#--dir=}
        shift
        ;;
      -h | --help)
        echo 'usage: sh install.sh [--dir DIR]   (default: ~/.local/bin)'
        return 0
        ;;
      *) fail "unknown option $1 (usage: sh install.sh [--dir DIR])" ;;
    esac
  done
  if [ -z "$dir" ]; then
    [ -n "\${HOME:-}" ] || fail 'HOME is not set: pass --dir DIR'
    dir=$HOME/.local/bin
  fi

  command -v node >/dev/null 2>&1 || fail 'berth needs Node.js 20 or later, and there is no node on PATH (https://nodejs.org)'
  major=$(node -p 'process.versions.node.split(".")[0]') || fail 'node on PATH does not run'
  [ "$major" -ge 20 ] 2>/dev/null || fail "berth needs Node.js 20 or later; node on PATH is $(node --version)"

  mkdir -p -- "$dir" || fail "cannot make $dir"
  # CDPATH would make cd print the folder too.
  dir=$(CDPATH='' cd -- "$dir" && pwd)
  [ -w "$dir" ] || fail "cannot write to $dir: pass --dir DIR"
  # Written beside berth and renamed over it: a command that starts meanwhile runs the old or the new one, whole.
  part=$dir/.berth.$$.download
  next=$dir/.berth.$$.new
  trap 'rm -f "$part" "$next"' EXIT
  trap 'exit 1' HUP INT TERM
  download "$BERTH_SERVER/cli/berth.mjs" "$part" || fail "cannot download $BERTH_SERVER/cli/berth.mjs"
  [ "$(sed -n 2p "$part")" = '${URL_LINE}' ] || fail "$BERTH_SERVER/cli/berth.mjs is not the berth command line"
  {
    sed -n 1p "$part"
    printf 'var BERTH_INSTALLED_URL = "%s";\\n' "$BERTH_SERVER"
    tail -n +3 "$part"
  } >"$next"
  chmod 755 "$next"
  mv -f "$next" "$dir/berth"
  version=$("$dir/berth" --version) || fail "$dir/berth was installed but does not run"
  echo "berth $version installed as $dir/berth; its server: $BERTH_SERVER"

  case ":\${PATH:-}:" in
    *":$dir:"*) ;;
    *)
      echo "$dir is not on PATH: add it, e.g. in ~/.profile:"
      # shellcheck disable=SC2016 # $PATH is for the user's profile, as written
      printf '  export PATH="%s:$PATH"\\n' "$dir"
      ;;
  esac
  echo 'Next: berth login (the console makes a token under Settings), then berth env ls'
}

main "$@"
`;
}

export function createCliInstallHandler(options: CliInstallOptions): CliInstallHandler {
  const file = options.file ?? CLI_FILE;
  const fixedBase = options.publicUrl === undefined ? undefined : publicBase(options.publicUrl);

  async function sendCli(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const stats = await stat(file).catch(() => undefined);
    if (!stats?.isFile()) {
      return sendError(res, 'not_found', 'the berth command line is not built here (dist/install/berth.mjs): `npm start` builds it');
    }
    const etag = `"${stats.size.toString(36)}-${Math.trunc(stats.mtimeMs).toString(36)}"`;
    const headers = {
      ...NO_SNIFF,
      'content-type': 'text/javascript; charset=utf-8',
      // Revalidated each time: a new build is what the next install gets.
      'cache-control': 'no-cache',
      'last-modified': stats.mtime.toUTCString(),
      etag,
    };
    if (matches(req, etag)) return void res.writeHead(304, headers).end();
    res.writeHead(200, { ...headers, 'content-length': stats.size });
    if (req.method === 'HEAD') return void res.end();
    createReadStream(file)
      .on('error', () => res.destroy())
      .pipe(res);
  }

  function sendScript(req: IncomingMessage, res: ServerResponse): void {
    const base = fixedBase === undefined ? requestBase(req, options.trustProxy) : fixedBase;
    if (base === null) {
      if (fixedBase === null) sendError(res, 'internal', 'PUBLIC_URL holds characters that cannot go in the install script');
      else sendError(res, 'bad_request', 'the Host header is not a host name and port, so the install script cannot name this server');
      return;
    }
    const script = installScript(base);
    const etag = `"${createHash('sha256').update(script).digest('base64url').slice(0, 27)}"`;
    const headers: Record<string, string> = {
      ...NO_SNIFF,
      'content-type': 'text/plain; charset=utf-8',
      'cache-control': 'no-cache',
      etag,
    };
    // Made from the request's headers: a cache must not hand one client's script to another.
    if (fixedBase === undefined) headers.vary = options.trustProxy > 0 ? 'Host, X-Forwarded-Host, X-Forwarded-Proto' : 'Host';
    if (matches(req, etag)) return void res.writeHead(304, headers).end();
    res.writeHead(200, { ...headers, 'content-length': String(Buffer.byteLength(script)) });
    res.end(req.method === 'HEAD' ? undefined : script);
  }

  return {
    async handle(req, res) {
      if (req.method !== 'GET' && req.method !== 'HEAD') return false;
      const path = (req.url ?? '/').split('?')[0];
      if (path === CLI_PATH) await sendCli(req, res);
      else if (path === INSTALL_PATH) sendScript(req, res);
      else return false;
      return true;
    },
  };
}

function matches(req: IncomingMessage, etag: string): boolean {
  return req.headers['if-none-match']?.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag) ?? false;
}
