import { rm } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:http';
import { join } from 'node:path';
import { sendError, sendJson } from '../edges/http/respond';
import { DomainError } from '../kernel/errors';
import { createOrganization, issueAdminToken, setOrgLimits } from '../modules/organizations';
import type { Prisma } from '../platform/db';
import type { Config } from './config';

/**
 * The embedded PGlite belongs to one process. While a server runs on a DATA_DIR, operator
 * commands reach it through this Unix socket inside DATA_DIR (mode 0700: the file system is the
 * access control); with no server, they open the database themselves.
 */
// The operator commands (src/cli/operator.ts) run these on the database when no server does.
export { createOrganization, issueAdminToken, setOrgLimits };

export function operatorSocketPath(dataDir: string): string {
  return join(dataDir, 'berth.sock');
}

/** What the token-issuing operator commands answer: the organization, the admin and the new token's secret. */
export interface IssuedToken {
  org: { id: string; name: string };
  person: { email: string };
  secret: string;
}

/** What `berth org limits` answers: the limits that then hold for the organization. */
export type OrgLimitsReply = Awaited<ReturnType<typeof setOrgLimits>>;

type Command = (body: Record<string, unknown>) => Promise<unknown>;

const optional = (value: unknown) => (value === undefined ? undefined : String(value));

/** What `IssuedToken` shows of an issued token (the rest of the records stays here). */
const issued = async (made: Promise<{ org: { id: string; name: string }; person: { email: string }; secret: string }>) => {
  const { org, person, secret } = await made;
  return { org: { id: org.id, name: org.name }, person: { email: person.email }, secret } satisfies IssuedToken;
};

export async function startOperatorSocket(prisma: Prisma, config: Config): Promise<Server | undefined> {
  const path = operatorSocketPath(config.dataDir);
  if (path.length >= 100) return undefined;
  await rm(path, { force: true });
  const commands: Record<string, Command> = {
    '/orgs': (body) => issued(createOrganization(prisma, String(body.name), String(body.admin))),
    '/tokens': (body) => issued(issueAdminToken(prisma, String(body.org), optional(body.email))),
    '/org-limits': (body) =>
      setOrgLimits({ config }, prisma, String(body.org), { storage: optional(body.storage), poolShare: optional(body.poolShare) }),
  };
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const command = req.method === 'POST' ? commands[req.url ?? ''] : undefined;
    if (!command) return sendError(res, 'not_found', 'unknown operator command');
    try {
      sendJson(res, 201, await command(JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>));
    } catch (error) {
      if (error instanceof DomainError) sendError(res, error.code, error.message);
      else sendError(res, 'internal', error instanceof Error ? error.message : String(error));
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => resolve());
  });
  return server;
}

/** Sends a command to a server running on DATA_DIR; undefined when none is listening. */
export function callOperatorSocket(dataDir: string, path: string, body: unknown): Promise<{ status: number; body: unknown } | undefined> {
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath: operatorSocketPath(dataDir), path, method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 500, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) }));
        res.on('error', reject);
      },
    );
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ECONNREFUSED') resolve(undefined);
      else reject(err);
    });
    req.end(JSON.stringify(body));
  });
}
