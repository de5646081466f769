// Log alerts (scheduled query rules, KQL over the App Insights tables customMetrics, customEvents and
// requests) and the action group they notify. The metric and event names are the ones
// shared/telemetry/names.ts emits — test/telemetry/telemetry.test.ts checks every 'keel.*' name below
// against that module. Counters arrive as per-interval deltas (sum(valueSum) = count), the queue-lag gauge as
// its last value, in milliseconds. The queries read valueSum / valueMax, which both the classic customMetrics
// schema and the workspace-based one answer (`value` is absent from the latter). Each rule runs as often as its
// window is long, so consecutive windows neither gap nor overlap. docs/runbook.md says what each alert means and
// what to do. Receivers are required: e-mail addresses and/or an existing action group, plus an optional webhook.

@description('Prefix for the rule names.')
param namePrefix string

@description('Azure region of the rules (the App Insights region).')
param location string

@description('Tags for every resource.')
param tags object

@description('Resource id of the Application Insights component the rules query.')
param appInsightsId string

@description('Function app name (requests.cloud_RoleName).')
param functionAppName string

@description('E-mail addresses the action group notifies.')
param alertEmailAddresses array

@description('Resource id of an existing action group every rule also notifies; empty for none.')
param existingActionGroupId string

@description('HTTPS webhook the action group calls (common alert schema); empty for none.')
@secure()
param alertWebhookUrl string

@description('Who is notified: the e-mail addresses and the existing action group id together. Deployment fails when this is empty, so no alert ever fires into the void.')
@minLength(1)
param alertReceivers array

@description('Create an Application Insights standard availability test of availabilityTestUrl, and its alert.')
param availabilityTestEnabled bool

@description('URL of the anonymous liveness endpoint the availability test calls.')
param availabilityTestUrl string

@description('DLQ growth: window over which moves to the DLQ are summed, per queue.')
param dlqGrowthWindow string

@description('DLQ growth: alert when more than this many jobs of one queue moved to the DLQ in the window.')
@minValue(0)
param dlqGrowthThreshold int

@description('Dead-letter rate: window.')
param deadLetterRateWindow string

@description('Dead-letter rate: alert when more than this percentage of finished jobs of a queue were dead-lettered.')
@minValue(1)
@maxValue(100)
param deadLetterRatePercent int

@description('Dead-letter rate: only judge a queue with at least this many finished jobs in the window.')
@minValue(1)
param deadLetterRateMinJobs int

@description('Zombies: window.')
param zombieWindow string

@description('Zombies: alert when more than this many jobs were rescued from dead workers in the window.')
@minValue(0)
param zombiesRescuedThreshold int

@description('Lease-lost conflicts: window.')
param leaseLostWindow string

@description('Lease-lost conflicts: alert when a queue sees more than this many in the window.')
@minValue(0)
param leaseLostThreshold int

@description('Unresolved batches: alert when a batch has been unresolved for longer than this many minutes.')
@minValue(5)
@maxValue(1440)
param unresolvedBatchMinutes int

@description('Unresolved batches: a batch counts as still unresolved when reported within this many minutes (maintenance reconciles stale batches on every run).')
@minValue(5)
@maxValue(240)
param unresolvedRecheckMinutes int

@description('Transfer freshness: alert when a transfer target has been behind its source for longer than this many minutes.')
@minValue(5)
param transferFreshnessMinutes int

@description('Transfer freshness: the latest report within this many minutes counts (the timer reports at each tick, commits in between).')
@minValue(5)
@maxValue(2880)
param transferFreshnessLookbackMinutes int

@description('Transfer rows behind: alert when every report of a transfer within transferRowsBehindMinutes counted more than this many rows at the source after its last committed window (keep it below KEEL_TRANSFER_ROWS_BEHIND_CAP, where counts stop).')
@minValue(1)
param transferRowsBehindThreshold int

@description('Transfer rows behind: how long the backlog must stay above the threshold (every report in this many minutes).')
@minValue(15)
@maxValue(2880)
param transferRowsBehindMinutes int

@description('Queue lag: alert when the oldest due pending job of a queue is older than this many minutes.')
@minValue(1)
param queueLagMinutes int

