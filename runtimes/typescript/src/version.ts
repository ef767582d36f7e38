/**
 * What build of Steward this runtime is: `--version` of a hosted controller and the
 * `steward_build_info` metric, as the Python and Go runtimes have them.
 */

import { arch, platform } from "node:os";

/** The version of Steward this runtime belongs to (the Python distribution's `steward`). */
export const VERSION = "0.1.0";

/** The `runtime` label of `steward_build_info`. */
export const RUNTIME = "typescript";

/** The platform as Go names it (`linux/amd64`), the label of `steward_build_info`. */
export function platformLabel(): string {
  const cpu = arch() === "x64" ? "amd64" : arch();
  return `${platform()}/${cpu}`;
}

/** What `--version` prints: `PROGRAM VERSION (node vX.Y.Z, os/arch)`. */
export function versionLine(program: string): string {
  return `${program} ${VERSION} (node ${process.version}, ${platformLabel()})`;
}
