-- AlterTable
ALTER TABLE "Credential" ADD COLUMN     "nodeId" TEXT;

-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "nodeId" TEXT;

-- AlterTable
ALTER TABLE "Node" ADD COLUMN     "remoteId" TEXT;

-- CreateTable
CREATE TABLE "RemoteNode" (
    "id" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "pool" TEXT NOT NULL,
    "state" TEXT NOT NULL DEFAULT 'lost',
    "slots" INTEGER NOT NULL DEFAULT 0,
    "lastSeen" TIMESTAMPTZ(3),
    "draining" TIMESTAMPTZ(3),
    "revoked" TIMESTAMPTZ(3),
    "createdBy" TEXT NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "RemoteNode_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "RemoteNode_orgId_idx" ON "RemoteNode"("orgId");

-- CreateIndex
CREATE INDEX "RemoteNode_state_lastSeen_idx" ON "RemoteNode"("state", "lastSeen");

-- CreateIndex
CREATE INDEX "Node_remoteId_idx" ON "Node"("remoteId");
