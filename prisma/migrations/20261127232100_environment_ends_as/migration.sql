-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "endsAs" TEXT;
