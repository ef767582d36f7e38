/**
 * The instance side of the manager's Session: register, heartbeat, obey commands, fence.
 *
 * A {@link ManagerSession} keeps one controller instance registered with the manager
 * (`steward.v1.ManagerService/Session`). It sends a heartbeat with the instance's status
 * every retry period, runs the START / DRAIN / STOP callbacks, and exposes
 * {@link ManagerSession.active} and {@link ManagerSession.holdsLease}, which a runtime checks
 * before taking work.
 *
 * # Fencing
 * The instance reconciles only while the manager keeps acknowledging its heartbeats:
 * `holdsLease()` is true only until `renewDeadline` after *sending* the last heartbeat the
 * manager acknowledged as ACTIVE with the current epoch. The manager renews the lease when
 * that heartbeat *arrives* (later) and promotes nobody before `leaseDuration` after it;
 * since `renewDeadline < leaseDuration`, this instance has stopped before any other starts.
 * START itself only arms this: the instance becomes active once a heartbeat sent after the
 * START is acknowledged in time.
 *
 * # Recovery
 * When the stream breaks (manager restart, new leader, network), the session keeps its
 * state and reconnects with exponential backoff (from `reconnectInitialMs` up to the retry
 * period), registering again with the same instance id; the manager recognises the holder
 * and it stays active with the same epoch, provided that happens before the renew deadline
 * — otherwise it drops `active` (`onStop`) and waits for a new START. ALREADY_EXISTS and
 * INVALID_ARGUMENT end {@link ManagerSession.run} with {@link RegistrationRefusedError};
 * FAILED_PRECONDITION (controller disabled) and every other failure is retried.
 */

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import {
  type ChannelCredentials,
  type ClientDuplexStream,
  type ServiceError,
  status as GrpcStatus,
} from "@grpc/grpc-js";
import type { ResourceType } from "./gen/steward/v1/informer";
import {
  CommandType,
  type HeartbeatAck,
  type InstanceStatus,
  ManagerServiceClient,
  type RegistrationResult,
  Role,
  type SessionRequest,
  type SessionResponse,
} from "./gen/steward/v1/manager";
import type { Duration } from "./gen/google/protobuf/duration";
import { log } from "./log";
import { sleep } from "./mirror";
import { securityFromEnv } from "./security";

/** The version of this runtime, sent in the registration. */
export const RUNTIME_VERSION = "0.1.0";

/** `<hostname>-<pid>-<random>`: unique per process. */
export function defaultInstanceId(): string {
  return `${hostname()}-${process.pid}-${randomBytes(4).toString("hex")}`;
}

/** The manager refused the registration for good (ALREADY_EXISTS, INVALID_ARGUMENT). */
export class RegistrationRefusedError extends Error {
  constructor(
    readonly code: number,
    readonly details: string,
  ) {
    super(`${GrpcStatus[code] ?? code}: ${details}`);
    this.name = "RegistrationRefusedError";
  }
}

/** Who the instance is and how it reconnects. Only `controller` is required. */
export interface SessionOptions {
  /** Controller name (a DNS-1123 label). */
  controller: string;
  /** This process's id. Defaults to hostname-pid-random. */
  instanceId?: string;
  /** Language of the runtime. Defaults to "typescript". */
  language?: string;
  /** Version of the runtime. Defaults to {@link RUNTIME_VERSION}. */
  runtimeVersion?: string;
  /** Resource types the controller watches (for the operators' view). */
  watches?: ResourceType[];
  /** Wait as a standby when another instance holds the name. Defaults to false. */
  standby?: boolean;
  /** First reconnect delay in ms; doubles up to the retry period. Defaults to 100. */
  reconnectInitialMs?: number;
  /** How long {@link ManagerSession.close} waits for the manager's goodbye. Defaults to 5000 ms. */
  stopTimeoutMs?: number;
}

