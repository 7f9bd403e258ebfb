import { describe, expect, it } from 'vitest';
import { rootCauses } from '../../src/gpu/root-cause.ts';

const GiB = 2 ** 30;

/** The seed incident's launch (../shared/seeds/000_*.txt), its line continuations joined as /proc shows them. */
const SEED_SGLANG =
  'python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --tp-size 8 --mem-fraction-static 0.93 --enable-hierarchical-cache --hicache-size 300 --hicache-write-policy write_through --hicache-io-backend kernel';

/** A public report of a vLLM launch that ran out of memory (huggingface.co/opensourcerelease/DeepSeek-V3-bf16 discussion 6). */
const VLLM_OFFLOAD =
  'vllm serve opensourcerelease/DeepSeek-V3-bf16 --dtype bfloat16 --host 0.0.0.0 --port 5000 --gpu-memory-utilization 0.7 --cpu-offload-gb 540 --tensor-parallel-size 2 --pipeline-parallel-size 9 --trust-remote-code';

describe('root causes from the holders\' command lines', () => {
  it('the seed: 8 ranks x 300 GB of per-rank host cache against a 449 GiB host, and a 93 % GPU fraction', () => {
    const causes = rootCauses({ commandLines: [SEED_SGLANG, 'sglang::scheduler_TP0', 'sglang::scheduler_TP1'], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 });
    expect(causes.map((c) => c.sentence)).toEqual([
      '8 ranks × 300 GB host cache (`--hicache-size` is per rank) = 2.4 TB requested on a 449 GiB host: more than its RAM.',
      "Each rank reserves 93 % of its GPU's memory (`--mem-fraction-static` 0.93), so little is left for anything else on that GPU.",
    ]);
    expect(causes[0]).toMatchObject({ program: 'SGLang', kind: 'host_memory_over_ram', requestedBytes: 2.4e12 });
  });

  it('the host cache counts only when the hierarchical cache is on; a request that fits says nothing', () => {
    expect(rootCauses({ commandLines: [SEED_SGLANG.replace(' --enable-hierarchical-cache', '')], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 }).map((c) => c.kind)).toEqual(['gpu_fraction_high']);
    const fits = SEED_SGLANG.replace('--hicache-size 300', '--hicache-size 20').replace('--mem-fraction-static 0.93', '--mem-fraction-static 0.85');
    expect(rootCauses({ commandLines: [fits], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 })).toEqual([]);
  });

  it('near the RAM (80 % or more): 8 x 50 GB on a 449 GiB host is said as a share of it; 8 x 45 GB (75 %) is not', () => {
    const near = SEED_SGLANG.replace('--hicache-size 300', '--hicache-size=50').replace(' --mem-fraction-static 0.93', '');
    expect(rootCauses({ commandLines: [near], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 }).map((c) => c.sentence)).toEqual([
      '8 ranks × 50 GB host cache (`--hicache-size` is per rank) = 400 GB requested on a 449 GiB host: 83 % of its RAM.',
    ]);
    expect(rootCauses({ commandLines: [near.replace('=50', '=45')], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 })).toEqual([]);
  });

  it('more ranks than the container sees GPUs', () => {
    const causes = rootCauses({ commandLines: [SEED_SGLANG.replace(' --enable-hierarchical-cache', '').replace(' --mem-fraction-static 0.93', '')], hostRamTotalBytes: 449 * GiB, gpusVisible: 4 });
    expect(causes.map((c) => c.sentence)).toEqual(['`--tp-size` 8 asks for 8 GPUs, and this machine sees 4.']);
  });

  it('vLLM: --cpu-offload-gb is per GPU, so 2 ranks x 540 GiB against a 1,024 GiB host', () => {
    const causes = rootCauses({ commandLines: [VLLM_OFFLOAD], hostRamTotalBytes: 1024 * GiB, gpusVisible: 2 });
    expect(causes.map((c) => c.sentence)).toEqual(['2 ranks × 540 GiB CPU offload (`--cpu-offload-gb` is per rank) = 1.1 TiB requested on a 1,024 GiB host: more than its RAM.']);
  });

  it('vLLM without --gpu-memory-utilization uses its default 0.9, which is said', () => {
    const causes = rootCauses({ commandLines: ['vllm serve meta-llama/Llama-3.1-8B-Instruct'], hostRamTotalBytes: 449 * GiB, gpusVisible: 1 });
    expect(causes.map((c) => c.kind)).toEqual(['gpu_fraction_high']);
    expect(causes[0]?.sentence).toContain('default 0.9');
  });

  it('unknown programs and rank titles alone get no guess, whatever their arguments', () => {
    for (const line of ['python3 train.py --tp-size 8 --hicache-size 300 --enable-hierarchical-cache', 'sglang::scheduler_TP0', 'bash -c echo sglang.launch_servers', '']) {
      expect(rootCauses({ commandLines: [line], hostRamTotalBytes: 449 * GiB, gpusVisible: 1 }), line).toEqual([]);
    }
  });

  it('unknown RAM or GPU count: only what the command line alone supports', () => {
    expect(rootCauses({ commandLines: [SEED_SGLANG], hostRamTotalBytes: null, gpusVisible: null }).map((c) => c.kind)).toEqual(['gpu_fraction_high']);
  });

  it('the same launch seen through several holders is said once', () => {
    expect(rootCauses({ commandLines: [SEED_SGLANG, SEED_SGLANG, `${SEED_SGLANG}  `], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 })).toHaveLength(2);
  });
});
