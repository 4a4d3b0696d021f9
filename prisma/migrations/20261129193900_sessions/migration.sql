-- CreateTable
CREATE TABLE "Session" (
    "id" TEXT NOT NULL,
    "environmentId" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "nodeId" TEXT NOT NULL,
    "run" TEXT NOT NULL,
    "command" TEXT NOT NULL,
    "tty" BOOLEAN NOT NULL,
    "startedBy" JSONB NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL,
    "lastActivity" TIMESTAMPTZ(3) NOT NULL,
    "attached" INTEGER NOT NULL DEFAULT 0,

    CONSTRAINT "Session_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "Session_run_key" ON "Session"("run");

-- CreateIndex
CREATE INDEX "Session_environmentId_idx" ON "Session"("environmentId");

-- CreateIndex
CREATE INDEX "Session_nodeId_idx" ON "Session"("nodeId");

-- AddForeignKey
ALTER TABLE "Session" ADD CONSTRAINT "Session_environmentId_fkey" FOREIGN KEY ("environmentId") REFERENCES "Environment"("id") ON DELETE CASCADE ON UPDATE CASCADE;
