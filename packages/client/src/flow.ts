// Flows in one call (docs/jobs.md, "Flows"): a parent, the children that run after it (fan-out) and a job that runs
// after all of them (fan-in), as one enqueueMany batch whose later jobs name earlier ones by { index }. One batch is
// one transaction: the whole flow is enqueued, or none of it, and a partial flow never exists.
import type { OnParentFailure, ParentRef } from './rules.js';

export interface FlowJob {
  after?: ParentRef[];
  onFailure?: OnParentFailure;
}

export interface Flow<J extends FlowJob> {
  parent: J; // runs first (it may itself wait for existing jobs: its own after)
  children?: J[]; // each runs after the parent
  // runs after every child (after the parent when there are none); onFailure 'run' makes it run even when some
  // failed (its ctx.parents() says which)
  then?: J;
}

export interface FlowResult<R> {
  parent: R;
  children: R[];
  then: R | null;
}

// The batch of a flow, in order: the parent, the children, then the fan-in job. A job's own after (existing ids) is
// kept, the flow's references are appended.
export function flowJobs<J extends FlowJob>(flow: Flow<J>): J[] {
  const children = flow.children ?? [];
  const jobs: J[] = [flow.parent];
  for (const child of children) jobs.push({ ...child, after: [...(child.after ?? []), { index: 0 }] });
  if (flow.then) {
    const fanIn: ParentRef[] = children.length > 0 ? children.map((_c, i) => ({ index: i + 1 })) : [{ index: 0 }];
    jobs.push({ ...flow.then, after: [...(flow.then.after ?? []), ...fanIn] });
  }
  return jobs;
}

// The results of enqueueMany(flowJobs(flow)), by role.
export function flowResult<R>(flow: { children?: unknown[]; then?: unknown }, results: readonly R[]): FlowResult<R> {
  const n = flow.children?.length ?? 0;
  return { parent: results[0]!, children: results.slice(1, 1 + n), then: flow.then ? results[1 + n]! : null };
}
