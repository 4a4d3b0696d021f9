-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "envVars" JSONB NOT NULL DEFAULT '{}',
ADD COLUMN     "image" TEXT,
ADD COLUMN     "network" TEXT NOT NULL DEFAULT 'none',
ADD COLUMN     "resources" JSONB NOT NULL DEFAULT '{}',
ADD COLUMN     "runtime" TEXT,
ADD COLUMN     "workdir" TEXT NOT NULL DEFAULT '/';
