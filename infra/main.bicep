// Keel on Azure: a Flex Consumption function app (Node 22 or 24) running as a user-assigned managed identity,
// identity-only storage, Log Analytics + Application Insights (Entra-only ingestion), Azure SQL with
// Microsoft Entra-only authentication, Key Vault for the Oracle credentials, role assignments, and alert
// rules. Deployed by `azd up` (azure.yaml) or `az deployment sub create` (docs/deploy.md).

targetScope = 'subscription'

@description('Environment name (azd: AZURE_ENV_NAME); prefixes the resource group and seeds resource names.')
@minLength(1)
@maxLength(32)
param environmentName string

@description('Azure region for every resource: one that offers Flex Consumption (az functionapp list-flexconsumption-locations).')
@allowed([
  'australiaeast'
  'australiasoutheast'
  'brazilsouth'
  'canadacentral'
  'centralindia'
  'centralus'
  'eastasia'
  'eastus'
  'eastus2'
  'francecentral'
  'germanywestcentral'
  'italynorth'
  'japaneast'
  'koreacentral'
  'northcentralus'
  'northeurope'
  'norwayeast'
  'southafricanorth'
  'southcentralus'
  'southeastasia'
  'southindia'
  'spaincentral'
  'swedencentral'
  'uaenorth'
  'uksouth'
  'ukwest'
  'westcentralus'
  'westeurope'
  'westus'
  'westus2'
  'westus3'
])
@metadata({
  azd: {
    type: 'location'
  }
})
param location string

@description('Resource group to create or update; default rg-<environmentName>.')
param resourceGroupName string = ''

@description('Object id of the deploying user or principal (azd: AZURE_PRINCIPAL_ID). Becomes the SQL Entra administrator unless sqlAdminObjectId is given, and gets Key Vault Secrets Officer to set the Oracle secrets.')
param principalId string

@description('Kind of principal principalId is (azd: AZURE_PRINCIPAL_TYPE).')
@allowed([
  'User'
  'Group'
  'ServicePrincipal'
])
param principalType string = 'User'

@description('SQL Entra administrator: display name (user principal name, group or app name).')
param sqlAdminLogin string = 'keel-entra-admin'

@description('SQL Entra administrator: object id; default principalId.')
param sqlAdminObjectId string = ''

@description('SQL Entra administrator: kind of principal.')
@allowed([
  'User'
  'Group'
  'Application'
])
param sqlAdminPrincipalType string = 'User'

@description('Public IPv4 address of the machine that runs migrations and the post-provision script (SQL firewall; Key Vault when vnetEnabled); empty for none.')
param clientIpAddress string = ''

@description('Private networking: the app gets outbound VNet integration and reaches Storage, SQL and Key Vault through private endpoints; Storage then refuses public access, SQL admits only clientIpAddress, Key Vault only clientIpAddress and trusted Azure services.')
param vnetEnabled bool = true

@description('Without a virtual network the app reaches SQL from Azure\'s shared outbound addresses: this opens the SQL firewall to every Azure service (any tenant). Needed, and only allowed to matter, when vnetEnabled is false.')
param sqlAllowAzureServices bool = false

@description('Address space of the virtual network (vnetEnabled).')
param vnetAddressPrefix string = '10.60.0.0/16'

@description('Subnet of the app\'s VNet integration (vnetEnabled); /24 leaves room for Flex Consumption scale-out.')
param vnetAppSubnetPrefix string = '10.60.0.0/24'

@description('Subnet of the private endpoints (vnetEnabled).')
param vnetEndpointSubnetPrefix string = '10.60.1.0/24'

@description('Database SKU (default General Purpose serverless Gen5, 1 vCore).')
param sqlDatabaseSku object = {
  name: 'GP_S_Gen5'
  tier: 'GeneralPurpose'
  family: 'Gen5'
  capacity: 1
}

@description('Serverless database: minutes idle before auto-pause (-1: never).')
param sqlAutoPauseDelayMinutes int = 60

