-- CreateTable
CREATE TABLE "AuditEvent" (
    "id" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL,
    "action" TEXT NOT NULL,
    "actorKind" TEXT NOT NULL,
    "actorId" TEXT NOT NULL,
    "actorName" TEXT NOT NULL,
    "targetKind" TEXT NOT NULL,
    "targetId" TEXT NOT NULL,
    "address" TEXT NOT NULL,
    "outcome" TEXT NOT NULL,
    "detail" JSONB,

    CONSTRAINT "AuditEvent_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "AuditEvent_orgId_created_id_idx" ON "AuditEvent"("orgId", "created" DESC, "id" DESC);

-- CreateIndex
CREATE INDEX "AuditEvent_orgId_action_created_idx" ON "AuditEvent"("orgId", "action", "created" DESC);

-- CreateIndex
CREATE INDEX "AuditEvent_orgId_actorId_created_idx" ON "AuditEvent"("orgId", "actorId", "created" DESC);

-- CreateIndex
CREATE INDEX "AuditEvent_orgId_targetId_created_idx" ON "AuditEvent"("orgId", "targetId", "created" DESC);

-- CreateIndex
CREATE INDEX "AuditEvent_created_idx" ON "AuditEvent"("created");
