export * from './auth';
export * from './cache';
export * from './service';
