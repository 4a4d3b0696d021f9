export * from './builtin-node';
export * from './provider';
export * from './remote-nodes';
export * from './service';
export * from './specs';
export * from './warm-job';
