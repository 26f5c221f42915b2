/**
 * The planner's one error type: input it cannot plan (a run config's field, a model's config.json, an accelerate
 * config, a command-line value), its message naming the file and the field. `plan` exits 2 on it; the check `train`,
 * `doctor --config` and the editor make says "memory: not planned: …" and never blocks a run on it.
 */
export class PlanError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PlanError';
  }
}
