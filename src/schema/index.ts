import { builder } from './builder';
import './viewer';
import './credentials';
import './artifacts';
import './templates';
import './environments';
import './execs';
import './quotas';
import './sandboxes';
import './snapshots';

export const schema = builder.toSchema();
