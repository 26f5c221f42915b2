/**
 * Lucene's SmallFloat length encoding (org.apache.lucene.util.SmallFloat): BM25 stores a document's length in
 * one byte. Lengths below 24 are stored as is; longer ones keep 4 significant bits after the first 24
 * (exact up to 40; 100 → 96, 300 → 280). Scores use the decoded length, so ours must decode the same way.
 */

function longToInt4(i: number): number {
  const numBits = i === 0 ? 0 : 32 - Math.clz32(i);
  if (numBits < 4) return i; // subnormal
  const shift = numBits - 4;
  let encoded = (i >>> shift) & 0x07; // the implicit leading bit is dropped
  encoded |= (shift + 1) << 3;
  return encoded;
}

function int4ToLong(i: number): number {
  const bits = i & 0x07;
  const shift = (i >>> 3) - 1;
  return shift === -1 ? bits : (bits | 0x08) * 2 ** shift;
}

const MAX_INT4 = longToInt4(0x7fffffff);
const NUM_FREE_VALUES = 255 - MAX_INT4;

/** SmallFloat.intToByte4: a length (≥ 0) to its one-byte norm. */
export function intToByte4(i: number): number {
  if (i < 0 || !Number.isInteger(i)) throw new RangeError(`length must be a non-negative integer, got ${i}`);
  return i < NUM_FREE_VALUES ? i : NUM_FREE_VALUES + longToInt4(Math.min(i, 0x7fffffff) - NUM_FREE_VALUES);
}

/** SmallFloat.byte4ToInt: the length a norm byte decodes to. */
export function byte4ToInt(b: number): number {
  const i = b & 0xff;
  return i < NUM_FREE_VALUES ? i : NUM_FREE_VALUES + int4ToLong(i - NUM_FREE_VALUES);
}

/** BM25Similarity.LENGTH_TABLE: decoded length per norm byte. */
export const LENGTH_TABLE: Float32Array = Float32Array.from({ length: 256 }, (_, i) => byte4ToInt(i));
