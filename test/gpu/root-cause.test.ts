import { describe, expect, it } from 'vitest';
import { rootCauses } from '../../src/gpu/root-cause.ts';

const GiB = 2 ** 30;

/** The seed incident's launch (../shared/seeds/000_*.txt), its line continuations joined as /proc shows them. */
const SEED_SGLANG =
  'python3 -m sglang.launch_server --model-path /shared/kimi-k2.5-int4 --tp-size 8 --mem-fraction-static 0.93 --enable-hierarchical-cache --hicache-size 300 --hicache-write-policy write_through --hicache-io-backend kernel';

/** A public report of a vLLM launch that ran out of memory (huggingface.co/opensourcerelease/DeepSeek-V3-bf16 discussion 6). */
const VLLM_OFFLOAD =
  'vllm serve opensourcerelease/DeepSeek-V3-bf16 --dtype bfloat16 --host 0.0.0.0 --port 5000 --gpu-memory-utilization 0.7 --cpu-offload-gb 540 --tensor-parallel-size 2 --pipeline-parallel-size 9 --trust-remote-code';

describe("root causes from the holders' command lines", () => {
  it('the seed: 8 ranks x 300 GB of per-rank host cache against a 449 GiB host, and a 93 % GPU fraction', () => {
    const causes = rootCauses({
      commandLines: [SEED_SGLANG, 'sglang::scheduler_TP0', 'sglang::scheduler_TP1'],
      hostRamTotalBytes: 449 * GiB,
      gpusVisible: 8,
    });
    expect(causes.map((c) => c.sentence)).toEqual([
      '8 ranks × 300 GB host cache (`--hicache-size` is per rank) = 2.4 TB requested on a 449 GiB host: more than its RAM.',
      "Each rank reserves 93 % of its GPU's memory (`--mem-fraction-static` 0.93), so little is left for anything else on that GPU.",
    ]);
    expect(causes[0]).toMatchObject({ program: 'SGLang', kind: 'host_memory_over_ram', requestedBytes: 2.4e12 });
  });

  it('the host cache counts only when the hierarchical cache is on; a request that fits says nothing', () => {
    expect(
      rootCauses({
        commandLines: [SEED_SGLANG.replace(' --enable-hierarchical-cache', '')],
        hostRamTotalBytes: 449 * GiB,
        gpusVisible: 8,
      }).map((c) => c.kind),
    ).toEqual(['gpu_fraction_high']);
    const fits = SEED_SGLANG.replace('--hicache-size 300', '--hicache-size 20').replace(
      '--mem-fraction-static 0.93',
      '--mem-fraction-static 0.85',
    );
    expect(rootCauses({ commandLines: [fits], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 })).toEqual([]);
  });

  it('near the RAM (80 % or more): 8 x 50 GB on a 449 GiB host is said as a share of it; 8 x 45 GB (75 %) is not', () => {
    const near = SEED_SGLANG.replace('--hicache-size 300', '--hicache-size=50').replace(
      ' --mem-fraction-static 0.93',
      '',
    );
    expect(
      rootCauses({ commandLines: [near], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 }).map((c) => c.sentence),
    ).toEqual([
      '8 ranks × 50 GB host cache (`--hicache-size` is per rank) = 400 GB requested on a 449 GiB host: 83 % of its RAM.',
    ]);
    expect(
      rootCauses({ commandLines: [near.replace('=50', '=45')], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 }),
    ).toEqual([]);
  });

  it('more ranks than the container sees GPUs', () => {
    const causes = rootCauses({
      commandLines: [
        SEED_SGLANG.replace(' --enable-hierarchical-cache', '').replace(' --mem-fraction-static 0.93', ''),
      ],
      hostRamTotalBytes: 449 * GiB,
      gpusVisible: 4,
    });
    expect(causes.map((c) => c.sentence)).toEqual(['`--tp-size` 8 asks for 8 GPUs, and this machine sees 4.']);
  });

  it('vLLM: --cpu-offload-gb is per GPU, so 2 ranks x 540 GiB against a 1,024 GiB host', () => {
    const causes = rootCauses({ commandLines: [VLLM_OFFLOAD], hostRamTotalBytes: 1024 * GiB, gpusVisible: 2 });
    expect(causes.map((c) => c.sentence)).toEqual([
      '2 ranks × 540 GiB CPU offload (`--cpu-offload-gb` is per rank) = 1.1 TiB requested on a 1,024 GiB host: more than its RAM.',
    ]);
  });

  it('vLLM without --gpu-memory-utilization uses its default 0.9, which is said', () => {
    const causes = rootCauses({
      commandLines: ['vllm serve meta-llama/Llama-3.1-8B-Instruct'],
      hostRamTotalBytes: 449 * GiB,
      gpusVisible: 1,
    });
    expect(causes.map((c) => c.kind)).toEqual(['gpu_fraction_high']);
    expect(causes[0]?.sentence).toContain('default 0.9');
  });

  it('unknown programs and rank titles alone get no guess, whatever their arguments', () => {
    for (const line of [
      'python3 train.py --tp-size 8 --hicache-size 300 --enable-hierarchical-cache',
      'sglang::scheduler_TP0',
      'bash -c echo sglang.launch_servers',
      '',
    ]) {
      expect(rootCauses({ commandLines: [line], hostRamTotalBytes: 449 * GiB, gpusVisible: 1 }), line).toEqual([]);
    }
  });

  it('unknown RAM or GPU count: only what the command line alone supports', () => {
    expect(
      rootCauses({ commandLines: [SEED_SGLANG], hostRamTotalBytes: null, gpusVisible: null }).map((c) => c.kind),
    ).toEqual(['gpu_fraction_high']);
  });

  it('the same launch seen through several holders is said once', () => {
    expect(
      rootCauses({
        commandLines: [SEED_SGLANG, SEED_SGLANG, `${SEED_SGLANG}  `],
        hostRamTotalBytes: 449 * GiB,
        gpusVisible: 8,
      }),
    ).toHaveLength(2);
  });
});