/** What the session calls back; each may be async. An error in one is logged, not raised. */
export interface SessionCallbacks {
  /** The instance's current status for a heartbeat. */
  status?: () => Partial<InstanceStatus>;
  /** Called with the epoch when the instance becomes active. */
  onStart?: (epoch: number) => void | Promise<void>;
  /** DRAIN: stop taking work, finish what is in flight, then resolve. */
  onDrain?: () => void | Promise<void>;
  /** Called with the reason when the instance stops being active (STOP, lease lost, close). */
  onStop?: (reason: string) => void | Promise<void>;
}

function ms(d: Duration | undefined): number {
  return d === undefined ? 0 : d.seconds * 1000 + d.nanos / 1e6;
}

type End = "reconnect" | "stopped";

/** One controller instance's membership in the manager's registry (see the module docs). */
export class ManagerSession {
  /** True while this instance may reconcile (also check {@link holdsLease}). */
  active = false;
  /** The last role the manager gave this instance. */
  role: Role = Role.ROLE_UNSPECIFIED;
  /** The epoch of the last START (the fencing token while active). */
  epoch = 0;
  /** For a standby, the active instance's id. */
  holder = "";
  /** Every command received, in order (for logs and tests). */
  readonly commands: CommandType[] = [];
  leaseDurationMs = 15_000;
  renewDeadlineMs = 10_000;
  retryPeriodMs = 2_000;
  readonly options: Required<SessionOptions>;
  private readonly client: ManagerServiceClient;
  private deadline = 0;
  private pendingStart = false;
  private drained = false;
  private sequence = 0;
  private readonly sent = new Map<number, number>();
  private call: ClientDuplexStream<SessionRequest, SessionResponse> | undefined;
  private closing = false;
  private deregistered = false;
  private registeredWaiters: (() => void)[] = [];
  private registeredOnce = false;
  private streamEnded: (() => void) | undefined;

  /**
   * A session with the manager at `target` (host:port), dialed with `channelCredentials`:
   * by default {@link securityFromEnv}, which throws `SecurityConfigError` when the
   * environment says neither mutual TLS nor plaintext.
   */
  constructor(
    readonly target: string,
    options: SessionOptions,
    private readonly callbacks: SessionCallbacks = {},
    channelCredentials: ChannelCredentials = securityFromEnv(),
  ) {
    this.options = {
      controller: options.controller,
      instanceId: options.instanceId ?? defaultInstanceId(),
      language: options.language ?? "typescript",
      runtimeVersion: options.runtimeVersion ?? RUNTIME_VERSION,
      watches: options.watches ?? [],
      standby: options.standby ?? false,
      reconnectInitialMs: options.reconnectInitialMs ?? 100,
      stopTimeoutMs: options.stopTimeoutMs ?? 5_000,
    };
    this.client = new ManagerServiceClient(target, channelCredentials);
  }

  /**
   * True while active and within the renew deadline of the last acknowledged heartbeat;
   * checked against the clock now, so a process that was frozen sees false at once.
   */
  holdsLease(): boolean {
    return this.active && performance.now() < this.deadline;
  }

  /** Resolves once the manager has answered a registration. */
  registered(): Promise<void> {
    if (this.registeredOnce) return Promise.resolve();
    return new Promise((resolve) => this.registeredWaiters.push(resolve));
  }

  private async callBack<A extends unknown[]>(
    name: string,
    fn: ((...args: A) => void | Promise<void>) | undefined,
    ...args: A
  ): Promise<void> {
    if (fn === undefined) return;
    try {
      await fn(...args);
    } catch (err) {
      log.error(`session callback ${name} failed: ${String(err)}`);
    }
  }

  private async becomeActive(deadline: number): Promise<void> {
    this.pendingStart = false;
    this.deadline = deadline;
    this.active = true;
    log.info(`${this.options.controller}: active with epoch ${this.epoch}`);
    await this.callBack("onStart", this.callbacks.onStart, this.epoch);
  }

  private async drop(reason: string): Promise<void> {
    this.pendingStart = false;
    if (this.active) {
      this.active = false;
      log.warn(`${this.options.controller}: not active any more: ${reason}`);
      await this.callBack("onStop", this.callbacks.onStop, reason);
    }
  }

  // -- running ----------------------------------------------------------------------------

