// Azure Monitor workbook "Keel overview": the ops console's overview for people who live in the portal, from
// Application Insights (Keel's metrics and events, shared/telemetry/names.ts), the host's requests (function
// failures) and Azure Resource Graph (the states of Keel's alert rules, alerts.bicep). docs/runbook.md links it.

@description('Azure region of the workbook.')
param location string

@description('Tags for every resource.')
param tags object

@description('Resource id of the Application Insights component the workbook reads.')
param appInsightsId string

@description('Function app name (requests.cloud_RoleName).')
param functionAppName string

@description('Prefix of Keel\'s alert rule names (alerts.bicep namePrefix).')
param alertRulePrefix string

// Must equal METRICS / EVENTS in shared/telemetry/names.ts (test/telemetry/telemetry.test.ts checks).
var m = {
  enqueued: 'keel.jobs.enqueued'
  completed: 'keel.jobs.completed'
  retried: 'keel.jobs.retried'
  deadLettered: 'keel.jobs.dead_lettered'
  leaseLost: 'keel.jobs.lease_lost'
  zombies: 'keel.jobs.zombies_rescued'
  lag: 'keel.queue.lag'
  batches: 'keel.transfer.batches'
  rows: 'keel.transfer.rows'
  maintenance: 'keel.maintenance.runs'
  freshness: 'keel.transfer.freshness'
  rowsBehind: 'keel.transfer.rows_behind'
}
var e = {
  deadLettered: 'keel.job.dead_lettered'
  unresolved: 'keel.transfer.batch_unresolved'
  failed: 'keel.transfer.batch_failed'
  startFailed: 'keel.transfer.start_failed'
  keysGone: 'keel.transfer.keys_gone'
}

var ai = 'microsoft.insights/components'

