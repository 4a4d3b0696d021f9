-- AlterTable
ALTER TABLE "Organization" ADD COLUMN     "poolShare" DOUBLE PRECISION,
ADD COLUMN     "storageLimit" BIGINT;