  /**
   * Stay registered until STOP or {@link close}; see the module docs for failures.
   * Rejects with {@link RegistrationRefusedError} on ALREADY_EXISTS or INVALID_ARGUMENT.
   */
  async run(): Promise<void> {
    const fence = setInterval(() => {
      if (this.active && performance.now() >= this.deadline) {
        void this.drop(
          `no heartbeat acknowledged within the renew deadline (${this.renewDeadlineMs} ms)`,
        ).then(() => this.call?.cancel());
      }
    }, 100);
    let delay = this.options.reconnectInitialMs;
    try {
      while (!this.closing) {
        try {
          const end = await this.connectOnce();
          if (end === "stopped") return;
          delay = this.options.reconnectInitialMs;
        } catch (err) {
          if (err instanceof RegistrationRefusedError) {
            await this.drop("registration refused");
            throw err;
          }
          const e = err as ServiceError;
          if (e.code === GrpcStatus.FAILED_PRECONDITION) {
            log.warn(`${this.options.controller}: ${e.details}; retrying`);
            delay = Math.max(delay, this.retryPeriodMs);
          } else {
            log.info(`${this.options.controller}: session ended: ${GrpcStatus[e.code] ?? e.code} ${e.details ?? e.message}`);
          }
        }
        if (this.closing) return;
        await sleep(delay * (0.8 + 0.4 * Math.random()));
        delay = Math.min(delay * 2, this.retryPeriodMs);
      }
    } finally {
      clearInterval(fence);
      if (this.active) await this.drop("session ended");
    }
  }

  /**
   * Stop being active (`onStop`), deregister cleanly so a standby is promoted at once, and
   * end {@link run}. Safe to call more than once or when not connected.
   */
  async close(reason = "shutting down"): Promise<void> {
    this.closing = true;
    await this.drop(reason);
    const call = this.call;
    if (call !== undefined && !this.deregistered) {
      this.deregistered = true;
      const ended = new Promise<void>((resolve) => {
        const previous = this.streamEnded;
        this.streamEnded = () => {
          previous?.();
          resolve();
        };
      });
      try {
        call.write({ deregistration: { reason } });
        call.end();
        await Promise.race([ended, sleep(this.options.stopTimeoutMs)]);
      } catch (err) {
        log.debug(`deregistration not sent: ${String(err)}`);
      }
    }
    this.call?.cancel();
    this.client.close();
  }

  private write(request: SessionRequest): void {
    const call = this.call;
    if (call === undefined) return;
    try {
      call.write(request);
    } catch (err) {
      log.debug(`session write failed: ${String(err)}`);
    }
  }

  private heartbeat(): void {
    this.sequence += 1;
    let status: Partial<InstanceStatus> = {};
    try {
      status = this.callbacks.status?.() ?? {};
    } catch (err) {
      log.error(`status callback failed: ${String(err)}`);
    }
    this.sent.set(this.sequence, performance.now());
    if (this.sent.size > 64) {
      const keep = [...this.sent.keys()].sort((a, b) => a - b).slice(-32);
      for (const seq of [...this.sent.keys()]) if (!keep.includes(seq)) this.sent.delete(seq);
    }
    this.write({
      heartbeat: {
        sequence: this.sequence,
        status: {
          queueDepth: status.queueDepth ?? 0,
          busyWorkers: status.busyWorkers ?? 0,
          reconciles: status.reconciles,
          lastError: status.lastError ?? "",
          lastErrorTime: status.lastErrorTime,
          drained: this.drained,
        },
      },
    });
  }

