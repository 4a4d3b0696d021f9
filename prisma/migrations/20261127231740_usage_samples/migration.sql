-- CreateTable
CREATE TABLE "UsageSample" (
    "environmentId" TEXT NOT NULL,
    "sampled" TIMESTAMPTZ(3) NOT NULL,
    "cpu" DOUBLE PRECISION,
    "memory" BIGINT,
    "pids" INTEGER,
    "disk" BIGINT NOT NULL,

    CONSTRAINT "UsageSample_pkey" PRIMARY KEY ("environmentId","sampled")
);

-- CreateIndex
CREATE INDEX "UsageSample_sampled_idx" ON "UsageSample"("sampled");

-- AddForeignKey
ALTER TABLE "UsageSample" ADD CONSTRAINT "UsageSample_environmentId_fkey" FOREIGN KEY ("environmentId") REFERENCES "Environment"("id") ON DELETE CASCADE ON UPDATE CASCADE;
