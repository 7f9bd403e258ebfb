import { readFile } from 'node:fs/promises';
import ssh2 from 'ssh2';

// ssh2 is CommonJS: Node's ESM loader finds `Client` among its named exports but not `utils`.
const { utils } = ssh2;

/**
 * The public half of the worker's private key file, as an authorized_keys line has it (type and base64
 * blob), for the doctor's root-keys check. Read with ssh2's own parser, the one the executor logs in
 * with, so it is the key the machines are offered: OpenSSH and PEM formats alike, no ssh-keygen on the
 * worker, and no `<key>.pub` beside it that could be stale. An encrypted key fails here as it fails to log in.
 */
export async function workerPublicKey(
  privateKeyPath: string,
): Promise<{ type: string; blob: string } | { error: string }> {
  let data: Buffer;
  try {
    data = await readFile(privateKeyPath);
  } catch (e) {
    return { error: `cannot read ${privateKeyPath}: ${(e as NodeJS.ErrnoException).code ?? String(e)}` };
  }
  const parsed = utils.parseKey(data);
  const key = Array.isArray(parsed) ? parsed[0] : parsed;
  if (key === undefined || key instanceof Error)
    return { error: `${privateKeyPath} is no usable private key (unsupported format or passphrase-protected)` };
  return { type: key.type, blob: key.getPublicSSH().toString('base64') };
}
