import { CodedError, ErrorCode } from '../errors.ts';
import type { SshEndpoint } from './types.ts';

/** The coded errors an SSH exec rejects with when the connection could not be made or was lost. */

export function where(e: SshEndpoint): string {
  return `${e.machineId} (${e.username}@${e.host}:${e.port})`;
}

function errorLevel(err: Error): string | undefined {
  const level: unknown = (err as Error & { level?: unknown }).level;
  return typeof level === 'string' ? level : undefined;
}

export function errnoCode(err: Error): string | undefined {
  const code: unknown = (err as Error & { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

export function lostError(endpoint: SshEndpoint, why: string): CodedError {
  return new CodedError(ErrorCode.ConnectionLost, `SSH connection to ${where(endpoint)} lost: ${why}.`, {
    machineId: endpoint.machineId,
    host: endpoint.host,
    port: endpoint.port,
  });
}

export function connectError(endpoint: SshEndpoint, err: Error): CodedError {
  const detail = { machineId: endpoint.machineId, host: endpoint.host, port: endpoint.port };
  const level = errorLevel(err);
  if (level === 'client-authentication') {
    return new CodedError(
      ErrorCode.AuthFailed,
      `SSH login to ${where(endpoint)} was refused (key not accepted); nothing was run. Check that the worker's public key is in the machine's authorized_keys for ${endpoint.username}.`,
      detail,
    );
  }
  if (level === 'client-timeout') {
    return new CodedError(ErrorCode.ConnectTimeout, `SSH to ${where(endpoint)} timed out; nothing was run.`, detail);
  }
  const code = errnoCode(err);
  return new CodedError(
    ErrorCode.ConnectFailed,
    `Could not connect to ${where(endpoint)} (${code ?? err.message}); nothing was run. Check the address, port and that sshd is running.`,
    { ...detail, reason: code ?? err.message },
  );
}
