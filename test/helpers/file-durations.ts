// A vitest reporter for CI (.ci/run): when the run ends, one line per test file with the time it
// took (setting up, importing, its tests and hooks), slowest first, so the suite's cost is visible.
// It prints nothing else: another reporter shows progress and failures.
import type { Reporter, TestModule } from 'vitest/node';

export default class FileDurations implements Reporter {
  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const rows = modules.map((m) => {
      const d = m.diagnostic();
      const ms = d.environmentSetupDuration + d.prepareDuration + d.setupDuration + d.collectDuration + d.duration;
      return { file: m.relativeModuleId, ms, state: m.state() };
    });
    if (rows.length === 0) return;
    rows.sort((a, b) => b.ms - a.ms);
    const total = rows.reduce((sum, r) => sum + r.ms, 0);
    const lines = rows.map((r) => `${(r.ms / 1000).toFixed(1).padStart(7)} s  ${r.file}${r.state === 'passed' ? '' : `  (${r.state})`}`);
    process.stdout.write(
      `\nTest files by duration (${rows.length} files, ${(total / 1000).toFixed(0)} s in all, run two at a time):\n${lines.join('\n')}\n`,
    );
  }
}
