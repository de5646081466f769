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
  '22'
  '24'
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

@description('True when maximumInstanceCount × the SQL pool per instance fits the database\'s worker limit less headroom (main.bicep computes it). False fails the deployment: lower maximumInstanceCount or sqlPoolSize, or raise sqlMaxWorkers with a bigger database.')
@allowed([
  true
])
param capacityFitsDatabase bool

@description('Concurrent HTTP requests one instance takes before the platform scales out.')
@minValue(1)
@maxValue(1000)
param httpPerInstanceConcurrency int

@description('Resource id of the subnet for outbound VNet integration (delegated to Microsoft.App/environments); empty for none.')
param virtualNetworkSubnetId string

@description('App settings (name → value).')
param appSettings object

@description('Client id of the Entra app registration for App Service authentication in front of the ops API. Empty: not configured, and the operator-only ops routes refuse every call.')
param opsAuthClientId string

@description('Tenant of that app registration.')
param opsAuthTenantId string

@description('Entra group object ids whose members may authenticate at all (the authorization policy).')
param opsAllowedGroupIds array = []

@description('Client ids of the applications whose tokens are accepted (the console registration, producer services).')
param opsAllowedApplicationIds array = []

@description('True when App Service authentication is off, or when it names the groups or applications allowed (main.bicep computes it). False fails the deployment: authentication without an authorization policy lets every member, guest and workload identity of the tenant in (review F1).')
@allowed([
  true
])
param opsAuthorizationPolicyGiven bool

resource plan 'Microsoft.Web/serverfarms@2025-03-01' = {
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

resource site 'Microsoft.Web/sites@2025-03-01' = {
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
    virtualNetworkSubnetId: empty(virtualNetworkSubnetId) ? null : virtualNetworkSubnetId
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
        maximumInstanceCount: capacityFitsDatabase ? maximumInstanceCount : 1
        instanceMemoryMB: instanceMemoryMB
        triggers: {
          http: {
            perInstanceConcurrency: httpPerInstanceConcurrency
          }
        }
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

  // App Service authentication: validates Entra tokens and sets x-ms-client-principal (with the caller's app
  // roles) on every request, stripping any the caller sent. Anonymous callers still pass through to the function
  // key check, so key holders keep the reader and producer levels; every role level is checked by Keel itself
  // (docs/operations.md). The authorization policy admits only the named groups and applications.
  resource auth 'config' = if (!empty(opsAuthClientId) && opsAuthorizationPolicyGiven) {
    name: 'authsettingsV2'
    properties: {
      platform: {
        enabled: true
      }
      globalValidation: {
        requireAuthentication: false
        unauthenticatedClientAction: 'AllowAnonymous'
      }
      identityProviders: {
        azureActiveDirectory: {
          enabled: true
          registration: {
            clientId: opsAuthClientId
            openIdIssuer: '${environment().authentication.loginEndpoint}${opsAuthTenantId}/v2.0'
          }
          validation: {
            allowedAudiences: [
              'api://${opsAuthClientId}'
              opsAuthClientId
            ]
            defaultAuthorizationPolicy: {
              allowedApplications: opsAllowedApplicationIds
              allowedPrincipals: {
                groups: opsAllowedGroupIds
              }
            }
          }
        }
      }
      login: {
        tokenStore: {
          enabled: false
        }
      }
    }
  }
}

output id string = site.id
output name string = site.name
output defaultHostName string = site.properties.defaultHostName
