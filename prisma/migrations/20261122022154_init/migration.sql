-- CreateTable
CREATE TABLE "Organization" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Organization_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Person" (
    "id" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "email" TEXT NOT NULL,
    "admin" BOOLEAN NOT NULL DEFAULT false,
    "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Person_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Credential" (
    "id" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "personId" TEXT,
    "sandboxId" TEXT,
    "name" TEXT NOT NULL,
    "admin" BOOLEAN NOT NULL DEFAULT false,
    "secretHash" TEXT NOT NULL,
    "prefix" TEXT NOT NULL,
    "createdBy" TEXT NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires" TIMESTAMPTZ(3),
    "revoked" TIMESTAMPTZ(3),
    "lastUsed" TIMESTAMPTZ(3),

    CONSTRAINT "Credential_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "AuthFailure" (
    "address" TEXT NOT NULL,
    "windowStart" TIMESTAMPTZ(3) NOT NULL,
    "failures" INTEGER NOT NULL,
    "blockedUntil" TIMESTAMPTZ(3),

    CONSTRAINT "AuthFailure_pkey" PRIMARY KEY ("address")
);

-- CreateTable
CREATE TABLE "Template" (
    "id" TEXT NOT NULL,
    "orgId" TEXT NOT NULL DEFAULT '',
    "name" TEXT NOT NULL,
    "pool" TEXT NOT NULL,
    "spec" JSONB NOT NULL,
    "updated" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Template_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Node" (
    "id" TEXT NOT NULL,
    "pool" TEXT NOT NULL,
    "environmentId" TEXT,
    "updated" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Node_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Environment" (
    "id" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "template" TEXT NOT NULL,
    "pool" TEXT NOT NULL,
    "state" TEXT NOT NULL,
    "node" TEXT,
    "sandboxId" TEXT,
    "labels" JSONB NOT NULL DEFAULT '{}',
    "project" TEXT NOT NULL,
    "error" TEXT,
    "createdBy" TEXT NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "starting" TIMESTAMPTZ(3),
    "ready" TIMESTAMPTZ(3),
    "readyMs" INTEGER,
    "stopped" TIMESTAMPTZ(3),
    "expires" TIMESTAMPTZ(3) NOT NULL,
    "idleUntil" TIMESTAMPTZ(3) NOT NULL,
    "idleMs" INTEGER NOT NULL,
    "hardMs" INTEGER NOT NULL,
    "exports" JSONB NOT NULL DEFAULT '[]',
    "shares" JSONB NOT NULL DEFAULT '[]',
    "sync" JSONB NOT NULL DEFAULT '{}',
    "snapshot" TEXT,
    "restore" TEXT[],
    "restored" JSONB,
    "queueSeq" BIGSERIAL NOT NULL,
    "version" INTEGER NOT NULL DEFAULT 0,

    CONSTRAINT "Environment_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "EnvironmentEvent" (
    "seq" BIGSERIAL NOT NULL,
    "orgId" TEXT NOT NULL,
    "environmentId" TEXT NOT NULL,
    "version" INTEGER NOT NULL,
    "state" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "EnvironmentEvent_pkey" PRIMARY KEY ("seq")
);

