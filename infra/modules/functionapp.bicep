// Flex Consumption plan (FC1) and the Linux function app (Node), running as the user-assigned identity.
// The deployment package lives in a blob container of the app's storage account, read with the same
// identity; the host's own storage (AzureWebJobsStorage__*) is identity-based too.

@description('Function app name (globally unique).')
param name string

@description('Flex Consumption plan name.')
param planName string

@description('Azure region (must offer Flex Consumption).')
param location string

@description('Tags for every resource; the app also gets the azd service tag.')
param tags object

@description('azd service name in azure.yaml.')
param azdServiceName string

@description('Resource id of the user-assigned identity.')
param identityId string

@description('Blob endpoint of the storage account (ends with /).')
param blobEndpoint string

@description('Container for the deployment package.')
param deploymentContainerName string

@description('Node.js major version.')
@allowed([
  '20'
  '22'
])
param nodeVersion string

@description('Memory per instance in MB.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int

@description('Upper bound on instances the plan scales out to.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int

@description('App settings (name → value).')
param appSettings object

resource plan 'Microsoft.Web/serverfarms@2024-11-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    tier: 'FlexConsumption'
    name: 'FC1'
  }
  properties: {
    reserved: true
  }
}

resource site 'Microsoft.Web/sites@2024-11-01' = {
  name: name
  location: location
  tags: union(tags, { 'azd-service-name': azdServiceName })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    keyVaultReferenceIdentity: identityId
    siteConfig: {
      minTlsVersion: '1.2'
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${blobEndpoint}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
      }
      runtime: {
        name: 'node'
        version: nodeVersion
      }
    }
  }

  resource settings 'config' = {
    name: 'appsettings'
    properties: appSettings
  }
}

output id string = site.id
output name string = site.name
output defaultHostName string = site.properties.defaultHostName
