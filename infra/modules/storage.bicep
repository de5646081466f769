// Storage for the Functions host (AzureWebJobsStorage: queues, leases, timers) and the Flex Consumption
// deployment package container. Shared-key access is disabled: everything goes through Microsoft Entra ID
// with the app's user-assigned identity (AzureWebJobsStorage__credential = managedidentity).

@description('Storage account name (3-24 lowercase letters and digits).')
@minLength(3)
@maxLength(24)
param name string

@description('Azure region.')
param location string

@description('Tags for every resource.')
param tags object

@description('Blob container that holds the Flex Consumption deployment package.')
param deploymentContainerName string

@description('Reachable only through private endpoints (the app reaches it through its virtual network).')
param privateOnly bool

resource storage 'Microsoft.Storage/storageAccounts@2025-01-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    accessTier: 'Hot'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    allowCrossTenantReplication: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: privateOnly ? 'Disabled' : 'Enabled'
    networkAcls: {
      bypass: privateOnly ? 'None' : 'AzureServices'
      defaultAction: privateOnly ? 'Deny' : 'Allow'
    }
  }

  resource blobService 'blobServices' = {
    name: 'default'

    resource deploymentContainer 'containers' = {
      name: deploymentContainerName
      properties: {
        publicAccess: 'None'
      }
    }
  }
}

output id string = storage.id
output name string = storage.name
output blobEndpoint string = storage.properties.primaryEndpoints.blob
output queueEndpoint string = storage.properties.primaryEndpoints.queue
output tableEndpoint string = storage.properties.primaryEndpoints.table
