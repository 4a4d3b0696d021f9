-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "workClaim" TIMESTAMPTZ(3);
