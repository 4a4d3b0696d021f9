import { builder } from '../../kernel/graphql/builder';
import { withNullableRoots } from './nullable-roots';
import '../../modules/organizations/graphql';
import '../../modules/credentials/graphql';
import '../../modules/artifacts/graphql';
import '../../modules/templates/graphql';
import '../../modules/environments/graphql';
import '../../modules/environments/usage-graphql';
import '../../modules/environments/exec-graphql';
import '../../modules/quotas/graphql';
import '../../modules/sandboxes/graphql';
import '../../modules/snapshots/graphql';
import '../../modules/projects/graphql';
import '../../modules/nodes/graphql';
import '../../modules/webhooks/graphql';
import '../../modules/audit/graphql';

export const schema = withNullableRoots(builder.toSchema());
