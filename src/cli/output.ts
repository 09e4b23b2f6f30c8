/**
 * What the commands print: tables for people, one JSON document for machines.
 */
import Table from 'cli-table3';

/** Writes one JSON document on stdout. */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

export function println(line = ''): void {
  process.stdout.write(`${line}\n`);
}

/** A table with a header row; cells are strings or numbers. */
export function table(head: string[], rows: (string | number)[][]): string {
  const t = new Table({ head, style: { head: [], border: [], compact: true } });
  for (const r of rows) t.push(r.map((c) => String(c)));
  return t.toString();
}

/** A two-column table of field and value, for one record. */
export function fieldTable(fields: [string, string | number][]): string {
  const t = new Table({ style: { head: [], border: [], compact: true } });
  for (const [k, v] of fields) t.push({ [k]: String(v) });
  return t.toString();
}

/** `2025-01-02 03:04:05.678Z`, or `-`. */
export function formatTime(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  return new Date(ms).toISOString().replace('T', ' ');
}

/** A duration for people: `850 ms`, `12.3 s`, `4 m 05 s`, `3 h 02 m`, `2 d 04 h`. */
export function formatDuration(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)} s`;
  const s = Math.floor(ms / 1_000);
  const pad = (n: number) => String(n).padStart(2, '0');
  if (s < 3_600) return `${Math.floor(s / 60)} m ${pad(s % 60)} s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)} h ${pad(Math.floor(s / 60) % 60)} m`;
  return `${Math.floor(s / 86_400)} d ${pad(Math.floor(s / 3_600) % 24)} h`;
}

/** Compact JSON, cut to `max` characters for a table cell. */
export function brief(value: unknown, max = 60): string {
  if (value === null || value === undefined) return '-';
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
