-- AlterTable
ALTER TABLE "Environment" ADD COLUMN     "specHash" TEXT,
ADD COLUMN     "warmClaimed" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN     "warmSlot" TEXT;

-- AlterTable
ALTER TABLE "Node" ADD COLUMN     "warmError" TEXT,
ADD COLUMN     "warmFailures" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN     "warmOrg" TEXT,
ADD COLUMN     "warmRetry" TIMESTAMPTZ(3),
ADD COLUMN     "warmSince" TIMESTAMPTZ(3),
ADD COLUMN     "warmSpec" TEXT,
ADD COLUMN     "warmState" TEXT,
ADD COLUMN     "warmTemplate" TEXT;
