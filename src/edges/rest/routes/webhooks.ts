import { graphql } from '../../../generated/gql';
import { PAGE_PARAMS, type Route } from '../route';

graphql(`
  fragment WebhookFields on Webhook { id url events createdBy created failing failingSince consecutiveFailures }
  fragment WebhookDeliveryFields on WebhookDelivery {
    id event attempts lastStatus lastError created lastAttempt nextAttempt delivered gaveUp
    history { attempt at status error }
  }
`);

export const webhookRoutes: Route[] = [
  {
    method: 'POST',
    path: '/v1/webhooks',
    summary: 'Register a webhook endpoint (admins only); the secret is returned once',
    description:
      '201 {webhook, secret}. 422 invalid (`url` not http(s), carrying credentials, not resolving or resolving to an internal address; `events` empty or unknown), 409 too_many_webhooks past 20.',
    document: graphql(`
      mutation RestCreateWebhook($input: CreateWebhookInput!) {
        createWebhook(input: $input) { webhook { ...WebhookFields } secret }
      }
    `),
    body: { variable: 'input', required: true },
    result: { kind: 'field', field: 'createWebhook' },
    status: 201,
  },
  {
    method: 'GET',
    path: '/v1/webhooks',
    summary: "The organization's webhook endpoints (admins only), newest first",
    document: graphql(`query RestWebhooks { webhooks { ...WebhookFields } }`),
    result: { kind: 'wrap', field: 'webhooks', key: 'webhooks' },
    status: 200,
  },
  {
    method: 'DELETE',
    path: '/v1/webhooks/{id}',
    summary: 'Remove a webhook endpoint and its pending deliveries (admins only)',
    document: graphql(`mutation RestDeleteWebhook($id: ID!) { deleteWebhook(id: $id) }`),
    result: { kind: 'wrap', field: 'deleteWebhook', key: 'deleted' },
    status: 200,
  },
  {
    method: 'GET',
    path: '/v1/webhooks/{id}/deliveries',
    summary: "An endpoint's deliveries (admins only), newest first",
    params: PAGE_PARAMS,
    document: graphql(`
      query RestWebhookDeliveries($id: ID!, $first: Int, $after: String) {
        webhookDeliveries(id: $id, first: $first, after: $after) {
          nodes { ...WebhookDeliveryFields }
          pageInfo { hasNextPage endCursor }
        }
      }
    `),
    result: { kind: 'list', field: 'webhookDeliveries', key: 'deliveries' },
    status: 200,
  },
];
