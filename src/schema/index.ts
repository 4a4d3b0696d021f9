import { builder } from './builder';
import { withNullableRoots } from './nullable-roots';
import './viewer';
import './credentials';
import './artifacts';
import './templates';
import './environments';
import './usage';
import './execs';
import './quotas';
import './sandboxes';
import './snapshots';
import './nodes';
import './webhooks';
import './audit';

export const schema = withNullableRoots(builder.toSchema());
