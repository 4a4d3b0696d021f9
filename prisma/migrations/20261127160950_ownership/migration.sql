-- AlterTable
ALTER TABLE "Artifact" ADD COLUMN     "owner" TEXT NOT NULL DEFAULT '';

-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "owner" TEXT NOT NULL DEFAULT '';

-- AlterTable
ALTER TABLE "Sandbox" ADD COLUMN     "owner" TEXT NOT NULL DEFAULT '';

-- Rows made before the rule: `createdBy` is a person's email or an API key's name. The person of
-- that email, else the one API key of that name, becomes the owner; anything else stays '' (only
-- admins and API keys act on it).
UPDATE "Environment" t SET owner = 'person:' || p.id FROM "Person" p WHERE p."orgId" = t."orgId" AND p.email = t."createdBy";
UPDATE "Sandbox" t SET owner = 'person:' || p.id FROM "Person" p WHERE p."orgId" = t."orgId" AND p.email = t."createdBy";
UPDATE "Artifact" t SET owner = 'person:' || p.id FROM "Person" p WHERE p."orgId" = t."orgId" AND p.email = t."createdBy";
UPDATE "Environment" t SET owner = 'key:' || c.id FROM "Credential" c
 WHERE t.owner = '' AND c."orgId" = t."orgId" AND c.kind = 'api' AND c.name = t."createdBy"
   AND (SELECT count(*) FROM "Credential" d WHERE d."orgId" = c."orgId" AND d.kind = 'api' AND d.name = c.name) = 1;
UPDATE "Sandbox" t SET owner = 'key:' || c.id FROM "Credential" c
 WHERE t.owner = '' AND c."orgId" = t."orgId" AND c.kind = 'api' AND c.name = t."createdBy"
   AND (SELECT count(*) FROM "Credential" d WHERE d."orgId" = c."orgId" AND d.kind = 'api' AND d.name = c.name) = 1;
UPDATE "Artifact" t SET owner = 'key:' || c.id FROM "Credential" c
 WHERE t.owner = '' AND c."orgId" = t."orgId" AND c.kind = 'api' AND c.name = t."createdBy"
   AND (SELECT count(*) FROM "Credential" d WHERE d."orgId" = c."orgId" AND d.kind = 'api' AND d.name = c.name) = 1;
