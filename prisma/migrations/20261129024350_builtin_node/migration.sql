-- AlterTable
ALTER TABLE "RemoteNode" ADD COLUMN     "builtin" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN     "engine" TEXT,
ADD COLUMN     "tokenHash" TEXT;
