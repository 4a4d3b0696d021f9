// An environment's usage (docs/console.md, "Usage"): CPU, memory and disk against its limits, as
// small SVG charts of the last hour's samples and each new one. Loaded with the environment page's
// Usage section, not with the console's first page.
import { useId, useState } from 'react';
import { useQueryAnswer } from '../answers';
import { bytes } from '../format';
import { graphql } from '../generated/gql';
import type { EnvironmentPageFieldsFragment, UsageSampleFragment } from '../generated/gql/graphql';
import { useEvents } from '../live';
import { Empty, Failure } from './ui';

graphql(`
  fragment UsageSample on EnvironmentUsage { cpu memory disk sampled }
`);

const UsageHistory = graphql(`
  query EnvironmentUsageHistory($id: String!) {
    environment(id: $id) { id usageHistory { ...UsageSample } }
  }
`);

const UsageUpdates = graphql(`
  subscription EnvironmentUsageUpdates($id: String!) {
    environmentUsage(id: $id) { ...UsageSample }
  }
`);

const RECENT_MS = 5 * 60_000;
const HOUR_MS = 60 * 60_000;
const MINUTE_MS = 60_000;

interface Point {
  at: number;
  sample: UsageSampleFragment;
}

/**
 * `points` with `more` in time order, each instant once, thinned as the server keeps its history:
 * every sample of the last five minutes, the first of each minute before, none older than an
 * hour. So the page holds at most what `usageHistory` gives, however long it stays open.
 */
function mergeSamples(points: Point[], more: UsageSampleFragment[]): Point[] {
  const all = [...points, ...more.map((sample) => ({ at: Date.parse(sample.sampled), sample }))].sort((a, b) => a.at - b.at);
  const newest = all.at(-1)?.at ?? 0;
  const kept: Point[] = [];
  let minute = Number.NaN;
  for (const point of all) {
    if (point.at < newest - HOUR_MS || point.at === kept.at(-1)?.at) continue;
    if (point.at < newest - RECENT_MS) {
      const m = Math.floor(point.at / MINUTE_MS);
      if (m === minute) continue;
      minute = m;
    }
    kept.push(point);
  }
  return kept;
}

type Resources = EnvironmentPageFieldsFragment['resources'];

export default function Usage({ environment, live, resources }: { environment: string; live: boolean; resources: Resources }) {
  const [history, refetch] = useQueryAnswer({ query: UsageHistory, variables: { id: environment }, requestPolicy: 'network-only' });
  const [arrived, setArrived] = useState<Point[]>([]);
  const error = useEvents(
    UsageUpdates,
    { id: environment },
    (data) => setArrived((points) => mergeSamples(points, [data.environmentUsage])),
    { pause: !live, resync: () => refetch({ requestPolicy: 'network-only' }) },
  );
  if (history.error && !history.data) return <Failure error={history.error} what="the usage" />;
  if (!history.data) return <p className="muted">Loading the usage…</p>;
  const points = mergeSamples(arrived, history.data.environment.usageHistory);
  if (!points.length) {
    return (
      <Empty>
        {live ? 'No samples yet: the first comes once it runs.' : 'No samples from the last hour (Berth keeps an hour of them).'}
      </Empty>
    );
  }
  const latest = points.at(-1)!.sample;
  const cpuLimit = resources.cpus ?? undefined;
  const memoryLimit = size(resources.memory);
  const diskLimit = size(resources.disk);
  return (
    <>
      {history.error ? <Failure error={history.error} /> : null}
      {error ? <Failure error={error} what="new samples" /> : null}
      <div className="usage">
        <Chart
          title="CPU"
          points={points}
          value={(s) => s.cpu}
          limit={cpuLimit}
          floor={1}
          format={(v) => `${cores(v)} cores`}
          text={
            latest.cpu == null
              ? 'not measured'
              : of(cores(latest.cpu), cpuLimit === undefined ? undefined : `${cpuLimit} ${cpuLimit === 1 ? 'core' : 'cores'}`, 'cores')
          }
        />
        <Chart
          title="Memory"
          points={points}
          value={(s) => s.memory}
          limit={memoryLimit?.bytes}
          floor={2 ** 20}
          format={shown}
          text={latest.memory == null ? 'not measured' : of(shown(latest.memory), memoryLimit?.text)}
        />
        <Chart
          title="Disk"
          points={points}
          value={(s) => s.disk}
          limit={diskLimit?.bytes}
          floor={2 ** 20}
          format={shown}
          text={of(shown(latest.disk), diskLimit?.text)}
        />
      </div>
      <p className="muted small">
        {points.length === 1 ? 'One sample' : `${points.length} samples over ${span(points)}`}
        {cpuLimit !== undefined || memoryLimit || diskLimit ? '; the dashed line is the limit the environment was leased with.' : '.'}
      </p>
    </>
  );
}

