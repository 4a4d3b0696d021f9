export * from './limits';
export * from './service';