@description('Queue lag: window over which the largest reported lag is taken.')
param queueLagWindow string

@description('Maintenance: alert when the maintenance timer has not reported a run for this many minutes.')
@minValue(5)
@maxValue(1440)
param maintenanceStaleMinutes int

@description('Function failures: window.')
param functionFailureWindow string

@description('Function failures: alert when a function fails more than this many times in the window.')
@minValue(0)
param functionFailureThreshold int

// Must equal METRICS / EVENTS in shared/telemetry/names.ts.
var metricNames = {
  jobsCompleted: 'keel.jobs.completed'
  jobsDeadLettered: 'keel.jobs.dead_lettered'
  leaseLost: 'keel.jobs.lease_lost'
  zombiesRescued: 'keel.jobs.zombies_rescued'
  queueLag: 'keel.queue.lag'
  maintenanceRuns: 'keel.maintenance.runs'
  transferFreshness: 'keel.transfer.freshness'
  transferRowsBehind: 'keel.transfer.rows_behind'
}
var eventNames = {
  batchUnresolved: 'keel.transfer.batch_unresolved'
  batchFailed: 'keel.transfer.batch_failed'
  startFailed: 'keel.transfer.start_failed'
  keysGone: 'keel.transfer.keys_gone'
}

var transferDim = [
  {
    name: 'transfer'
    operator: 'Include'
    values: [
      '*'
    ]
  }
]

var queueDim = [
  {
    name: 'queue'
    operator: 'Include'
    values: [
      '*'
    ]
  }
]

var oneOfOne = {
  numberOfEvaluationPeriods: 1
  minFailingPeriodsToAlert: 1
}

var unresolvedLookbackMinutes = unresolvedBatchMinutes + unresolvedRecheckMinutes + 60

