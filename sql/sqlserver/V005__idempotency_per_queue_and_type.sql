-- Idempotency keys are unique per (Queue, Type, IdempotencyKey) among hot jobs (issue 25), no longer across the
-- whole table: a producer's key can no longer collide with (or squat) another queue's or another job type's key.
-- Existing rows migrate as they are: keys unique across the table are unique within each (Queue, Type) too, so the
-- index rebuilds over them without a change. DROP_EXISTING redefines V001's index in one statement (the keys are
-- never unguarded in between). Key size: 256 + 512 + 800 bytes, under the 1,700 of a nonclustered index key.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

CREATE UNIQUE NONCLUSTERED INDEX UX_JobsHot_IdempotencyKey ON keel.JobsHot (Queue, Type, IdempotencyKey)
  WHERE IdempotencyKey IS NOT NULL
  WITH (DROP_EXISTING = ON);
GO
