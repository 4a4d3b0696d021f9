import { ConflictError, NotFoundError, ValidationError } from '../../kernel/errors';
import { newId } from '../../kernel/names';
import { hashSecret } from '../../kernel/secrets';
import type { Prisma } from '../../platform/db';
import { issueCliToken, normalizeEmail } from '../credentials';

export const DEFAULT_ORG = 'default';
const ORG_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** Creates an organization with its first admin and returns that admin's CLI token. */
export async function createOrganization(prisma: Prisma, name: string, adminEmail: string) {
  if (!ORG_NAME.test(name)) throw new ValidationError(`organization name "${name}" must match ${ORG_NAME}`, 'name');
  const email = normalizeEmail(adminEmail);
  return prisma.$transaction(async (tx) => {
    if (await tx.organization.findUnique({ where: { name } })) throw new ConflictError(`organization "${name}" already exists`);
    const org = await tx.organization.create({ data: { id: newId('org'), name } });
    const person = await tx.person.create({ data: { id: newId('usr'), orgId: org.id, email, admin: true } });
    const { secret } = await issueCliToken(tx as Prisma, person, { name: 'first admin', createdBy: 'berth org create', expires: null });
    return { org, person, secret };
  });
}

/**
 * The operator's way back in (`berth token create --org <name> --admin [--email <admin>]`): a new
 * CLI token for an organization's admin, the one named by email or else its first admin. For when
 * the first start's token was lost, or every admin token was revoked.
 */
export async function issueAdminToken(prisma: Prisma, orgName: string, adminEmail?: string) {
  return prisma.$transaction(async (tx) => {
    const org = await tx.organization.findUnique({ where: { name: orgName } });
    if (!org) throw new NotFoundError(`organization "${orgName}"`);
    const email = adminEmail === undefined ? undefined : normalizeEmail(adminEmail);
    const person = email
      ? await tx.person.findUnique({ where: { orgId_email: { orgId: org.id, email } } })
      : await tx.person.findFirst({ where: { orgId: org.id, admin: true }, orderBy: [{ created: 'asc' }, { id: 'asc' }] });
    if (!person) throw new NotFoundError(email ? `member ${email} of organization "${orgName}"` : `an admin of organization "${orgName}"`);
    if (!person.admin) throw new ValidationError(`${person.email} is not an admin of organization "${orgName}"`, 'email');
    const { secret } = await issueCliToken(tx as Prisma, person, { name: 'operator', createdBy: 'berth token create', expires: null });
    return { org, person, secret };
  });
}

/**
 * Makes sure the default organization exists and, with BOOTSTRAP_TOKEN, that its admin holds a
 * CLI token with exactly that value, made once: a revoked one stays revoked (an operator revoked
 * it for a reason), which `bootstrapRevoked` reports. Returns the token to print when one was generated.
 */
export async function ensureDefaultOrganization(
  prisma: Prisma,
  bootstrapToken: string | undefined,
): Promise<{ generatedToken?: string; bootstrapRevoked?: boolean }> {
  return prisma.$transaction(async (tx) => {
    let org = await tx.organization.findUnique({ where: { name: DEFAULT_ORG } });
    const fresh = !org;
    org ??= await tx.organization.create({ data: { id: newId('org'), name: DEFAULT_ORG } });
    const email = 'admin@berth.local';
    const person =
      (await tx.person.findUnique({ where: { orgId_email: { orgId: org.id, email } } })) ??
      (await tx.person.create({ data: { id: newId('usr'), orgId: org.id, email, admin: true } }));
    if (bootstrapToken) {
      const existing = await tx.credential.findUnique({ where: { secretHash: hashSecret(bootstrapToken) } });
      if (existing && existing.personId !== person.id) {
        throw new Error('BOOTSTRAP_TOKEN is already in use by another credential');
      }
      if (!existing) {
        await issueCliToken(tx as Prisma, person, {
          name: 'bootstrap',
          createdBy: 'BOOTSTRAP_TOKEN',
          expires: null,
          secret: bootstrapToken,
        });
        return {};
      }
      return existing.revoked ? { bootstrapRevoked: true } : {};
    }
    if (!fresh) return {};
    const { secret } = await issueCliToken(tx as Prisma, person, { name: 'first start', createdBy: 'berth', expires: null });
    return { generatedToken: secret };
  });
}