// One KQL tile over Application Insights.
var tiles = [
  {
    name: 'outcomes'
    title: 'Jobs per interval: completed, retried, dead-lettered'
    visualization: 'timechart'
    width: '100'
    query: join(
      [
        'customMetrics'
        '| where name in ("${m.completed}", "${m.retried}", "${m.deadLettered}")'
        '| extend outcome = case(name == "${m.completed}", "completed", name == "${m.retried}", "retried", "dead-lettered")'
        '| summarize jobs = sum(value) by outcome, bin(timestamp, {TimeRange:grain})'
        '| render timechart'
      ],
      '\n'
    )
  }
  {
    name: 'queues'
    title: 'Queues: enqueued, completed, retried, dead-lettered and the last reported lag'
    visualization: 'table'
    width: '100'
    query: join(
      [
        'let counts = customMetrics'
        '| where name in ("${m.enqueued}", "${m.completed}", "${m.retried}", "${m.deadLettered}")'
        '| extend queue = tostring(customDimensions["queue"])'
        '| summarize enqueued = sumif(value, name == "${m.enqueued}"), completed = sumif(value, name == "${m.completed}"), retried = sumif(value, name == "${m.retried}"), deadLettered = sumif(value, name == "${m.deadLettered}") by queue;'
        'let lag = customMetrics'
        '| where name == "${m.lag}"'
        '| extend queue = tostring(customDimensions["queue"])'
        '| summarize arg_max(timestamp, value) by queue'
        '| project queue, lagSeconds = round(value / 1000.0, 1), lagReportedAt = timestamp;'
        'counts'
        '| join kind=fullouter lag on queue'
        '| project queue = coalesce(queue, queue1), enqueued, completed, retried, deadLettered, lagSeconds, lagReportedAt'
        '| order by deadLettered desc, queue asc'
      ],
      '\n'
    )
  }
  {
    name: 'dlq-reasons'
    title: 'Dead-lettered by reason and type'
    visualization: 'table'
    width: '50'
    query: join(
      [
        'customMetrics'
        '| where name == "${m.deadLettered}"'
        '| extend queue = tostring(customDimensions["queue"]), type = tostring(customDimensions["type"]), reason = tostring(customDimensions["reason"])'
        '| summarize jobs = sum(value) by reason, type, queue'
        '| order by jobs desc'
      ],
      '\n'
    )
  }
  {
    name: 'dlq-recent'
    title: 'Latest dead letters (job ids: find them in the console or GET /api/ops/jobs/{id})'
    visualization: 'table'
    width: '50'
    query: join(
      [
        'customEvents'
        '| where name == "${e.deadLettered}"'
        '| project timestamp, queue = tostring(customDimensions["queue"]), type = tostring(customDimensions["type"]), reason = tostring(customDimensions["reason"]), jobId = tostring(customDimensions["jobId"])'
        '| order by timestamp desc'
        '| take 50'
      ],
      '\n'
    )
  }
  {
    name: 'zombies'
    title: 'Zombie rescues and lease-lost conflicts'
    visualization: 'timechart'
    width: '50'
    query: join(
      [
        'customMetrics'
        '| where name in ("${m.zombies}", "${m.leaseLost}")'
        '| extend series = iff(name == "${m.zombies}", strcat("zombie ", tostring(customDimensions["action"])), "lease lost")'
        '| summarize n = sum(value) by series, bin(timestamp, {TimeRange:grain})'
        '| render timechart'
      ],
      '\n'
    )
  }
  {
    name: 'maintenance'
    title: 'Maintenance runs'
    visualization: 'timechart'
    width: '50'
    query: join(
      [
        'customMetrics'
        '| where name == "${m.maintenance}"'
        '| extend outcome = tostring(customDimensions["outcome"])'
        '| summarize runs = sum(value) by outcome, bin(timestamp, {TimeRange:grain})'
        '| render timechart'
      ],
      '\n'
    )
  }
  {
    name: 'transfers'
    title: 'Transfer batches: state transitions and rows applied'
    visualization: 'table'
    width: '50'
    query: join(
      [
        'customMetrics'
        '| where name in ("${m.batches}", "${m.rows}")'
        '| extend transfer = tostring(customDimensions["transfer"]), state = tostring(customDimensions["state"])'
        '| summarize transitions = sumif(value, name == "${m.batches}"), rowsApplied = sumif(value, name == "${m.rows}" ) by transfer, state'
        '| order by transfer asc, state asc'
      ],
      '\n'
    )
  }
  {
    name: 'unresolved'
    title: 'Unresolved batches (follow docs/runbook.md#batch-unresolved)'
    visualization: 'table'
    width: '50'
    query: join(
      [
        'customEvents'
        '| where name == "${e.unresolved}"'
        '| extend transfer = tostring(customDimensions["transfer"]), batchId = tostring(customDimensions["batchId"])'
        '| summarize firstSeen = min(timestamp), lastSeen = max(timestamp), observations = count() by transfer, batchId'
        '| order by lastSeen desc'
      ],
      '\n'
    )
  }
  {
    name: 'freshness'
    title: 'Transfer freshness: minutes and rows behind the source, latest report (docs/runbook.md#transfer-freshness)'
    visualization: 'table'
    width: '50'
    query: join(
      [
        'customMetrics'
        '| where name in ("${m.freshness}", "${m.rowsBehind}")'
        '| extend transfer = tostring(customDimensions["transfer"])'
        '| summarize arg_max(timestamp, valueMax) by transfer, name'
        '| summarize behindMinutes = round(maxif(valueMax, name == "${m.freshness}") / 60.0, 1), rowsBehind = maxif(valueMax, name == "${m.rowsBehind}"), reportedAt = max(timestamp) by transfer'
        '| order by behindMinutes desc'
      ],
      '\n'
    )
  }
  {
    name: 'transfer-failures'
    title: 'Failed batches and failing scheduled starts (docs/runbook.md#transfer-batch-failed)'
    visualization: 'table'
    width: '50'
    query: join(
      [
        'customEvents'
        '| where name in ("${e.failed}", "${e.startFailed}")'
        '| extend transfer = tostring(customDimensions["transfer"]), code = tostring(customDimensions["code"]), failure = iff(name == "${e.failed}", "batch failed", "start failed")'
        '| summarize events = count(), lastSeen = max(timestamp), lastBatch = take_anyif(tostring(customDimensions["batchId"]), name == "${e.failed}") by transfer, failure, code'
        '| order by lastSeen desc'
      ],
      '\n'
    )
  }
  {
    name: 'transfer-keys-gone'
    title: 'Scheduled key comparisons: target keys gone at the source (docs/runbook.md#transfer-deletes)'
    visualization: 'table'
    width: '50'
    query: join(
      [
        'customEvents'
        '| where name == "${e.keysGone}"'
        '| extend transfer = tostring(customDimensions["transfer"]), gone = toint(customDimensions["goneAtSource"]), deleted = toint(customDimensions["deleted"])'
        '| summarize arg_max(timestamp, gone, deleted) by transfer'
        '| project transfer, lastSeen = timestamp, gone, deleted, left = gone - deleted'
        '| order by left desc'
      ],
      '\n'
    )
  }
  {
    name: 'function-failures'
    title: 'Function executions and failures'
    visualization: 'table'
    width: '100'
    query: join(
      [
        'requests'
        '| where cloud_RoleName =~ "${functionAppName}"'
        '| summarize executions = count(), failures = countif(success == false), p95ms = percentile(duration, 95) by operation_Name'
        '| order by failures desc, executions desc'
      ],
      '\n'
    )
  }
]

