/**
 * The runtime's logger: one line per message on **stderr** (stdout stays the program's),
 * `STEWARD_LOG_LEVEL` = debug | info | warn | error (default info).
 */

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40 } as const;
type Level = keyof typeof LEVELS;

function threshold(): number {
  const name = (process.env["STEWARD_LOG_LEVEL"] ?? "info").toLowerCase();
  return name in LEVELS ? LEVELS[name as Level] : LEVELS.info;
}

function write(level: Level, message: string): void {
  if (LEVELS[level] < threshold()) return;
  process.stderr.write(`${new Date().toISOString()} ${level.toUpperCase()} ${message}\n`);
}

/** Log to stderr at a level. */
export const log = {
  debug: (message: string): void => write("debug", message),
  info: (message: string): void => write("info", message),
  warn: (message: string): void => write("warn", message),
  error: (message: string): void => write("error", message),
};
