-- AlterTable
ALTER TABLE "Artifact" ADD COLUMN     "linkEpoch" INTEGER NOT NULL DEFAULT 0;

-- CreateIndex
CREATE INDEX "Artifact_orgId_created_idx" ON "Artifact"("orgId", "created");