-- CreateTable
CREATE TABLE "Exec" (
    "id" SERIAL NOT NULL,
    "environmentId" TEXT NOT NULL,
    "time" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "actor" TEXT NOT NULL,
    "command" TEXT NOT NULL,
    "exitCode" INTEGER NOT NULL,
    "durationMs" INTEGER NOT NULL,

    CONSTRAINT "Exec_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Quota" (
    "orgId" TEXT NOT NULL,
    "template" TEXT NOT NULL,
    "maxLeases" INTEGER NOT NULL,
    "idleMs" INTEGER NOT NULL,
    "hardMs" INTEGER NOT NULL,
    "updated" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Quota_pkey" PRIMARY KEY ("orgId","template")
);

-- CreateTable
CREATE TABLE "Sandbox" (
    "id" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "createdBy" TEXT NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "lastSeen" TIMESTAMPTZ(3),
    "removed" TIMESTAMPTZ(3),
    "version" INTEGER NOT NULL DEFAULT 0,

    CONSTRAINT "Sandbox_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "JoinKey" (
    "hash" TEXT NOT NULL,
    "sandboxId" TEXT NOT NULL,
    "expires" TIMESTAMPTZ(3) NOT NULL,
    "used" TIMESTAMPTZ(3),

    CONSTRAINT "JoinKey_pkey" PRIMARY KEY ("hash")
);

-- CreateTable
CREATE TABLE "ProjectKey" (
    "orgId" TEXT NOT NULL,
    "project" TEXT NOT NULL,
    "version" INTEGER NOT NULL,
    "wrapped" BYTEA NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "ProjectKey_pkey" PRIMARY KEY ("orgId","project","version")
);

-- CreateTable
CREATE TABLE "Shred" (
    "orgId" TEXT NOT NULL,
    "project" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "finished" TIMESTAMPTZ(3),

    CONSTRAINT "Shred_pkey" PRIMARY KEY ("orgId","project","at")
);

-- CreateTable
CREATE TABLE "Artifact" (
    "id" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "project" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "size" BIGINT NOT NULL,
    "sha256" TEXT NOT NULL,
    "contentType" TEXT NOT NULL,
    "labels" JSONB NOT NULL DEFAULT '{}',
    "keyVersion" INTEGER NOT NULL,
    "manifest" TEXT NOT NULL,
    "segments" JSONB NOT NULL DEFAULT '[]',
    "chunks" INTEGER NOT NULL,
    "sealedBytes" BIGINT NOT NULL,
    "createdBy" TEXT NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires" TIMESTAMPTZ(3) NOT NULL,
    "status" TEXT NOT NULL DEFAULT 'stored',

    CONSTRAINT "Artifact_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Snapshot" (
    "id" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "project" TEXT NOT NULL,
    "key" TEXT NOT NULL,
    "share" TEXT NOT NULL,
    "root" TEXT NOT NULL,
    "keyVersion" INTEGER NOT NULL,
    "segments" JSONB NOT NULL DEFAULT '[]',
    "files" INTEGER NOT NULL,
    "bytes" BIGINT NOT NULL,
    "objects" INTEGER NOT NULL,
    "sealedBytes" BIGINT NOT NULL,
    "lease" TEXT NOT NULL,
    "createdBy" TEXT NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Snapshot_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "Organization_name_key" ON "Organization"("name");

-- CreateIndex
CREATE UNIQUE INDEX "Person_orgId_email_key" ON "Person"("orgId", "email");

-- CreateIndex
CREATE UNIQUE INDEX "Credential_secretHash_key" ON "Credential"("secretHash");

-- CreateIndex
CREATE INDEX "Credential_orgId_kind_idx" ON "Credential"("orgId", "kind");

-- CreateIndex
CREATE UNIQUE INDEX "Template_orgId_name_key" ON "Template"("orgId", "name");

-- CreateIndex
CREATE UNIQUE INDEX "Node_environmentId_key" ON "Node"("environmentId");

-- CreateIndex
CREATE INDEX "Node_pool_idx" ON "Node"("pool");

-- CreateIndex
CREATE UNIQUE INDEX "Environment_name_key" ON "Environment"("name");

-- CreateIndex
CREATE INDEX "Environment_orgId_state_idx" ON "Environment"("orgId", "state");

-- CreateIndex
CREATE INDEX "Environment_pool_state_queueSeq_idx" ON "Environment"("pool", "state", "queueSeq");

-- CreateIndex
CREATE INDEX "Environment_state_idleUntil_idx" ON "Environment"("state", "idleUntil");

-- CreateIndex
CREATE INDEX "Environment_state_expires_idx" ON "Environment"("state", "expires");

-- CreateIndex
CREATE INDEX "EnvironmentEvent_environmentId_version_idx" ON "EnvironmentEvent"("environmentId", "version");

-- CreateIndex
CREATE INDEX "Exec_environmentId_id_idx" ON "Exec"("environmentId", "id");

-- CreateIndex
CREATE INDEX "Sandbox_orgId_idx" ON "Sandbox"("orgId");

-- CreateIndex
CREATE INDEX "Artifact_orgId_project_created_idx" ON "Artifact"("orgId", "project", "created");

-- CreateIndex
CREATE INDEX "Artifact_expires_idx" ON "Artifact"("expires");

-- CreateIndex
CREATE INDEX "Snapshot_orgId_project_key_created_idx" ON "Snapshot"("orgId", "project", "key", "created");

-- AddForeignKey
ALTER TABLE "Person" ADD CONSTRAINT "Person_orgId_fkey" FOREIGN KEY ("orgId") REFERENCES "Organization"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Credential" ADD CONSTRAINT "Credential_orgId_fkey" FOREIGN KEY ("orgId") REFERENCES "Organization"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Credential" ADD CONSTRAINT "Credential_personId_fkey" FOREIGN KEY ("personId") REFERENCES "Person"("id") ON DELETE SET NULL ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "Exec" ADD CONSTRAINT "Exec_environmentId_fkey" FOREIGN KEY ("environmentId") REFERENCES "Environment"("id") ON DELETE CASCADE ON UPDATE CASCADE;
