export * from './events';
export * from './service';
