/**
 * An E5-style text encoder from a local directory (`model.onnx` + `tokenizer.json` [+ `tokenizer_config.json`])
 * run with onnxruntime-node: `query: ` / `passage: ` prefixes, at most 256 tokens (Search-R1's setting), mean
 * pooling over the attention mask, L2 normalisation. `token_type_ids` is fed only when the graph has that
 * input. The CUDA execution provider is used when onnxruntime-node has it and a GPU is present; CPU otherwise;
 * the choice is logged.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import type { InferenceSession as OrtSession, Tensor as OrtTensor } from 'onnxruntime-node';

type Ort = typeof import('onnxruntime-node');
let ortModule: Ort | undefined;
/** onnxruntime-node, loaded on first use (it is a native module, external to our bundles). */
export function ort(): Ort {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (ortModule ??= require('onnxruntime-node') as Ort);
}

/**
 * Whether onnxruntime-node has its CUDA provider library (installed by its install script, which we skip, or
 * by the user); without it, asking for CUDA only prints a native error.
 */
export function cudaProviderInstalled(): boolean {
  try {
    const pkg = dirname(require.resolve('onnxruntime-node/package.json'));
    return existsSync(
      join(
        pkg,
        'bin',
        'napi-v6',
        process.platform,
        process.arch,
        process.platform === 'win32' ? 'onnxruntime_providers_cuda.dll' : 'libonnxruntime_providers_cuda.so',
      ),
    );
  } catch {
    return false;
  }
}

export type TextKind = 'query' | 'passage';

export interface EncoderOptions {
  maxLength?: number;
  batchSize?: number;
  /** 'auto' tries CUDA, then CPU. */
  provider?: 'auto' | 'cpu' | 'cuda';
  log?: (line: string) => void;
  /** Threads for the CPU provider (0 = onnxruntime's default). */
  threads?: number;
}

export class E5Encoder {
  readonly provider: 'cpu' | 'cuda';
  readonly dim: number;
  readonly hasTokenTypes: boolean;
  private readonly prefixIds: number[];
  private readonly suffixIds: number[];
  private readonly padId: number;

  private constructor(
    readonly dir: string,
    private readonly session: OrtSession,
    private readonly tokenizer: Tokenizer,
    provider: 'cpu' | 'cuda',
    dim: number,
    readonly maxLength: number,
    readonly batchSize: number,
  ) {
    this.provider = provider;
    this.dim = dim;
    this.hasTokenTypes = session.inputNames.includes('token_type_ids');
    // The special tokens the tokenizer's post-processor adds around a sequence ([CLS] … [SEP] for BERT/E5).
    const withSpecial = tokenizer.encode('x', { add_special_tokens: true }).ids;
    const without = tokenizer.encode('x', { add_special_tokens: false }).ids;
    const at = indexOfSub(withSpecial, without);
    this.prefixIds = at >= 0 ? withSpecial.slice(0, at) : [];
    this.suffixIds = at >= 0 ? withSpecial.slice(at + without.length) : [];
    this.padId = tokenizer.token_to_id('[PAD]') ?? tokenizer.token_to_id('<pad>') ?? 0;
  }

  static async load(dir: string, options: EncoderOptions = {}): Promise<E5Encoder> {
    const log = options.log ?? (() => {});
    let tokenizerJson: object;
    try {
      tokenizerJson = JSON.parse(await readFile(join(dir, 'tokenizer.json'), 'utf8'));
    } catch (e) {
      throw new Error(`${dir}/tokenizer.json: ${(e as Error).message}`);
    }
    const config = await readFile(join(dir, 'tokenizer_config.json'), 'utf8').then(JSON.parse, () => ({}));
    const tokenizer = new Tokenizer(tokenizerJson, config);
    const { InferenceSession } = ort();
    const model = join(dir, 'model.onnx');
    const threads = options.threads ?? 0;
    const want = options.provider ?? 'auto';
    let session: OrtSession | undefined;
    let provider: 'cpu' | 'cuda' = 'cpu';
    if (want === 'auto' && !cudaProviderInstalled()) {
      log("encoder: onnxruntime-node's CUDA provider is not installed (its install script downloads it); using CPU");
    } else if (want !== 'cpu') {
      try {
        session = await InferenceSession.create(model, { executionProviders: ['cuda'], intraOpNumThreads: threads });
        provider = 'cuda';
      } catch (e) {
        if (want === 'cuda')
          throw new Error(`${model}: the CUDA execution provider is not available: ${(e as Error).message}`);
        log(`encoder: CUDA execution provider unavailable (${(e as Error).message.split('\n')[0]}); using CPU`);
      }
    }
    session ??= await InferenceSession.create(model, { executionProviders: ['cpu'], intraOpNumThreads: threads });
    for (const name of ['input_ids', 'attention_mask']) {
      if (!session.inputNames.includes(name))
        throw new Error(`${model}: the graph has no "${name}" input (inputs: ${session.inputNames.join(', ')})`);
    }
    const maxLength = options.maxLength ?? 256;
    const probe = new E5Encoder(dir, session, tokenizer, provider, 0, maxLength, options.batchSize ?? 32);
    const dim = (await probe.runBatch(['x']))[1];
    log(
      `encoder: ${model} on ${provider.toUpperCase()}, dimension ${dim}, max length ${maxLength}, token_type_ids ${probe.hasTokenTypes ? 'fed' : 'not in the graph'}`,
    );
    return new E5Encoder(dir, session, tokenizer, provider, dim, maxLength, options.batchSize ?? 32);
  }

