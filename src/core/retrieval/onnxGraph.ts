/**
 * A two-node ONNX graph for exact inner-product search, written directly as protobuf bytes (no onnx package):
 *   scores  = Gemm(queries [q, d], corpus [n, d], transB = 1)     → [q, n]
 *   values, indices = TopK(scores, k, axis = 1, largest, sorted)  → [q, k]
 * onnxruntime runs Gemm with its tuned, multi-threaded MLAS kernels; the corpus tensor is passed in per run
 * (onnxruntime-node wraps a CPU Float32Array without copying it).
 */

/** Protobuf wire-format writer (the subset ONNX needs: varints, length-delimited fields). */
class Pb {
  private parts: number[] = [];
  private varint(v: number): void {
    let x = BigInt(v);
    if (x < 0n) x += 1n << 64n;
    do {
      let byte = Number(x & 0x7fn);
      x >>= 7n;
      if (x > 0n) byte |= 0x80;
      this.parts.push(byte);
    } while (x > 0n);
  }
  int(field: number, v: number): this {
    this.varint((field << 3) | 0);
    this.varint(v);
    return this;
  }
  bytes(field: number, b: Uint8Array): this {
    this.varint((field << 3) | 2);
    this.varint(b.length);
    for (const x of b) this.parts.push(x);
    return this;
  }
  str(field: number, s: string): this {
    return this.bytes(field, new TextEncoder().encode(s));
  }
  msg(field: number, m: Pb): this {
    return this.bytes(field, m.done());
  }
  done(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

const FLOAT = 1;
const INT64 = 7;
const ATTR_INT = 2;

function valueInfo(name: string, elemType: number, dims: (number | string)[]): Pb {
  const shape = new Pb();
  for (const d of dims) shape.msg(1, typeof d === 'number' ? new Pb().int(1, d) : new Pb().str(2, d));
  const tensorType = new Pb().int(1, elemType).msg(2, shape);
  return new Pb().str(1, name).msg(2, new Pb().msg(1, tensorType));
}

function node(op: string, inputs: string[], outputs: string[], attrs: Record<string, number> = {}): Pb {
  const n = new Pb();
  for (const i of inputs) n.str(1, i);
  for (const o of outputs) n.str(2, o);
  n.str(3, `${op.toLowerCase()}0`).str(4, op);
  for (const [name, value] of Object.entries(attrs)) n.msg(5, new Pb().str(1, name).int(3, value).int(20, ATTR_INT));
  return n;
}

/** The ModelProto bytes of the top-k inner-product search graph (opset 13). */
export function innerProductTopKModel(): Uint8Array {
  const graph = new Pb()
    .msg(1, node('Gemm', ['queries', 'corpus'], ['scores'], { transB: 1 }))
    .msg(1, node('TopK', ['scores', 'k'], ['values', 'indices'], { axis: 1, largest: 1, sorted: 1 }))
    .str(2, 'inner_product_topk')
    .msg(11, valueInfo('queries', FLOAT, ['q', 'd']))
    .msg(11, valueInfo('corpus', FLOAT, ['n', 'd']))
    .msg(11, valueInfo('k', INT64, [1]))
    .msg(12, valueInfo('values', FLOAT, ['q', 'topk']))
    .msg(12, valueInfo('indices', INT64, ['q', 'topk']));
  return new Pb()
    .int(1, 8) // ir_version
    .str(2, 'search-agent-studio')
    .msg(8, new Pb().str(1, '').int(2, 13)) // opset_import: the default domain, opset 13
    .msg(7, graph)
    .done();
}