/** `0.42 of 2 cores`, or `0.42 cores, no limit`. */
function of(value: string, limit: string | undefined, unit?: string): string {
  return limit ? `${value} of ${limit}` : `${value}${unit ? ` ${unit}` : ''}, no limit`;
}

const cores = (n: number) => n.toFixed(n < 10 ? 2 : 1);

/** Bytes as the charts show them: `310 MiB`, `4 GiB`, `1.5 GiB`. */
const shown = (n: number) => bytes(n).replace('.0 ', ' ');

const UNITS: Record<string, number> = { B: 1, KiB: 2 ** 10, MiB: 2 ** 20, GiB: 2 ** 30, TiB: 2 ** 40 };

/** A template's size as written (`512MiB`, `1.5GiB`, as src/kernel/sizes.ts reads them). */
function size(text: string | null | undefined): { bytes?: number; text: string } | undefined {
  if (!text) return undefined;
  const m = /^(\d+(?:\.\d+)?)(B|KiB|MiB|GiB|TiB)$/.exec(text);
  if (!m) return { text };
  const n = Number(m[1]) * UNITS[m[2]!]!;
  return { bytes: n, text: shown(n) };
}

function span(points: Point[]): string {
  const ms = points.at(-1)!.at - points[0]!.at;
  if (ms < MINUTE_MS) return `${Math.max(1, Math.round(ms / 1000))} s`;
  return `${Math.round(ms / MINUTE_MS)} min`;
}

const WIDTH = 300;
const HEIGHT = 100;

/**
 * One measure over time: an area under a line, the limit as a dashed line, scaled so both fit
 * (from zero to the limit, or above it to the peak; at least `floor` when there is no limit).
 */
function Chart({
  title,
  points,
  value,
  limit,
  floor,
  format,
  text,
}: {
  title: string;
  points: Point[];
  value: (sample: UsageSampleFragment) => number | null;
  limit: number | undefined;
  floor: number;
  format: (v: number) => string;
  text: string;
}) {
  const titleId = useId();
  const textId = useId();
  const measured = points.flatMap((p) => {
    const v = value(p.sample);
    return v == null ? [] : [{ at: p.at, v }];
  });
  const peak = Math.max(0, ...measured.map((p) => p.v));
  const top = Math.max(limit ?? floor, peak) * 1.05;
  const y = (v: number) => (HEIGHT - (v / top) * HEIGHT).toFixed(1);
  // One time axis for the three charts (CPU may lack the first sample), oldest at the left.
  const first = points[0]!.at;
  const width = points.at(-1)!.at - first || 1;
  const x = (at: number) => (((at - first) / width) * WIDTH).toFixed(1);
  // A single sample is drawn across the chart: one point makes no line.
  const xy: [string, string][] =
    measured.length === 1
      ? [
          ['0', y(measured[0]!.v)],
          [String(WIDTH), y(measured[0]!.v)],
        ]
      : measured.map((p) => [x(p.at), y(p.v)]);
  const line = xy.map((p) => p.join(','));
  const area = xy.length ? [...line, `${xy.at(-1)![0]},${HEIGHT}`, `${xy[0]![0]},${HEIGHT}`] : [];
  return (
    <figure className="usage-chart" aria-labelledby={titleId}>
      <figcaption>
        <span id={titleId} className="usage-title">
          {title}
        </span>{' '}
        <span id={textId}>{text}</span>
      </figcaption>
      <svg role="img" aria-label={`${title} usage`} aria-describedby={textId} className="usage-plot" viewBox={`0 0 ${WIDTH} ${HEIGHT}`}>
        {area.length ? <polygon className="usage-area" points={area.join(' ')} /> : null}
        {line.length ? <polyline className="usage-line" points={line.join(' ')} /> : null}
        {measured.length ? null : (
          <text className="usage-none" x={WIDTH / 2} y={HEIGHT / 2} textAnchor="middle" dominantBaseline="middle">
            not measured
          </text>
        )}
        {limit !== undefined ? <line className="usage-limit" x1={0} x2={WIDTH} y1={y(limit)} y2={y(limit)} /> : null}
      </svg>
      {measured.length > 1 ? <p className="muted small usage-peak">Peak {format(peak)}</p> : null}
    </figure>
  );
}