  private async connectOnce(): Promise<End> {
    const opts = this.options;
    const call = this.client.session();
    this.call = call;
    this.sent.clear();
    call.on("status", () => this.streamEnded?.());
    call.on("error", () => this.streamEnded?.());
    let beats: NodeJS.Timeout | undefined;
    let drain: Promise<void> | undefined;
    try {
      const sentAt = performance.now();
      this.write({
        registration: {
          controller: opts.controller,
          instanceId: opts.instanceId,
          language: opts.language,
          runtimeVersion: opts.runtimeVersion,
          watches: opts.watches,
          standby: opts.standby,
        },
      });
      let first = true;
      for await (const message of call as AsyncIterable<SessionResponse>) {
        if (first) {
          first = false;
          if (message.registrationResult === undefined) {
            log.warn(`${opts.controller}: the manager's first answer is not a registration result`);
            return "reconnect";
          }
          await this.onRegistered(message.registrationResult, sentAt);
          this.heartbeat();
          beats = setInterval(() => this.heartbeat(), this.retryPeriodMs);
          continue;
        }
        if (message.heartbeatAck !== undefined) {
          await this.onAck(message.heartbeatAck);
        } else if (message.command !== undefined) {
          const command = message.command;
          this.commands.push(command.type);
          if (command.type === CommandType.COMMAND_TYPE_START) {
            await this.onStartCommand(command.epoch);
          } else if (command.type === CommandType.COMMAND_TYPE_DRAIN) {
            drain = this.onDrainCommand();
          } else if (command.type === CommandType.COMMAND_TYPE_STOP) {
            await this.drop(`STOP: ${command.reason}`);
            this.closing = true;
            this.deregistered = true;
            this.write({ deregistration: { reason: "told to stop" } });
            call.end();
          }
        }
      }
      return this.deregistered ? "stopped" : "reconnect";
    } catch (err) {
      const e = err as ServiceError;
      if (e.code === GrpcStatus.ALREADY_EXISTS || e.code === GrpcStatus.INVALID_ARGUMENT) {
        throw new RegistrationRefusedError(e.code, e.details ?? e.message);
      }
      if (e.code === GrpcStatus.ABORTED) {
        await this.drop(e.details || "aborted by the manager");
      }
      if (this.closing) return "stopped";
      throw err;
    } finally {
      if (beats !== undefined) clearInterval(beats);
      this.call = undefined;
      call.cancel();
      void drain;
    }
  }

  private async onRegistered(result: RegistrationResult, sentAt: number): Promise<void> {
    this.leaseDurationMs = ms(result.leaseDuration) || this.leaseDurationMs;
    this.renewDeadlineMs = ms(result.renewDeadline) || this.renewDeadlineMs;
    this.retryPeriodMs = ms(result.retryPeriod) || this.retryPeriodMs;
    this.role = result.role;
    this.holder = result.holder;
    if (result.role === Role.ROLE_ACTIVE && result.epoch === this.epoch) {
      // The registration renewed our lease like a heartbeat would.
      if (this.active) this.deadline = Math.max(this.deadline, sentAt + this.renewDeadlineMs);
    } else {
      await this.drop(`registered as ${Role[result.role]}`);
    }
    this.registeredOnce = true;
    const waiters = this.registeredWaiters;
    this.registeredWaiters = [];
    for (const w of waiters) w();
    log.info(
      `${this.options.controller}: registered ${this.options.instanceId} as ${Role[result.role]} ` +
        `(epoch ${result.epoch}${result.holder ? `, holder ${result.holder}` : ""})`,
    );
  }

  private async onStartCommand(epoch: number): Promise<void> {
    if (this.active && epoch === this.epoch) return;
    await this.drop(`restarted with epoch ${epoch}`);
    this.epoch = epoch;
    this.role = Role.ROLE_ACTIVE;
    this.pendingStart = true;
    this.drained = false;
    this.heartbeat();
  }

  private async onAck(ack: HeartbeatAck): Promise<void> {
    const sent = this.sent.get(ack.sequence);
    this.sent.delete(ack.sequence);
    if (ack.role !== Role.ROLE_ACTIVE || ack.epoch !== this.epoch) {
      if (this.active) await this.drop(`the manager says ${Role[ack.role]}`);
      return;
    }
    if (sent === undefined) return;
    const deadline = sent + this.renewDeadlineMs;
    if (performance.now() >= deadline) return; // too late to count
    if (this.pendingStart) {
      await this.becomeActive(deadline);
    } else if (this.active) {
      this.deadline = Math.max(this.deadline, deadline);
    }
  }

  private async onDrainCommand(): Promise<void> {
    await this.callBack("onDrain", this.callbacks.onDrain);
    this.drained = true;
    this.heartbeat();
  }
}
