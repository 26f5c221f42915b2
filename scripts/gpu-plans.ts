// Writes bench/gpu/plans.json (`npm run -s gpu-plans`): the memory planner's plan of each GPU-check config
// (bench/gpu/*.run.json), which the Python GPU check prints beside what CUDA measured (a GPU machine may have no Node).
// A unit test (test/unit/plan.test.ts) fails when the file is stale.
import { writeFileSync } from 'node:fs';
import { GPU_PLANS_FILE, gpuCheckPlans } from '../src/core/host/gpuCheck';

writeFileSync(GPU_PLANS_FILE, gpuCheckPlans());
console.log(`wrote ${GPU_PLANS_FILE}`);
