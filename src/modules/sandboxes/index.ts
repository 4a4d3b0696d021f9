export { joinSandbox, SANDBOX_NAME } from './service';
export { findSandboxRow, notifySandboxConfig, planWiring, sandboxConfig, type WiringInput } from './wiring';
