-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "outSynced" TEXT[],
ADD COLUMN     "relayed" TIMESTAMPTZ(3);
