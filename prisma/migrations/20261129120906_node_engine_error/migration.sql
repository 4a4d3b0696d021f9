-- AlterTable
ALTER TABLE "RemoteNode" ADD COLUMN     "engineError" TEXT,
ADD COLUMN     "engineErrorSince" TIMESTAMPTZ(3);