@description('Node.js major version of the function app (Keel supports 22 and 24; package.json "engines").')
@allowed([
  '22'
  '24'
])
param nodeVersion string = '22'

@description('Memory per Flex Consumption instance (MB).')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

// Capacity plan (docs/deploy.md, "Capacity"): every instance holds one SQL pool of sqlPoolSize connections, so
// maximumInstanceCount × sqlPoolSize must stay within the database's concurrent worker limit, less headroom for
// migrations, maintenance and the portal. The deployment fails when it does not.
@description('Maximum Flex Consumption instances.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 10

@description('SQL connections per instance (KEEL_SQL_POOL_SIZE): the store and the transfer journal share one pool per process.')
@minValue(1)
@maxValue(200)
param sqlPoolSize int = 6

@description('Concurrent workers the database allows (Azure SQL resource limits; 75 for General Purpose serverless Gen5 with 1 max vCore). Raise it with the SKU.')
@minValue(10)
param sqlMaxWorkers int = 75

@description('Workers kept free for migrations, the post-provision script, maintenance queries and people.')
@minValue(0)
param sqlWorkerHeadroom int = 15

@description('Queue messages one instance fetches per queue function at a time (host.json extensions.queues.batchSize, set as an app setting).')
@minValue(1)
@maxValue(32)
param queueBatchSize int = 8

@description('Fetch the next batch when this many messages of the last are still running (extensions.queues.newBatchThreshold). Per-instance concurrency of one queue function is batchSize + newBatchThreshold.')
@minValue(0)
@maxValue(32)
param queueNewBatchThreshold int = 4

@description('Concurrent HTTP requests per instance before the platform adds one (Flex Consumption perInstanceConcurrency).')
@minValue(1)
@maxValue(1000)
param httpPerInstanceConcurrency int = 16

@description('Log Analytics retention (days).')
@minValue(30)
@maxValue(730)
param logRetentionDays int = 30

@description('Oracle connect string, stored in Key Vault; empty to set the secret later.')
@secure()
param oracleConnectString string = ''

@description('Oracle user, stored in Key Vault; empty to set the secret later.')
@secure()
param oracleUser string = ''

@description('Oracle password, stored in Key Vault; empty to set the secret later.')
@secure()
param oraclePassword string = ''

@description('Client id of the Entra app registration for App Service authentication in front of the ops API (its app roles include the operator role). Empty: authentication is not configured and operator-only ops routes refuse every call.')
param opsAuthClientId string = ''

@description('Entra group object ids (comma-separated) whose members may sign in to the ops API and console at all (App Service authentication authorization policy). With opsAuthClientId set, this or opsAllowedApplicationIds must name someone: otherwise every principal of the tenant gets in (review F1) and the deployment fails.')
param opsAllowedGroupIds string = ''

@description('Client (application) ids (comma-separated) of the callers allowed to get tokens for the ops API: the console\'s own registration and any producer service. Empty: any application of the tenant.')
param opsAllowedApplicationIds string = ''

@description('App role (Entra app role) for the reader level: every read route on the console path.')
param opsReaderRole string = 'Keel.Reader'

@description('App role for the producer level: enqueue (POST /jobs) without a function key.')
param opsProducerRole string = 'Keel.Producer'

@description('App role for the operator level: every destructive route and every transfer write.')
param opsOperatorRole string = 'Keel.Operator'

@description('Dispatcher timer (six-field NCRONTAB).')
param dispatchSchedule string = '0 * * * * *'

@description('Maintenance timer (six-field NCRONTAB).')
param maintenanceSchedule string = '0 * * * * *'

@description('Extra app settings merged over the defaults (name → value).')
param extraAppSettings object = {}

@description('E-mail addresses the alerts notify, comma-separated (azd: KEEL_ALERT_EMAILS). This and/or alertActionGroupId is required.')
param alertEmailAddresses string = ''

@description('Resource id of an existing action group the alerts also notify (azd: KEEL_ALERT_ACTION_GROUP_ID).')
param alertActionGroupId string = ''

@description('HTTPS webhook the action group calls, e.g. a chat or paging integration (azd: KEEL_ALERT_WEBHOOK_URL); empty for none.')
@secure()
param alertWebhookUrl string = ''

@description('Application Insights standard availability test of the anonymous /api/health route, with an alert.')
param availabilityTestEnabled bool = true

@description('Alert: DLQ growth window.')
@allowed([
  'PT15M'
  'PT30M'
  'PT1H'
  'PT2H'
  'PT6H'
  'P1D'
])
param dlqGrowthWindow string = 'PT1H'

@description('Alert: more than this many DLQ moves of one queue in the window.')
param dlqGrowthThreshold int = 10

@description('Alert: dead-letter rate window.')
@allowed([
  'PT15M'
  'PT30M'
  'PT1H'
  'PT2H'
  'PT6H'
])
param deadLetterRateWindow string = 'PT1H'

@description('Alert: dead-letter rate above this percentage of finished jobs.')
param deadLetterRatePercent int = 5

@description('Alert: dead-letter rate judged only with at least this many finished jobs.')
param deadLetterRateMinJobs int = 20

@description('Alert: zombie window.')
@allowed([
  'PT15M'
  'PT30M'
  'PT1H'
  'PT6H'
])
param zombieWindow string = 'PT1H'

@description('Alert: more than this many zombies rescued in the window.')
param zombiesRescuedThreshold int = 0

@description('Alert: lease-lost window.')
@allowed([
  'PT5M'
  'PT15M'
  'PT30M'
  'PT1H'
])
param leaseLostWindow string = 'PT15M'

@description('Alert: more than this many lease-lost conflicts of one queue in the window.')
param leaseLostThreshold int = 25

@description('Alert: a batch unresolved for longer than this many minutes.')
param unresolvedBatchMinutes int = 30

@description('Alert: a batch reported unresolved within this many minutes is still unresolved.')
param unresolvedRecheckMinutes int = 15

@description('Alert: a transfer whose target has been behind its source for longer than this many minutes (keep it above the longest per-transfer schedule interval).')
param transferFreshnessMinutes int = 180

@description('Alert: how far back the latest transfer freshness report is looked for (at least one transfer timer interval).')
param transferFreshnessLookbackMinutes int = 120

@description('Alert: a transfer whose every rows-behind report within transferRowsBehindMinutes counted more than this many rows (keep it below KEEL_TRANSFER_ROWS_BEHIND_CAP, default 1,000,000).')
param transferRowsBehindThreshold int = 500000

@description('Alert: how long a transfer backlog must stay above transferRowsBehindThreshold, in minutes.')
param transferRowsBehindMinutes int = 120

@description('Alert: queue lag above this many minutes.')
param queueLagMinutes int = 10

@description('Alert: queue lag window.')
@allowed([
  'PT5M'
  'PT15M'
  'PT30M'
])
param queueLagWindow string = 'PT15M'

@description('Alert: maintenance timer silent for this many minutes.')
param maintenanceStaleMinutes int = 15

@description('Alert: function failure window.')
@allowed([
  'PT5M'
  'PT15M'
  'PT30M'
  'PT1H'
])
param functionFailureWindow string = 'PT15M'

@description('Alert: more than this many failures of one function in the window.')
param functionFailureThreshold int = 5

var token = toLower(uniqueString(subscription().id, environmentName, location))
var prefix = toLower(take(replace(environmentName, '_', '-'), 16))
var tags = {
  'azd-env-name': environmentName
  application: 'keel'
}
var names = {
  resourceGroup: empty(resourceGroupName) ? 'rg-${environmentName}' : resourceGroupName
  identity: 'id-${prefix}-${token}'
  storage: take('st${replace(prefix, '-', '')}${token}', 24)
  deploymentContainer: 'app-package-${take(token, 8)}'
  logAnalytics: 'log-${prefix}-${token}'
  appInsights: 'appi-${prefix}-${token}'
  sqlServer: 'sql-${prefix}-${token}'
  sqlDatabase: 'keel'
  keyVault: take('kv${replace(prefix, '-', '')}${token}', 24)
  plan: 'plan-${prefix}-${token}'
  functionApp: 'func-${prefix}-${token}'
  vnet: 'vnet-${prefix}-${token}'
}
var alertEmails = filter(map(split(alertEmailAddresses, ','), address => trim(address)), address => !empty(address))
var alertReceivers = concat(alertEmails, empty(alertActionGroupId) ? [] : [alertActionGroupId])
var oracleSecretNames = {
  connectString: 'keel-oracle-connect-string'
  user: 'keel-oracle-user'
  password: 'keel-oracle-password'
}

resource rg 'Microsoft.Resources/resourceGroups@2025-04-01' = {
  name: names.resourceGroup
  location: location
  tags: tags
}

module identity 'modules/identity.bicep' = {
  scope: rg
  params: {
    name: names.identity
    location: location
    tags: tags
  }
}

module storage 'modules/storage.bicep' = {
  scope: rg
  params: {
    name: names.storage
    location: location
    tags: tags
    deploymentContainerName: names.deploymentContainer
    privateOnly: vnetEnabled
  }
}

module monitoring 'modules/monitoring.bicep' = {
  scope: rg
  params: {
    logAnalyticsName: names.logAnalytics
    appInsightsName: names.appInsights
    location: location
    tags: tags
    retentionInDays: logRetentionDays
  }
}

module sql 'modules/sql.bicep' = {
  scope: rg
  params: {
    serverName: names.sqlServer
    databaseName: names.sqlDatabase
    location: location
    tags: tags
    adminLogin: sqlAdminLogin
    adminObjectId: empty(sqlAdminObjectId) ? principalId : sqlAdminObjectId
    adminPrincipalType: sqlAdminPrincipalType
    databaseSku: sqlDatabaseSku
    autoPauseDelayMinutes: sqlAutoPauseDelayMinutes
    clientIpAddress: clientIpAddress
    allowAzureServices: sqlAllowAzureServices && !vnetEnabled
    // Checked by the deployment, not the compiler (json() hides the value): false fails the deployment.
    appCanReachSql: json(string(vnetEnabled || sqlAllowAzureServices))
  }
}

module keyVault 'modules/keyvault.bicep' = {
  scope: rg
  params: {
    name: names.keyVault
    location: location
    tags: tags
    secretNames: oracleSecretNames
    restrictPublicAccess: vnetEnabled
    clientIpAddress: clientIpAddress
    oracleConnectString: oracleConnectString
    oracleUser: oracleUser
    oraclePassword: oraclePassword
  }
}

module network 'modules/network.bicep' = if (vnetEnabled) {
  scope: rg
  params: {
    name: names.vnet
    location: location
    tags: tags
    addressPrefix: vnetAddressPrefix
    appSubnetPrefix: vnetAppSubnetPrefix
    endpointSubnetPrefix: vnetEndpointSubnetPrefix
    storageAccountName: names.storage
    sqlServerName: names.sqlServer
    keyVaultName: names.keyVault
  }
  // Names are known up front (better what-if); the resources must exist first.
  dependsOn: [
    storage
    sql
    keyVault
  ]
}

module roles 'modules/roles.bicep' = {
  scope: rg
  params: {
    identityName: names.identity
    principalId: identity.outputs.principalId
    storageAccountName: names.storage
    keyVaultName: names.keyVault
    appInsightsName: names.appInsights
    deployerPrincipalId: principalId
    deployerPrincipalType: principalType
  }
  // Names are known up front (better what-if); the resources must exist first.
  dependsOn: [
    storage
    keyVault
    monitoring
  ]
}

var keyVaultReference = map(
  items(oracleSecretNames),
  entry => {
    key: entry.key
    value: '@Microsoft.KeyVault(SecretUri=${keyVault.outputs.uri}secrets/${entry.value}/)'
  }
)
var oracleRefs = toObject(keyVaultReference, entry => entry.key, entry => entry.value)

var appSettings = union(
  {
    // Host storage, identity-based (no connection string, shared keys disabled on the account). The service URIs
    // are the account's own endpoints (right in every cloud); Keel's queue client reads __queueServiceUri too.
    AzureWebJobsStorage__blobServiceUri: storage.outputs.blobEndpoint
    AzureWebJobsStorage__queueServiceUri: storage.outputs.queueEndpoint
    AzureWebJobsStorage__tableServiceUri: storage.outputs.tableEndpoint
    AzureWebJobsStorage__credential: 'managedidentity'
    AzureWebJobsStorage__clientId: identity.outputs.clientId
    // Telemetry: Entra-authenticated ingestion with the same identity.
    APPLICATIONINSIGHTS_CONNECTION_STRING: monitoring.outputs.connectionString
    APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identity.outputs.clientId};Authorization=AAD'
    // The identity DefaultAzureCredential / ManagedIdentityCredential use (SQL, storage queues).
    AZURE_CLIENT_ID: identity.outputs.clientId
    // Job store and transfer source: Azure SQL with Entra auth.
    KEEL_STORE_ENGINE: 'sqlserver'
    KEEL_SQL_CONNECTION: 'Server=tcp:${sql.outputs.serverFqdn},1433;Database=${sql.outputs.databaseName};Authentication=Active Directory Managed Identity;User Id=${identity.outputs.clientId};Encrypt=True;TrustServerCertificate=False'
    // Capacity plan: the pool per instance, and the queue trigger's batch (host.json values, overridden here).
    KEEL_SQL_POOL_SIZE: string(sqlPoolSize)
    AzureFunctionsJobHost__extensions__queues__batchSize: string(queueBatchSize)
    AzureFunctionsJobHost__extensions__queues__newBatchThreshold: string(queueNewBatchThreshold)
    // Transfer target: Oracle credentials from Key Vault.
    KEEL_ORACLE_CONNECT_STRING: oracleRefs.connectString
    KEEL_ORACLE_USER: oracleRefs.user
    KEEL_ORACLE_PASSWORD: oracleRefs.password
    // Ops API and timers.
    KEEL_OPS_READER_ROLE: opsReaderRole
    KEEL_OPS_PRODUCER_ROLE: opsProducerRole
    KEEL_OPS_OPERATOR_ROLE: opsOperatorRole
    KEEL_DISPATCH_SCHEDULE: dispatchSchedule
    KEEL_MAINTENANCE_SCHEDULE: maintenanceSchedule
  },
  extraAppSettings
)

