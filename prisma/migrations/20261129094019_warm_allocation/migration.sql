-- AlterTable
ALTER TABLE "Node" ADD COLUMN     "warmCpus" DOUBLE PRECISION,
ADD COLUMN     "warmMemory" BIGINT;