/**
 * Public launch lines, as their scripts write them (line continuations joined, as /proc shows them).
 * - benenzhu/sglang_P run_server.sh: SGLang with `--tp 8` and `=` values.
 * - Mikeriess/Synth_data run_vllm_small.sh: vLLM through its OpenAI entrypoint, the whole GPU.
 * - Mikeriess/Synth_data run_vllm.sh: vLLM, 8 ranks.
 */
const SGLANG_TP8 =
  'python -m sglang.launch_server --model /A/nvme4n1p1/DeepSeek-R1-0528 --cuda-graph-max-bs=8 --tp 8 --chunked-prefill-size=131072 --num-continuous-decode-steps=4 --max-prefill-tokens=131072 --kv-cache-dtype fp8_e4m3 --attention-backend aiter --disable-radix-cache --mem-fraction-static=0.8 --load-format dummy';
const VLLM_WHOLE_GPU =
  'python -m vllm.entrypoints.openai.api_server --model google/gemma-2-9b-it --gpu-memory-utilization 1.0 --tensor-parallel-size 4 --host 0.0.0.0 --port 8000';
const VLLM_TP8 =
  'python -m vllm.entrypoints.openai.api_server --model meta-llama/llama-3.1-405b-instruct-fp8 --gpu-memory-utilization 0.9 --tensor-parallel-size 8 --host 0.0.0.0 --port 8000';

