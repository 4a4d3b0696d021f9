-- AlterTable
ALTER TABLE "RemoteNode" ADD COLUMN     "cpus" INTEGER,
ADD COLUMN     "memory" BIGINT;