module functionApp 'modules/functionapp.bicep' = {
  scope: rg
  params: {
    name: names.functionApp
    planName: names.plan
    location: location
    tags: tags
    azdServiceName: 'api'
    identityId: identity.outputs.id
    blobEndpoint: storage.outputs.blobEndpoint
    deploymentContainerName: names.deploymentContainer
    nodeVersion: nodeVersion
    instanceMemoryMB: instanceMemoryMB
    maximumInstanceCount: maximumInstanceCount
    // Checked by the deployment, not the compiler (json() hides the value): false fails the deployment.
    capacityFitsDatabase: json(string(maximumInstanceCount * sqlPoolSize <= sqlMaxWorkers - sqlWorkerHeadroom))
    httpPerInstanceConcurrency: httpPerInstanceConcurrency
    virtualNetworkSubnetId: vnetEnabled ? network!.outputs.appSubnetId : ''
    appSettings: appSettings
    opsAuthClientId: opsAuthClientId
    opsAuthTenantId: tenant().tenantId
    opsAllowedGroupIds: filter(map(split(opsAllowedGroupIds, ','), id => trim(id)), id => !empty(id))
    opsAllowedApplicationIds: filter(map(split(opsAllowedApplicationIds, ','), id => trim(id)), id => !empty(id))
    // Checked by the deployment, not the compiler (json() hides the value): false fails the deployment.
    opsAuthorizationPolicyGiven: json(string(empty(opsAuthClientId) || !empty(trim(opsAllowedGroupIds)) || !empty(trim(opsAllowedApplicationIds))))
  }
  // The app must not start before it may read its storage, secrets and telemetry endpoint.
  dependsOn: [
    roles
  ]
}

