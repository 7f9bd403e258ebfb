import { z } from 'zod';

/** `SHA256:` + unpadded base64, exactly what `ssh-keygen -l` prints. */
const fingerprint = z
  .string({ error: 'must be a SHA256:... fingerprint' })
  .regex(/^SHA256:[A-Za-z0-9+/]{43}$/, 'must be a SHA256:... fingerprint as `ssh-keygen -l -f key.pub` prints it')
  // inventory.example.yaml's placeholders are well formed: left in, they would pin no real machine's key.
  .refine(
    (v) => !/PLACEHOLDER|replaceMe/.test(v),
    "is the placeholder from inventory.example.yaml: put the machine's own fingerprint there (on the machine: `ssh-keygen -l -f /etc/ssh/ssh_host_ed25519_key.pub`)",
  );

const machineId = z
  .string({ error: 'must be a machine id (lower-case letters, digits, ".", "_" or "-")' })
  .regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'must be lower-case letters, digits, ".", "_" or "-" (max 63 chars)');

/** A whole number in [min, max]: one plain message for every way it can be wrong (a missing one is reported as missing). */
const bounded = (min: number, max: number, what: string) => {
  const error = `must be ${what} from ${min} to ${max}`;
  return z.number({ error }).int({ error }).min(min, { error }).max(max, { error });
};

const text = (what: string) => z.string({ error: `must be ${what}` }).min(1, 'must not be empty');

const sshFields = {
  /** Hostname or IP the worker connects to. */
  address: text('a hostname or IP address')
    .max(253, 'is longer than a hostname can be (253 characters)')
    .regex(/^[A-Za-z0-9.:_-]+$/, 'must be a hostname or IP address'),
  port: bounded(1, 65535, 'a port number').default(22),
  user: text('a plain Unix user name')
    .regex(/^[a-z_][a-z0-9_-]{0,31}$/, 'must be a plain Unix user name')
    .optional(),
  /** Path to the private key on the worker's machine. */
  keyFile: text('the path of a private key file').optional(),
  /**
   * How this machine takes commands (the agent's fixed verbs, or a shell), when it differs from the worker's
   * GPU_MEDIC_SSH_ACCESS: `agent` (the key is forced to gpu-medic-agent) or `root-shell` (opt-in:
   * a login that runs any command), so an install can move one machine at a time.
   */
  access: z.enum(['agent', 'root-shell'], { error: 'must be agent or root-shell' }).optional(),
  /** Pinned host keys; at least one. */
  hostKeys: z
    .array(fingerprint, { error: 'must be a list of SHA256:... fingerprints' })
    .min(1, 'must list at least one pinned fingerprint (ssh-keygen -l -f /etc/ssh/ssh_host_ed25519_key.pub)'),
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
    vmid: bounded(100, 999_999_999, 'the Proxmox vmid, a whole number'),
    /** Id of the Proxmox host that runs it. */
    host: machineId,
    /** Its own SSH address; without one it is reached through its host with `pct exec`. */
    address: sshFields.address.optional(),
    port: sshFields.port,
    user: sshFields.user,
    keyFile: sshFields.keyFile,
    access: sshFields.access,
    hostKeys: z.array(fingerprint, { error: 'must be a list of SHA256:... fingerprints' }).optional(),
  })
  .strict();

export const DefaultsSchema = z
  .object({
    user: sshFields.user.default('root'),
    keyFile: sshFields.keyFile,
    /** Per-command timeout (seconds). */
    commandTimeoutSec: bounded(1, 600, 'a whole number of seconds').default(20),
    connectTimeoutSec: bounded(1, 120, 'a whole number of seconds').default(8),
  })
  .strict();

export const InventorySchema = z
  .object({
    defaults: DefaultsSchema.default({ user: 'root', commandTimeoutSec: 20, connectTimeoutSec: 8 }),
    hosts: z.array(HostSchema).default([]),
    containers: z.array(ContainerSchema).default([]),
  })
  .strict();

export type InventoryInput = z.input<typeof InventorySchema>;
export type Inventory = z.output<typeof InventorySchema>;