  /** Token ids of a text as the model sees it: prefix specials + (truncated) content + suffix specials. */
  tokenIds(text: string): number[] {
    const content = this.tokenizer.encode(text, { add_special_tokens: false }).ids;
    const room = this.maxLength - this.prefixIds.length - this.suffixIds.length;
    return [...this.prefixIds, ...content.slice(0, Math.max(0, room)), ...this.suffixIds];
  }

  /** Last hidden states of a batch and their width: [hidden (batch × seq × dim), dim, seq, masks]. */
  private async runBatch(texts: string[]): Promise<[Float32Array, number, number, Uint8Array]> {
    const { Tensor } = ort();
    const ids = texts.map((t) => this.tokenIds(t));
    const seq = Math.max(1, ...ids.map((x) => x.length));
    const n = texts.length;
    const inputIds = new BigInt64Array(n * seq);
    const mask = new BigInt64Array(n * seq);
    const mask8 = new Uint8Array(n * seq);
    for (let b = 0; b < n; b++) {
      const row = ids[b]!;
      for (let s = 0; s < seq; s++) {
        const present = s < row.length;
        inputIds[b * seq + s] = BigInt(present ? row[s]! : this.padId);
        mask[b * seq + s] = present ? 1n : 0n;
        mask8[b * seq + s] = present ? 1 : 0;
      }
    }
    const feeds: Record<string, OrtTensor> = {
      input_ids: new Tensor('int64', inputIds, [n, seq]),
      attention_mask: new Tensor('int64', mask, [n, seq]),
    };
    if (this.hasTokenTypes) feeds.token_type_ids = new Tensor('int64', new BigInt64Array(n * seq), [n, seq]);
    const out = await this.session.run(feeds);
    const hidden = out[this.session.outputNames[0]!]!;
    const dims = hidden.dims;
    return [hidden.data as Float32Array, Number(dims[2]), seq, mask8];
  }

  /** Embeddings (rows of `dim`, L2-normalised) of texts, with E5's prefix for their kind. */
  async encode(texts: string[], kind: TextKind): Promise<Float32Array> {
    const out = new Float32Array(texts.length * this.dim);
    for (let start = 0; start < texts.length; start += this.batchSize) {
      const batch = texts.slice(start, start + this.batchSize).map((t) => `${kind}: ${t}`);
      const [hidden, dim, seq, mask] = await this.runBatch(batch);
      for (let b = 0; b < batch.length; b++) {
        const row = out.subarray((start + b) * dim, (start + b + 1) * dim);
        meanPoolNormalize(hidden, mask, b, seq, dim, row);
      }
    }
    return out;
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}

/** Mean of the hidden states where the mask is 1, then L2 normalisation, into `out`. */
export function meanPoolNormalize(
  hidden: Float32Array,
  mask: Uint8Array,
  b: number,
  seq: number,
  dim: number,
  out: Float32Array,
): void {
  out.fill(0);
  let count = 0;
  for (let s = 0; s < seq; s++) {
    if (mask[b * seq + s] === 0) continue;
    count++;
    const base = (b * seq + s) * dim;
    for (let d = 0; d < dim; d++) out[d]! += hidden[base + d]!;
  }
  let norm = 0;
  for (let d = 0; d < dim; d++) {
    out[d]! /= Math.max(count, 1);
    norm += out[d]! * out[d]!;
  }
  norm = Math.sqrt(norm) || 1;
  for (let d = 0; d < dim; d++) out[d]! /= norm;
}

function indexOfSub(hay: number[], needle: number[]): number {
  outer: for (let i = 0; i + needle.length <= hay.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}
