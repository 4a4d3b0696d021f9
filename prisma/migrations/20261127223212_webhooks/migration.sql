-- CreateTable
CREATE TABLE "Webhook" (
    "id" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "url" TEXT NOT NULL,
    "events" TEXT[],
    "secretSealed" BYTEA NOT NULL,
    "createdBy" TEXT NOT NULL,
    "created" TIMESTAMPTZ(3) NOT NULL,
    "consecutiveFailures" INTEGER NOT NULL DEFAULT 0,
    "failingSince" TIMESTAMPTZ(3),

    CONSTRAINT "Webhook_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "WebhookDelivery" (
    "id" TEXT NOT NULL,
    "webhookId" TEXT NOT NULL,
    "orgId" TEXT NOT NULL,
    "event" TEXT NOT NULL,
    "body" TEXT NOT NULL,
    "orderingKey" TEXT,
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "nextAttempt" TIMESTAMPTZ(3),
    "lastAttempt" TIMESTAMPTZ(3),
    "lastStatus" INTEGER,
    "lastError" TEXT,
    "created" TIMESTAMPTZ(3) NOT NULL,
    "delivered" TIMESTAMPTZ(3),
    "gaveUp" TIMESTAMPTZ(3),
    "seq" BIGSERIAL NOT NULL,

    CONSTRAINT "WebhookDelivery_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "Webhook_orgId_created_idx" ON "Webhook"("orgId", "created");

-- CreateIndex
CREATE INDEX "WebhookDelivery_nextAttempt_idx" ON "WebhookDelivery"("nextAttempt");

-- CreateIndex
CREATE INDEX "WebhookDelivery_webhookId_created_idx" ON "WebhookDelivery"("webhookId", "created");

-- CreateIndex
CREATE INDEX "WebhookDelivery_webhookId_orderingKey_seq_idx" ON "WebhookDelivery"("webhookId", "orderingKey", "seq");

-- AddForeignKey
ALTER TABLE "WebhookDelivery" ADD CONSTRAINT "WebhookDelivery_webhookId_fkey" FOREIGN KEY ("webhookId") REFERENCES "Webhook"("id") ON DELETE CASCADE ON UPDATE CASCADE;
