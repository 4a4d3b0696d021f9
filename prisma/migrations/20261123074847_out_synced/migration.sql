-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "outSynced" TEXT[];