describe('root causes from public SGLang and vLLM launch lines', () => {
  const on = (line: string, gpusVisible: number | null, ramGiB: number | null = 449): string[] =>
    rootCauses({ commandLines: [line], hostRamTotalBytes: ramGiB === null ? null : ramGiB * GiB, gpusVisible }).map(
      (c) => c.sentence,
    );

  it('SGLang `--tp 8` with `=` values: nothing on 8 GPUs, and on 4 the sentence names --tp as it was written', () => {
    expect(on(SGLANG_TP8, 8)).toEqual([]);
    expect(on(SGLANG_TP8, 4)).toEqual(['`--tp` 8 asks for 8 GPUs, and this machine sees 4.']);
  });

  it('SGLang --mem-fraction-static 0.95 is 95 % of each GPU', () => {
    expect(on(SGLANG_TP8.replace('--mem-fraction-static=0.8', '--mem-fraction-static 0.95'), 8)).toEqual([
      "Each rank reserves 95 % of its GPU's memory (`--mem-fraction-static` 0.95), so little is left for anything else on that GPU.",
    ]);
  });

  it('vLLM --gpu-memory-utilization 1.0 through the OpenAI entrypoint is the whole GPU', () => {
    expect(on(VLLM_WHOLE_GPU, 4)).toEqual([
      "Each rank reserves 100 % of its GPU's memory (`--gpu-memory-utilization` 1.0), so little is left for anything else on that GPU.",
    ]);
  });

  it('vLLM --tensor-parallel-size=8 and --gpu-memory-utilization=0.98 with `=`, in a container that sees 4 GPUs', () => {
    const line = VLLM_TP8.replace('--gpu-memory-utilization 0.9', '--gpu-memory-utilization=0.98').replace(
      '--tensor-parallel-size 8',
      '--tensor-parallel-size=8',
    );
    expect(on(line, 4)).toEqual([
      '`--tensor-parallel-size` 8 asks for 8 GPUs, and this machine sees 4.',
      "Each rank reserves 98 % of its GPU's memory (`--gpu-memory-utilization` 0.98), so little is left for anything else on that GPU.",
    ]);
  });

  it('vLLM takes its flags with underscores too (its argument parser turns them into dashes)', () => {
    const line = VLLM_TP8.replace('--gpu-memory-utilization 0.9', '--gpu_memory_utilization 0.95').replace(
      '--tensor-parallel-size 8',
      '--tensor_parallel_size 8',
    );
    expect(on(line, 2)).toEqual([
      '`--tensor-parallel-size` 8 asks for 8 GPUs, and this machine sees 2.',
      "Each rank reserves 95 % of its GPU's memory (`--gpu-memory-utilization` 0.95), so little is left for anything else on that GPU.",
    ]);
  });

  it('a fraction written without its leading zero (.95) is read as Python reads it', () => {
    expect(on(SGLANG_TP8.replace('--mem-fraction-static=0.8', '--mem-fraction-static=.95'), 8)).toHaveLength(1);
  });

  it('a rank count that is not a whole number is no rank count: no GPU sentence, the cache counted once', () => {
    expect(on(SGLANG_TP8.replace('--tp 8', '--tp 2.5'), 2)).toEqual([]);
  });

  it('a hostile command line (10 kB, newlines, backticks, <!channel>) around the seed arguments: the sentences hold only numbers and flag names', () => {
    const hostile = `${SEED_SGLANG} --served-model-name \`rm -rf /\` <!channel> $(reboot)\n\n ${'x'.repeat(10_000)} <@U123> &amp;`;
    const causes = rootCauses({ commandLines: [hostile], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 });
    expect(causes.map((c) => c.kind)).toEqual(['host_memory_over_ram', 'gpu_fraction_high']);
    for (const c of causes) {
      expect(c.sentence).not.toMatch(/[<>&$\n]|rm -rf|xxx/);
      for (const p of c.parts)
        if (typeof p !== 'string')
          expect(['--hicache-size', '--mem-fraction-static']).toContain('code' in p ? p.code : '');
    }
  });

  it('each cause comes as parts too: its flag names as code, the rest plain words', () => {
    const [first] = rootCauses({ commandLines: [SEED_SGLANG], hostRamTotalBytes: 449 * GiB, gpusVisible: 8 });
    expect(first?.parts).toEqual([
      '8 ranks × 300 GB host cache (',
      { code: '--hicache-size' },
      ' is per rank) = 2.4 TB requested on a 449 GiB host: more than its RAM.',
    ]);
  });
});
