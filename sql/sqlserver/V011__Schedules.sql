-- Recurring schedules (declared in handlers/ with defineSchedule): the state every instance shares.
-- LastTick is the latest tick already handled (enqueued, or passed over by the missed-tick policy); an instance fires
-- a tick only by moving LastTick from the value it read (compare-and-set) in the same transaction as the enqueue, so
-- each tick is enqueued exactly once however many schedulers run. Pause state lives here too.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
GO

IF OBJECT_ID(N'keel.Schedules', N'U') IS NULL
CREATE TABLE keel.Schedules (
  Name       nvarchar(100) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT PK_Schedules PRIMARY KEY CLUSTERED,
  Paused     bit NOT NULL CONSTRAINT DF_Schedules_Paused DEFAULT (0),
  LastTick   datetime2(3) NULL,
  ResumedAt  datetime2(3) NULL, -- ticks at or before this instant were passed while paused: never run
  LastJobId  bigint NULL,
  UpdatedAt  datetime2(3) NOT NULL CONSTRAINT DF_Schedules_UpdatedAt DEFAULT (SYSUTCDATETIME())
);
GO
