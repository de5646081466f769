// Key Vault for the Oracle credentials. RBAC authorization (no access policies); the app reads the secrets
// through Key Vault references in its app settings, resolved with its user-assigned identity
// (Key Vault Secrets User, assigned in roles.bicep). Secrets given as parameters are written here;
// otherwise set them later (docs/deploy.md) — the references resolve once the secrets exist.

@description('Key Vault name (globally unique, 3-24 characters).')
@minLength(3)
@maxLength(24)
param name string

@description('Azure region.')
param location string

@description('Tags for every resource.')
param tags object

@description('Secret names, keyed by purpose.')
param secretNames {
  connectString: string
  user: string
  password: string
}

@description('Deny public access except from clientIpAddress (the app reads the vault through its private endpoint).')
param restrictPublicAccess bool

@description('Public IPv4 address of the deploying machine, admitted when restrictPublicAccess is on (to set the Oracle secrets); empty for none.')
param clientIpAddress string

@description('Oracle connect string (EZConnect or TNS descriptor); empty to set it later.')
@secure()
param oracleConnectString string

@description('Oracle user name; empty to set it later.')
@secure()
param oracleUser string

@description('Oracle password; empty to set it later.')
@secure()
param oraclePassword string

resource vault 'Microsoft.KeyVault/vaults@2026-02-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    tenantId: tenant().tenantId
    sku: {
      family: 'A'
      name: 'standard'
    }
    enableRbacAuthorization: true
    enableSoftDelete: true
    softDeleteRetentionInDays: 90
    enablePurgeProtection: true
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: restrictPublicAccess ? 'Deny' : 'Allow'
      ipRules: restrictPublicAccess && !empty(clientIpAddress)
        ? [
            {
              value: clientIpAddress
            }
          ]
        : []
    }
  }

  resource connectStringSecret 'secrets' = if (!empty(oracleConnectString)) {
    name: secretNames.connectString
    properties: {
      value: oracleConnectString
      contentType: 'text/plain'
    }
  }

  resource userSecret 'secrets' = if (!empty(oracleUser)) {
    name: secretNames.user
    properties: {
      value: oracleUser
      contentType: 'text/plain'
    }
  }

  resource passwordSecret 'secrets' = if (!empty(oraclePassword)) {
    name: secretNames.password
    properties: {
      value: oraclePassword
      contentType: 'text/plain'
    }
  }
}

output id string = vault.id
output name string = vault.name
output uri string = vault.properties.vaultUri
