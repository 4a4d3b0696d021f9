-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "containerUser" TEXT,
ADD COLUMN     "lifecycle" JSONB NOT NULL DEFAULT '[]',
ADD COLUMN     "templateVersion" INTEGER,
ADD COLUMN     "user" TEXT;

-- AlterTable
ALTER TABLE "Template" ADD COLUMN     "build" JSONB,
ADD COLUMN     "created" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
ADD COLUMN     "error" TEXT,
ADD COLUMN     "status" TEXT NOT NULL DEFAULT 'ready',
ADD COLUMN     "version" INTEGER NOT NULL DEFAULT 1,
ADD COLUMN     "warnings" JSONB NOT NULL DEFAULT '[]';

-- CreateTable
CREATE TABLE "TemplateBuild" (
    "id" TEXT NOT NULL,
    "templateId" TEXT NOT NULL,
    "version" INTEGER NOT NULL,
    "nodeId" TEXT NOT NULL,
    "state" TEXT NOT NULL,
    "error" TEXT,
    "log" TEXT NOT NULL DEFAULT '',
    "started" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finished" TIMESTAMPTZ(3),

    CONSTRAINT "TemplateBuild_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "EnvironmentLog" (
    "id" BIGSERIAL NOT NULL,
    "environmentId" TEXT NOT NULL,
    "step" TEXT NOT NULL,
    "text" TEXT NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "EnvironmentLog_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "TemplateBuild_nodeId_state_idx" ON "TemplateBuild"("nodeId", "state");

-- CreateIndex
CREATE UNIQUE INDEX "TemplateBuild_templateId_version_nodeId_key" ON "TemplateBuild"("templateId", "version", "nodeId");

-- CreateIndex
CREATE INDEX "EnvironmentLog_environmentId_id_idx" ON "EnvironmentLog"("environmentId", "id");

-- AddForeignKey
ALTER TABLE "TemplateBuild" ADD CONSTRAINT "TemplateBuild_templateId_fkey" FOREIGN KEY ("templateId") REFERENCES "Template"("id") ON DELETE CASCADE ON UPDATE CASCADE;
