import { z } from 'zod';

/** `SHA256:` + unpadded base64, exactly what `ssh-keygen -l` prints. */
const fingerprint = z
  .string()
  .regex(/^SHA256:[A-Za-z0-9+/]{43}$/, 'must be a SHA256:... fingerprint as `ssh-keygen -l -f key.pub` prints it');

const machineId = z
  .string()
  .regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'must be lower-case letters, digits, ".", "_" or "-" (max 63 chars)');

const sshFields = {
  /** Hostname or IP the worker connects to. */
  address: z.string().min(1).max(253).regex(/^[A-Za-z0-9.:_-]+$/, 'must be a hostname or IP address'),
  port: z.number().int().min(1).max(65535).default(22),
  user: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/, 'must be a plain Unix user name').optional(),
  /** Path to the private key on the worker's machine. */
  keyFile: z.string().min(1).optional(),
  /** Pinned host keys; at least one. */
  hostKeys: z.array(fingerprint).min(1, 'pin at least one host key fingerprint (ssh-keygen -l -f /etc/ssh/ssh_host_ed25519_key.pub)'),
};

export const HostSchema = z
  .object({
    id: machineId,
    /** Queue name suffix: a site's worker holds only that site's keys. */
    site: machineId.default('default'),
    ...sshFields,
  })
  .strict();

export const ContainerSchema = z
  .object({
    id: machineId,
    vmid: z.number().int().min(100).max(999_999_999),
    /** Id of the Proxmox host that runs it. */
    host: machineId,
    /** Its own SSH address; without one it is reached through its host with `pct exec`. */
    address: sshFields.address.optional(),
    port: sshFields.port,
    user: sshFields.user,
    keyFile: sshFields.keyFile,
    hostKeys: z.array(fingerprint).optional(),
  })
  .strict();

export const InventorySchema = z
  .object({
    defaults: z
      .object({
        user: sshFields.user.default('root'),
        keyFile: z.string().min(1).optional(),
        /** Per-command timeout (seconds). */
        commandTimeoutSec: z.number().int().min(1).max(600).default(20),
        connectTimeoutSec: z.number().int().min(1).max(120).default(8),
      })
      .strict()
      .default({ user: 'root', commandTimeoutSec: 20, connectTimeoutSec: 8 }),
    hosts: z.array(HostSchema).default([]),
    containers: z.array(ContainerSchema).default([]),
  })
  .strict();

export type InventoryInput = z.input<typeof InventorySchema>;
export type Inventory = z.output<typeof InventorySchema>;
export type HostEntry = z.output<typeof HostSchema>;
export type ContainerEntry = z.output<typeof ContainerSchema>;
