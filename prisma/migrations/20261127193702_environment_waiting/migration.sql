-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "waiting" TEXT;
