// Azure SQL logical server and the Keel database, with Microsoft Entra-only authentication (no SQL logins).
// The Entra administrator installs the schema (npm run migrate) and runs infra/sql/post-provision.sql,
// which creates the app identity's database user with the least-privilege role keel_executor.

@description('Logical server name (globally unique).')
param serverName string

@description('Database name.')
param databaseName string

@description('Azure region.')
param location string

@description('Tags for every resource.')
param tags object

@description('Display name of the Microsoft Entra administrator (user, group or service principal).')
param adminLogin string

@description('Object id of the Microsoft Entra administrator.')
param adminObjectId string

@description('Kind of principal the administrator is.')
@allowed([
  'User'
  'Group'
  'Application'
])
param adminPrincipalType string

@description('Database SKU. Default: General Purpose serverless, 1 vCore, auto-pause after an hour idle.')
param databaseSku object

@description('Serverless only: minutes idle before auto-pause (-1 disables auto-pause).')
param autoPauseDelayMinutes int

@description('Public IPv4 address allowed through the server firewall (the machine that runs migrations); empty for none.')
param clientIpAddress string

@description('Open the firewall to every Azure service (the rule AllowAllWindowsAzureIps admits any tenant\'s Azure resources). Only for deployments without a virtual network; off by default.')
param allowAzureServices bool

@description('True when the function app has a way in (the virtual network\'s private endpoint, or allowAzureServices). False fails the deployment here, before anything is created that could not work.')
@allowed([
  true
])
param appCanReachSql bool

var isServerless = contains(string(databaseSku.name), '_S_')

resource sqlServer 'Microsoft.Sql/servers@2025-01-01' = {
  name: serverName
  location: location
  tags: tags
  properties: {
    minimalTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
    administrators: {
      administratorType: 'ActiveDirectory'
      azureADOnlyAuthentication: true
      login: adminLogin
      sid: adminObjectId
      tenantId: tenant().tenantId
      principalType: adminPrincipalType
    }
  }

  resource entraOnly 'azureADOnlyAuthentications' = {
    name: 'Default'
    properties: {
      azureADOnlyAuthentication: true
    }
  }

  // Flex Consumption apps without a virtual network reach SQL from Azure's shared outbound addresses, which only
  // this rule admits; with one they use the private endpoint and the rule stays off.
  resource azureServicesRule 'firewallRules' = if (allowAzureServices && appCanReachSql) {
    name: 'AllowAllWindowsAzureIps'
    properties: {
      startIpAddress: '0.0.0.0'
      endIpAddress: '0.0.0.0'
    }
  }

  resource allowClient 'firewallRules' = if (!empty(clientIpAddress)) {
    name: 'AllowDeploymentClient'
    properties: {
      startIpAddress: clientIpAddress
      endIpAddress: clientIpAddress
    }
  }

  resource database 'databases' = {
    name: databaseName
    location: location
    tags: tags
    sku: databaseSku
    properties: union(
      {
        collation: 'SQL_Latin1_General_CP1_CI_AS'
        zoneRedundant: false
        requestedBackupStorageRedundancy: 'Local'
      },
      isServerless
        ? {
            autoPauseDelay: autoPauseDelayMinutes
            minCapacity: json('0.5')
          }
        : {}
    )
  }
}

output serverId string = sqlServer.id
output serverName string = sqlServer.name
output serverFqdn string = sqlServer.properties.fullyQualifiedDomainName
output databaseName string = sqlServer::database.name