module alerts 'modules/alerts.bicep' = {
  scope: rg
  params: {
    namePrefix: 'keel-${prefix}'
    location: location
    tags: tags
    appInsightsId: monitoring.outputs.appInsightsId
    functionAppName: functionApp.outputs.name
    alertEmailAddresses: alertEmails
    existingActionGroupId: alertActionGroupId
    alertWebhookUrl: alertWebhookUrl
    alertReceivers: alertReceivers
    availabilityTestEnabled: availabilityTestEnabled
    availabilityTestUrl: 'https://${functionApp.outputs.defaultHostName}/api/health'
    dlqGrowthWindow: dlqGrowthWindow
    dlqGrowthThreshold: dlqGrowthThreshold
    deadLetterRateWindow: deadLetterRateWindow
    deadLetterRatePercent: deadLetterRatePercent
    deadLetterRateMinJobs: deadLetterRateMinJobs
    zombieWindow: zombieWindow
    zombiesRescuedThreshold: zombiesRescuedThreshold
    leaseLostWindow: leaseLostWindow
    leaseLostThreshold: leaseLostThreshold
    unresolvedBatchMinutes: unresolvedBatchMinutes
    unresolvedRecheckMinutes: unresolvedRecheckMinutes
    transferFreshnessMinutes: transferFreshnessMinutes
    transferFreshnessLookbackMinutes: transferFreshnessLookbackMinutes
    transferRowsBehindThreshold: transferRowsBehindThreshold
    transferRowsBehindMinutes: transferRowsBehindMinutes
    queueLagMinutes: queueLagMinutes
    queueLagWindow: queueLagWindow
    maintenanceStaleMinutes: maintenanceStaleMinutes
    functionFailureWindow: functionFailureWindow
    functionFailureThreshold: functionFailureThreshold
  }
}

