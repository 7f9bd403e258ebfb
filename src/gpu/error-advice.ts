import { say, type Part } from '../text/rich.ts';
import type { NvidiaErrorKind } from './types.ts';

/** Next step for one error kind: what it means and who can do what (field guide; fixtures in test/fixtures/nvidia-smi/errors). */
export function errorAdvice(kind: NvidiaErrorKind, where: string, host: string): Part[] {
  switch (kind) {
    case 'nvml_version_mismatch':
      return say`nvidia-smi on ${where} says "Driver/library version mismatch": the NVIDIA driver was upgraded while the old kernel module stayed loaded${where === host ? '' : say` (or ${where}'s NVIDIA libraries differ from ${host}'s driver)`}. A reset will not help and nothing was signalled: reload the nvidia kernel modules on ${host} once no process uses the GPUs, or reboot ${host}.`;
    case 'gpu_lost':
      return say`the GPU has fallen off the bus ("GPU is lost", Xid 79 in dmesg on ${host}). A reset will not help and nothing was signalled: drain ${host}, reboot it and check the hardware (PCIe seating, power, temperature).`;
    case 'device_handle_unknown':
      return say`the driver cannot get a handle on the GPU ("Unknown Error"): usually a GPU that fell off the bus or failed. Look for Xid errors in dmesg on ${host}; a reset rarely helps: reboot ${host} and check the hardware.`;
    case 'driver_unreachable':
      return say`nvidia-smi cannot talk to the NVIDIA driver on ${where}: the kernel module is not loaded or has crashed. Check \`lsmod | grep nvidia\` and dmesg on ${host}; load the driver or reboot ${host}.`;
    case 'no_devices':
      return say`nvidia-smi on ${where} finds no GPU: in a container, the GPU devices are not passed through (check its \`/dev/nvidia*\` entries in the Proxmox config); on ${host}, check \`lspci | grep -i nvidia\` and dmesg.`;
    case 'inforom_corrupted':
      return say`the GPU's infoROM is corrupted: numbers may still read, but the board needs a hardware check (infoROM update or RMA). Plan it with whoever owns ${host}.`;
    case 'insufficient_permissions':
      return say`nvidia-smi on ${where} was refused permission: run it as root, or fix the \`/dev/nvidia*\` permissions.`;
    case 'reset_not_supported':
    case 'reset_in_use':
    case 'unknown':
      return say`look on ${host} (\`nvidia-smi -q\`, dmesg for Xid errors) before anything else; a reset or a reboot of ${host} may be needed.`;
  }
}
