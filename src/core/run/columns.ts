/**
 * The typed columns behind a record's token arrays when it was read from the token store (src/core/store/tokenStore.ts):
 * a non-enumerable property of its `tokens`, so the audit's checks can read them without the arrays being built
 * (src/core/audit/columns.ts), while JSON, structured clone and every other reader see the plain arrays. It is
 * dropped when one of the arrays it stands for is replaced.
 */
export const TOKEN_COLUMNS = Symbol.for('search-agent-studio.tokenColumns');

/** Role codes are indices of TOKEN_ROLES (0 generated, 1 prompt, 2 retrieved, 3 feedback); NaN stands for null. */
export interface TokenColumnsView {
  n: number;
  role: Uint8Array;
  loss_mask: Uint8Array;
  rollout_logprob?: Float32Array;
  logprob?: Float32Array;
  /** The other per-token numbers the audit reads (the group and health checks), when the store has them. */
  ref_logprob?: Float32Array;
  advantage?: Float32Array;
  value?: Float32Array;
  entropy?: Float32Array;
}

export function tokenColumnsOf(tokens: object | undefined): TokenColumnsView | undefined {
  return tokens ? ((tokens as Record<symbol, TokenColumnsView | undefined>)[TOKEN_COLUMNS] ?? undefined) : undefined;
}

/**
 * Set on the `tokens` of a token-store record read without its token texts (the audit's columns): reading
 * `tokens.text` would throw. Readers that do without the texts (they read the response by its tags) ask first: an
 * exception per rollout is a cost of its own.
 */
export const TOKEN_TEXT_UNREAD = Symbol.for('search-agent-studio.tokenTextUnread');

export function tokenTextUnread(tokens: object | undefined): boolean {
  return !!tokens && (tokens as Record<symbol, unknown>)[TOKEN_TEXT_UNREAD] === true;
}
