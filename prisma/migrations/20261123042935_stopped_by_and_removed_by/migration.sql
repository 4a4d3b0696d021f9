-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "stoppedBy" TEXT;

-- AlterTable
ALTER TABLE "Sandbox" ADD COLUMN     "removedBy" TEXT;