var header = [
  {
    type: 1
    name: 'intro'
    content: {
      json: '## Keel overview\nJobs, dead letters, zombies, maintenance, transfers and function failures from Application Insights, and the states of Keel\'s alert rules. The same overview, live and exact (the database counters), is the ops console at `/api/console/` of the function app. What each alert means and what to do: docs/runbook.md.'
    }
  }
  {
    type: 9
    name: 'parameters'
    content: {
      version: 'KqlParameterItem/1.0'
      style: 'pills'
      queryType: 0
      resourceType: ai
      parameters: [
        {
          id: 'a3c0f7a2-5d38-4c8e-9f0e-6b1d2c7e9a01'
          version: 'KqlParameterItem/1.0'
          name: 'TimeRange'
          label: 'Time range'
          type: 4
          isRequired: true
          value: {
            durationMs: 3600000
          }
          typeSettings: {
            selectableValues: [
              {
                durationMs: 3600000
              }
              {
                durationMs: 14400000
              }
              {
                durationMs: 86400000
              }
              {
                durationMs: 604800000
              }
            ]
          }
        }
      ]
    }
  }
]

var kqlItems = [
  for t in tiles: {
    type: 3
    name: t.name
    customWidth: t.width
    content: {
      version: 'KqlItem/1.0'
      title: t.title
      query: t.query
      size: 0
      timeContextFromParameter: 'TimeRange'
      queryType: 0
      resourceType: ai
      visualization: t.visualization
      noDataMessage: 'No data in this time range.'
    }
  }
]

var alertStates = {
  type: 3
  name: 'alert-states'
  customWidth: '100'
  content: {
    version: 'KqlItem/1.0'
    title: 'Keel alerts (fired in the last 7 days; states from Azure Resource Graph)'
    query: join(
      [
        'alertsmanagementresources'
        '| where type =~ "microsoft.alertsmanagement/alerts"'
        '| where tostring(properties.essentials.alertRule) contains "${alertRulePrefix}"'
        '| extend fired = todatetime(properties.essentials.startDateTime)'
        '| where fired > ago(7d)'
        '| project fired, rule = tostring(split(tostring(properties.essentials.alertRule), "/")[-1]), severity = tostring(properties.essentials.severity), condition = tostring(properties.essentials.monitorCondition), state = tostring(properties.essentials.alertState)'
        '| order by fired desc'
      ],
      '\n'
    )
    size: 0
    queryType: 1
    resourceType: 'microsoft.resourcegraph/resources'
    crossComponentResources: [
      subscription().id
    ]
    visualization: 'table'
    noDataMessage: 'No Keel alert fired in the last 7 days.'
  }
}

var workbookContent = {
  version: 'Notebook/1.0'
  items: concat(header, [alertStates], kqlItems)
  fallbackResourceIds: [
    appInsightsId
  ]
  '$schema': 'https://github.com/Microsoft/Application-Insights-Workbooks/blob/master/schema/workbook.json'
}

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  name: guid(resourceGroup().id, 'keel-overview-workbook')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: 'Keel overview'
    category: 'workbook'
    sourceId: appInsightsId
    serializedData: string(workbookContent)
  }
}

output id string = workbook.id
output name string = workbook.name
