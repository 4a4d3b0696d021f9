export * from './exec';
export * from './job';
export * from './relay';
export * from './service';
export * from './usage';