// The "Keel overview" workbook: the console's overview in the portal (docs/runbook.md).
module workbook 'modules/workbook.bicep' = {
  scope: rg
  params: {
    location: location
    tags: tags
    appInsightsId: monitoring.outputs.appInsightsId
    functionAppName: functionApp.outputs.name
    alertRulePrefix: 'keel-${prefix}'
  }
}

// azd writes these into the environment (.azure/<env>/.env); the post-provision hook uses them.
output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_APP_NAME string = functionApp.outputs.name
output AZURE_FUNCTION_APP_URL string = 'https://${functionApp.outputs.defaultHostName}'
output KEEL_IDENTITY_NAME string = identity.outputs.name
output KEEL_IDENTITY_CLIENT_ID string = identity.outputs.clientId
output KEEL_IDENTITY_PRINCIPAL_ID string = identity.outputs.principalId
output KEEL_SQLSERVER_SERVER string = sql.outputs.serverFqdn
output KEEL_SQLSERVER_DATABASE string = sql.outputs.databaseName
output KEEL_KEY_VAULT_NAME string = keyVault.outputs.name
output KEEL_ORACLE_SECRET_NAMES object = oracleSecretNames
output APPLICATIONINSIGHTS_NAME string = monitoring.outputs.appInsightsName
output KEEL_ALERT_RULES array = alerts.outputs.alertRuleNames
output KEEL_WORKBOOK_ID string = workbook.outputs.id
output KEEL_VNET_ENABLED bool = vnetEnabled
