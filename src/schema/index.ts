import { builder } from './builder';
import './viewer';
import './credentials';

export const schema = builder.toSchema();
