-- AlterTable
ALTER TABLE "RemoteNode" ADD COLUMN     "images" TEXT[] DEFAULT ARRAY[]::TEXT[];
