-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "startMs" INTEGER NOT NULL DEFAULT 0;

-- AlterTable
ALTER TABLE "EnvironmentEvent" ADD COLUMN     "payload" JSONB NOT NULL;

-- CreateIndex
CREATE INDEX "EnvironmentEvent_orgId_seq_idx" ON "EnvironmentEvent"("orgId", "seq");
