-- AlterTable
ALTER TABLE "RemoteNode" ADD COLUMN     "cordoned" TIMESTAMPTZ(3),
ADD COLUMN     "cordonedBy" TEXT;
