-- CreateTable
CREATE TABLE "WebhookAttempt" (
    "deliveryId" TEXT NOT NULL,
    "attempt" INTEGER NOT NULL,
    "at" TIMESTAMPTZ(3) NOT NULL,
    "status" INTEGER,
    "error" TEXT,

    CONSTRAINT "WebhookAttempt_pkey" PRIMARY KEY ("deliveryId","attempt")
);

-- AddForeignKey
ALTER TABLE "WebhookAttempt" ADD CONSTRAINT "WebhookAttempt_deliveryId_fkey" FOREIGN KEY ("deliveryId") REFERENCES "WebhookDelivery"("id") ON DELETE CASCADE ON UPDATE CASCADE;
