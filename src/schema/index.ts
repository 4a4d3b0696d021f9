import { builder } from './builder';
import './viewer';
import './credentials';
import './artifacts';
import './templates';
import './environments';
import './execs';
import './quotas';
import './sandboxes';

export const schema = builder.toSchema();