var baseRules = [
  {
    key: 'dlq-growth'
    title: 'Keel: dead-letter queue growing'
    summary: 'More than ${dlqGrowthThreshold} jobs of one queue moved to the DLQ within ${dlqGrowthWindow}.'
    severity: 2
    windowSize: dlqGrowthWindow
    overrideQueryTimeRange: ''
    query: join(
      [
        'customMetrics'
        '| where name == "${metricNames.jobsDeadLettered}"'
        '| extend queue = tostring(customDimensions["queue"])'
        '| summarize moved = sum(valueSum) by queue'
      ],
      '\n'
    )
    measure: 'moved'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: dlqGrowthThreshold
    dimensions: queueDim
  }
  {
    key: 'dead-letter-rate'
    title: 'Keel: dead-letter rate high'
    summary: 'More than ${deadLetterRatePercent}% of finished jobs of a queue were dead-lettered within ${deadLetterRateWindow} (at least ${deadLetterRateMinJobs} finished).'
    severity: 1
    windowSize: deadLetterRateWindow
    overrideQueryTimeRange: ''
    query: join(
      [
        'customMetrics'
        '| where name in ("${metricNames.jobsDeadLettered}", "${metricNames.jobsCompleted}")'
        '| extend queue = tostring(customDimensions["queue"])'
        '| summarize dead = sumif(valueSum, name == "${metricNames.jobsDeadLettered}"), done = sumif(valueSum, name == "${metricNames.jobsCompleted}") by queue'
        '| where dead + done >= ${deadLetterRateMinJobs}'
        '| extend deadLetterPercent = 100.0 * dead / (dead + done)'
        '| project queue, deadLetterPercent'
      ],
      '\n'
    )
    measure: 'deadLetterPercent'
    aggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: deadLetterRatePercent
    dimensions: queueDim
  }
  {
    key: 'zombies-rescued'
    title: 'Keel: zombie jobs rescued'
    summary: 'More than ${zombiesRescuedThreshold} jobs were rescued from dead workers within ${zombieWindow}.'
    severity: 2
    windowSize: zombieWindow
    overrideQueryTimeRange: ''
    query: join(
      [
        'customMetrics'
        '| where name == "${metricNames.zombiesRescued}"'
        '| extend action = tostring(customDimensions["action"])'
        '| summarize rescued = sum(valueSum) by action'
      ],
      '\n'
    )
    measure: 'rescued'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: zombiesRescuedThreshold
    dimensions: [
      {
        name: 'action'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
  }
  {
    key: 'lease-lost'
    title: 'Keel: lease-lost conflicts spiking'
    summary: 'More than ${leaseLostThreshold} owner-scoped statements of one queue found their lease gone within ${leaseLostWindow}.'
    severity: 2
    windowSize: leaseLostWindow
    overrideQueryTimeRange: ''
    query: join(
      [
        'customMetrics'
        '| where name == "${metricNames.leaseLost}"'
        '| extend queue = tostring(customDimensions["queue"])'
        '| summarize conflicts = sum(valueSum) by queue'
      ],
      '\n'
    )
    measure: 'conflicts'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: leaseLostThreshold
    dimensions: queueDim
  }
  {
    key: 'batch-unresolved'
    title: 'Keel: transfer batch unresolved'
    summary: 'A transfer batch has been unresolved for more than ${unresolvedBatchMinutes} minutes: follow docs/runbook.md.'
    severity: 1
    windowSize: 'PT5M'
    overrideQueryTimeRange: 'P2D'
    query: join(
      [
        'customEvents'
        '| where timestamp > ago(${unresolvedLookbackMinutes}m)'
        '| where name == "${eventNames.batchUnresolved}"'
        '| extend transfer = tostring(customDimensions["transfer"]), batchId = tostring(customDimensions["batchId"]), reportedMs = todouble(customDimensions["unresolvedForMs"])'
        '| summarize firstSeen = min(timestamp), lastSeen = max(timestamp), reportedMs = max(reportedMs) by transfer, batchId'
        '| where lastSeen > ago(${unresolvedRecheckMinutes}m)'
        '| extend unresolvedMinutes = max_of(todouble(datetime_diff("minute", now(), firstSeen)), coalesce(reportedMs, 0.0) / 60000.0)'
        '| project transfer, batchId, unresolvedMinutes'
      ],
      '\n'
    )
    measure: 'unresolvedMinutes'
    aggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: unresolvedBatchMinutes
    dimensions: [
      {
        name: 'transfer'
        operator: 'Include'
        values: [
          '*'
        ]
      }
      {
        name: 'batchId'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
  }
  {
    key: 'transfer-batch-failed'
    title: 'Keel: transfer batch failed'
    summary: 'A transfer batch failed (terminal error or abandoned; its window was released): read its lastErrorCode and follow docs/runbook.md.'
    severity: 2
    windowSize: 'PT15M'
    overrideQueryTimeRange: ''
    query: join(
      [
        'customEvents'
        '| where name == "${eventNames.batchFailed}"'
        '| extend transfer = tostring(customDimensions["transfer"])'
        '| summarize failed = count() by transfer'
      ],
      '\n'
    )
    measure: 'failed'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    dimensions: transferDim
  }
  {
    key: 'transfer-start-failed'
    title: 'Keel: scheduled transfer start failing'
    summary: 'The transfer timer or catch-up could not create a batch (e.g. schema drift): the transfer is not advancing. Follow docs/runbook.md.'
    severity: 2
    windowSize: 'PT15M'
    overrideQueryTimeRange: 'P2D'
    query: join(
      [
        'customEvents'
        '| where timestamp > ago(${transferFreshnessLookbackMinutes}m)'
        '| where name == "${eventNames.startFailed}"'
        '| extend transfer = tostring(customDimensions["transfer"])'
        '| summarize failures = count() by transfer'
      ],
      '\n'
    )
    measure: 'failures'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    dimensions: transferDim
  }
  {
    key: 'transfer-keys-gone'
    title: 'Keel: rows deleted at the source still on the target'
    summary: 'A scheduled key-set comparison (keyCompareSchedule) found target keys that the source no longer has and did not delete them (keyCompare report). Follow docs/runbook.md.'
    severity: 3
    windowSize: 'PT15M'
    overrideQueryTimeRange: 'P2D'
    query: join(
      [
        'customEvents'
        '| where timestamp > ago(1d)'
        '| where name == "${eventNames.keysGone}"'
        '| extend transfer = tostring(customDimensions["transfer"]), left = toint(customDimensions["goneAtSource"]) - toint(customDimensions["deleted"])'
        '| summarize arg_max(timestamp, left) by transfer'
        '| project transfer, left'
      ],
      '\n'
    )
    measure: 'left'
    aggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: 0
    dimensions: transferDim
  }
  {
    key: 'transfer-freshness'
    title: 'Keel: transfer target behind its source'
    summary: 'A transfer target has been behind its source for more than ${transferFreshnessMinutes} minutes (no commit while the source has new rows).'
    severity: 2
    windowSize: 'PT15M'
    overrideQueryTimeRange: 'P2D'
    query: join(
      [
        'customMetrics'
        '| where timestamp > ago(${transferFreshnessLookbackMinutes}m)'
        '| where name == "${metricNames.transferFreshness}"'
        '| extend transfer = tostring(customDimensions["transfer"])'
        '| summarize arg_max(timestamp, valueMax) by transfer'
        '| project transfer, behindMinutes = valueMax / 60.0'
      ],
      '\n'
    )
    measure: 'behindMinutes'
    aggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: transferFreshnessMinutes
    dimensions: transferDim
  }
  {
    key: 'transfer-rows-behind'
    title: 'Keel: transfer backlog not worked down'
    summary: 'Every report of a transfer in the last ${transferRowsBehindMinutes} minutes counted more than ${transferRowsBehindThreshold} rows at the source after its last committed window.'
    severity: 3
    windowSize: 'PT15M'
    overrideQueryTimeRange: 'P2D'
    query: join(
      [
        'customMetrics'
        '| where timestamp > ago(${transferRowsBehindMinutes}m)'
        '| where name == "${metricNames.transferRowsBehind}"'
        '| extend transfer = tostring(customDimensions["transfer"])'
        '| summarize rowsBehind = min(valueMin) by transfer'
      ],
      '\n'
    )
    measure: 'rowsBehind'
    aggregation: 'Minimum'
    operator: 'GreaterThan'
    threshold: transferRowsBehindThreshold
    dimensions: transferDim
  }
  {
    key: 'queue-lag'
    title: 'Keel: queue lag high'
    summary: 'The oldest due pending job of a queue is older than ${queueLagMinutes} minutes.'
    severity: 2
    windowSize: queueLagWindow
    overrideQueryTimeRange: ''
    query: join(
      [
        'customMetrics'
        '| where name == "${metricNames.queueLag}"'
        '| extend queue = tostring(customDimensions["queue"])'
        '| summarize lagMinutes = max(valueMax) / 60000.0 by queue'
      ],
      '\n'
    )
    measure: 'lagMinutes'
    aggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: queueLagMinutes
    dimensions: queueDim
  }
  {
    key: 'maintenance-stale'
    title: 'Keel: maintenance timer not running'
    summary: 'No maintenance run has been reported for ${maintenanceStaleMinutes} minutes.'
    severity: 1
    windowSize: 'PT5M'
    overrideQueryTimeRange: 'P2D'
    query: join(
      [
        'customMetrics'
        '| where timestamp > ago(${maintenanceStaleMinutes}m)'
        '| where name == "${metricNames.maintenanceRuns}"'
        '| summarize runs = count()'
      ],
      '\n'
    )
    measure: 'runs'
    aggregation: 'Total'
    operator: 'LessThan'
    threshold: 1
    dimensions: []
  }
  {
    key: 'function-failures'
    title: 'Keel: function failures'
    summary: 'A function of ${functionAppName} failed more than ${functionFailureThreshold} times within ${functionFailureWindow}.'
    severity: 1
    windowSize: functionFailureWindow
    overrideQueryTimeRange: ''
    query: join(
      [
        'requests'
        '| where cloud_RoleName =~ "${functionAppName}"'
        '| where success == false'
        '| summarize failures = count() by operation_Name'
      ],
      '\n'
    )
    measure: 'failures'
    aggregation: 'Total'
    operator: 'GreaterThan'
    threshold: functionFailureThreshold
    dimensions: [
      {
        name: 'operation_Name'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
  }
]

var availabilityTestName = '${namePrefix}-liveness'
var availabilityRule = {
  key: 'liveness'
  title: 'Keel: liveness probe failing'
  summary: 'The anonymous /api/health probe failed from 2 or more test locations within 15 minutes.'
  severity: 1
  windowSize: 'PT15M'
  overrideQueryTimeRange: ''
  query: join(
    [
      'availabilityResults'
      '| where name == "${availabilityTestName}"'
      '| summarize failedLocations = dcountif(location, success == false)'
    ],
    '\n'
  )
  measure: 'failedLocations'
  aggregation: 'Maximum'
  operator: 'GreaterThanOrEqual'
  threshold: 2
  dimensions: []
}
var rules = availabilityTestEnabled ? concat(baseRules, [availabilityRule]) : baseRules

// Standard availability test of the anonymous liveness route, from five locations every five minutes.
resource availabilityTest 'Microsoft.Insights/webtests@2022-06-15' = if (availabilityTestEnabled) {
  name: availabilityTestName
  location: location
  tags: union(tags, { 'hidden-link:${appInsightsId}': 'Resource' })
  kind: 'standard'
  properties: {
    SyntheticMonitorId: availabilityTestName
    Name: availabilityTestName
    Description: 'GET /api/health (anonymous liveness) answers 200.'
    Enabled: true
    Frequency: 300
    Timeout: 30
    Kind: 'standard'
    RetryEnabled: true
    Locations: [
      {
        Id: 'emea-nl-ams-azr'
      }
      {
        Id: 'emea-gb-db3-azr'
      }
      {
        Id: 'us-va-ash-azr'
      }
      {
        Id: 'us-ca-sjc-azr'
      }
      {
        Id: 'apac-sg-sin-azr'
      }
    ]
    Request: {
      RequestUrl: availabilityTestUrl
      HttpVerb: 'GET'
      ParseDependentRequests: false
    }
    ValidationRules: {
      ExpectedHttpStatusCode: 200
      SSLCheck: true
      SSLCertRemainingLifetimeCheck: 7
    }
  }
}

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = {
  name: '${namePrefix}-alerts'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'keelalerts'
    enabled: true
    emailReceivers: [
      for (address, i) in alertEmailAddresses: {
        name: 'email-${i}'
        emailAddress: address
        useCommonAlertSchema: true
      }
    ]
    webhookReceivers: empty(alertWebhookUrl)
      ? []
      : [
          {
            name: 'webhook'
            serviceUri: alertWebhookUrl
            useCommonAlertSchema: true
          }
        ]
  }
}

resource alertRules 'Microsoft.Insights/scheduledQueryRules@2026-03-01' = [
  for rule in rules: {
    name: '${namePrefix}-${rule.key}'
    location: location
    tags: tags
    kind: 'LogAlert'
    properties: union(
      {
        displayName: rule.title
        description: rule.summary
        severity: rule.severity
        enabled: true
        scopes: [
          appInsightsId
        ]
        evaluationFrequency: rule.windowSize
        windowSize: rule.windowSize
        autoMitigate: true
        criteria: {
          allOf: [
            {
              query: rule.query
              timeAggregation: rule.aggregation
              metricMeasureColumn: rule.measure
              operator: rule.operator
              threshold: rule.threshold
              dimensions: rule.dimensions
              failingPeriods: oneOfOne
            }
          ]
        }
        actions: {
          actionGroups: empty(existingActionGroupId)
            ? [
                actionGroup.id
              ]
            : [
                actionGroup.id
                existingActionGroupId
              ]
          customProperties: {
            runbook: 'docs/runbook.md#${rule.key}'
          }
        }
      },
      empty(rule.overrideQueryTimeRange) ? {} : { overrideQueryTimeRange: rule.overrideQueryTimeRange }
    )
  }
]

output actionGroupId string = actionGroup.id
output alertRuleNames array = [for (rule, i) in rules: alertRules[i].name]
output availabilityTestName string = availabilityTestEnabled ? availabilityTest.name : ''
output receiverCount int = length(alertReceivers)
